"""A seeded fleet of simulated agents that call the real local HTTP API, make planted mistakes
and follow the playbook entries ``GET /playbooks`` serves.

Every call goes over HTTP (httpx) to the API the local stack serves, so each one becomes an op
record through the gateway's observation middleware; the mistakes are real requests that the
tools really refuse (an unknown column, an unknown worker id, ``/match`` without its filters, a
malformed body), and what only a runtime knows (a model call that timed out, a result cut at the
row cap, a rescue, an overseer's correction) is reported to ``POST /events``.

**Tasks** (each sent with ``x-opslake-task-class`` and an ``x-opslake-session-id`` per task):

* ``staff_job``: find N workers for a role in a place (``POST /match``), then read the picks
  (``GET /worker/{id}``).
* ``sql_question``: answer a question over ``workers``/``placements`` with ``POST /sql``.
* ``worker_lookup``: read the record of the best-rated worker of a role in a city: find the id with
  ``POST /sql``, then ``GET /worker/{id}``.

**Mistakes** (:data:`MODES`): each agent has its own probability per mode, drawn from the seed.
All random draws of a task happen before it runs (:class:`TaskPlan`), so two simulators with the
same seed plan identical tasks and roll identical mistakes whatever the server answers: only
the playbook entries they read can change what they do.

**How agents follow playbook entries.** Before each task an agent reads
``GET /playbooks?task_class=<class>&limit=50`` (the server returns the active entries whose
``task_class`` is that class or none, whatever their endpoint). An entry is *followed* for a
mistake mode when all of these hold:

1. it targets the mode's step: its ``endpoint`` is one the mode happens on (``/sql``,
   ``/worker/{id}``, ``/match``, ``runtime:model_call``), or it names no endpoint and its
   ``task_class`` is the task's class (an entry naming neither is too vague to act on and is
   ignored);
2. it is about this mode: if its trigger or action names any mode's keywords
   (:attr:`Mode.keywords`, whole words, case-insensitive), it is followed only for the modes it
   names; an entry that names no mode's keywords covers every mode of its step;
3. its ``confidence`` is at least ``min_confidence`` (default 0).

``kind`` decides nothing: ``avoid`` ("avoid guessing column names") and ``do`` ("describe the
table first") both switch on the careful way of doing the step. Careful means: for ``/sql``,
``GET /tables/{name}`` first and only columns it lists (``sql_guessed_column``), an aggregate
instead of listing rows (``sql_row_cap``), a body built by a JSON encoder (``malformed_body``);
for ``/worker/{id}``, ids found with ``/match`` or ``/sql`` first, never guessed; for ``/match``,
``role`` and ``state``/``city`` always sent; for ``runtime:model_call``, a smaller prompt (no
timeout). A followed entry is counted in :attr:`CycleStats.entries_followed` once per task.
With ``playbooks_enabled=False`` agents never read ``/playbooks`` (the "without" arm).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import httpx

from opslake.datasets.staffing import CITIES, ROLES

TASK_CLASSES = ("staff_job", "sql_question", "worker_lookup")
_TASK_WEIGHTS = (0.4, 0.4, 0.2)
SESSION_HEADER = "x-opslake-session-id"
TASK_CLASS_HEADER = "x-opslake-task-class"
WORKER_ROUTE = "/worker/{id}"
MODEL_CALL = "runtime:model_call"
ROW_LIMIT = 100  # what an agent asks /sql for when it lists rows


@dataclass(frozen=True)
class Mode:
    """A planted mistake: where it happens, how likely it is by default, the words that name it."""

    name: str
    endpoints: tuple[str, ...]
    base_rate: float
    keywords: tuple[str, ...]
    description: str


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("sql_guessed_column", ("/sql",), 0.4,
             ("column", "columns", "describe", "schema", "/tables", "sql_column_not_found"),
             "SQL with a guessed column name (salary instead of hourly_rate)"),
        Mode("sql_row_cap", ("/sql",), 0.25,
             ("truncated", "row cap", "limit", "aggregate", "count", "rows"),
             "lists rows and counts them itself: the answer is cut at the row cap"),
        Mode("malformed_body", ("/sql", "/match"), 0.08,
             ("json", "malformed", "body", "invalid json"),
             "a hand-built JSON body cut short"),
        Mode("worker_guessed_id", (WORKER_ROUTE,), 0.35,
             ("id", "ids", "worker_id", "guess", "guessed", "guessing", "look up", "lookup", "not_found"),
             "GET /worker/{id} with an id from memory (unknown or malformed)"),
        Mode("match_missing_filters", ("/match",), 0.3,
             ("role", "city", "state", "filter", "filters", "required", "missing"),
             "POST /match without role and city/state"),
        Mode("runtime_timeout", (MODEL_CALL,), 0.12,
             ("timeout", "timed out", "prompt", "smaller"),
             "the agent's own model call times out (reported to /events)"),
    )
}  # fmt: skip
# Which modes each task can hit.
TASK_MODES: dict[str, tuple[str, ...]] = {
    "staff_job": ("match_missing_filters", "malformed_body", "worker_guessed_id", "runtime_timeout"),
    "sql_question": ("sql_guessed_column", "sql_row_cap", "malformed_body", "runtime_timeout"),
    "worker_lookup": ("worker_guessed_id", "runtime_timeout"),
}
TASK_ENDPOINTS: dict[str, tuple[str, ...]] = {
    "staff_job": ("/match", WORKER_ROUTE, MODEL_CALL),
    "sql_question": ("/sql", MODEL_CALL),
    "worker_lookup": ("/sql", WORKER_ROUTE, MODEL_CALL),
}


# ---- SQL questions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    """A data question: the SQL with ``{col}`` where the agent may guess a column name wrong."""

    name: str
    table: str
    text: str
    sql: str
    column: str  # the real column behind {col}
    guesses: tuple[str, ...]  # what a careless agent writes instead
    listing_sql: str  # how an agent that lists rows instead of aggregating asks (hits the row cap)


QUESTIONS: tuple[Question, ...] = (
    Question("avg_rate", "workers", "average hourly rate of {role}s in {state}",
             "SELECT round(avg({col}), 2) AS avg_rate, count(*) AS workers FROM workers "
             "WHERE role = '{role}' AND state = '{state}'",
             "hourly_rate", ("salary", "pay_rate", "hourly_wage"),
             "SELECT worker_id, hourly_rate FROM workers WHERE role = '{role}'"),
    Question("available", "workers", "how many {role}s can start immediately",
             "SELECT count(*) AS available FROM workers WHERE role = '{role}' AND {col} = 'immediate'",
             "availability", ("status", "available_from", "availability_status"),
             "SELECT worker_id FROM workers WHERE role = '{role}'"),
    Question("active_by_client", "placements", "active placements per client",
             "SELECT client, count(*) AS active FROM placements WHERE {col} = 'active' "
             "GROUP BY client ORDER BY active DESC",
             "status", ("placement_status", "state_code", "is_active"),
             "SELECT placement_id, client FROM placements"),
    Question("top_rated", "workers", "best rated {role}s in {state}",
             "SELECT worker_id, name, {col} FROM workers WHERE role = '{role}' AND state = '{state}' "
             "ORDER BY {col} DESC, worker_id LIMIT 5",
             "rating", ("score", "stars", "review_score"),
             "SELECT worker_id, rating FROM workers WHERE role = '{role}'"),
)  # fmt: skip


# ---- agents, plans, stats -----------------------------------------------------------------------
@dataclass(frozen=True)
class SimAgent:
    """One simulated agent: its API key (its name is the agent's identity) and mistake rates."""

    agent_id: str
    api_key: str
    mistakes: Mapping[str, float]
    rescue_rate: float = 0.7
    overseer_rate: float = 0.3
    log_rate: float = 0.3


def mistake_profile(seed: int, index: int) -> dict[str, float]:
    """Agent ``index``'s probability per mode: the mode's base rate × a factor from 0.5 to 1.5."""
    rng = random.Random(f"profile:{seed}:{index}")
    return {name: round(min(0.9, mode.base_rate * rng.uniform(0.5, 1.5)), 3) for name, mode in MODES.items()}


def create_agents(
    create_key: Callable[[str], Any], count: int = 8, *, seed: int = 7, prefix: str = "sim-agent"
) -> list[SimAgent]:
    """``count`` agents named ``<prefix>-01``…, each with an API key from ``create_key(name)``
    (e.g. ``LocalStack.create_api_key``: anything with a ``value``) and a seeded mistake profile."""
    if not 1 <= count <= 99:
        raise ValueError(f"count must be from 1 to 99, got {count}")
    agents = []
    for index in range(count):
        name = f"{prefix}-{index + 1:02d}"
        agents.append(SimAgent(name, str(create_key(name).value), mistake_profile(seed, index)))
    return agents


@dataclass(frozen=True)
class TaskPlan:
    """Everything random about one task, drawn before it runs."""

    task_class: str
    role: str
    city: str
    state: str
    count: int
    need: str
    question: Question
    guess: str
    rolls: Mapping[str, bool]  # mode → whether the agent makes that mistake (if nothing stops it)
    guessed_id: str
    rescue: bool
    overseer: bool
    log: bool
    timeout_rescued: bool
    durations: tuple[float, ...]


def plan_task(rng: random.Random, agent: SimAgent) -> TaskPlan:
    """Draw one task; the number of draws never depends on the outcome (same seed, same plans)."""
    task_class = rng.choices(TASK_CLASSES, weights=_TASK_WEIGHTS)[0]
    role = rng.choice(ROLES)
    city, state = rng.choice(CITIES)
    skills = rng.sample(role.skills, 2)
    cert = rng.choice(role.certifications)
    question = rng.choice(QUESTIONS)
    guess = rng.choice(question.guesses)
    rolls = {name: rng.random() < agent.mistakes.get(name, 0.0) for name in MODES}
    number = rng.randint(0, 2)
    guessed_id = (f"W{rng.randint(90000, 99999)}", f"w-{rng.randint(100, 9999)}", str(rng.randint(1, 3000)))[
        number
    ]
    return TaskPlan(
        task_class=task_class,
        role=role.name,
        city=city,
        state=state,
        count=rng.randint(2, 4),
        need=f"{skills[0]}, {skills[1]}" + (f", {cert}" if rng.random() < 0.5 else ""),
        question=question,
        guess=guess,
        rolls=rolls,
        guessed_id=guessed_id,
        rescue=rng.random() < agent.rescue_rate,
        overseer=rng.random() < agent.overseer_rate,
        log=rng.random() < agent.log_rate,
        timeout_rescued=rng.random() < 0.6,
        durations=tuple(round(rng.lognormvariate(6, 0.6), 1) for _ in range(4)),
    )


@dataclass(frozen=True)
class Call:
    """One HTTP call an agent made: what it asked and what the tool answered."""

    agent_id: str
    task_class: str
    method: str
    route: str  # the template route, e.g. /worker/{id} (the op record's endpoint)
    status: int
    error: str | None  # the tool's stable error code on a failure
    mode: str | None  # the planted mistake behind the call, if any


@dataclass
class CycleStats:
    """What one cycle did. ``failures_seen`` counts every failure an agent saw: tool answers
    >= 400, answers cut at the row cap, and its own model-call timeouts."""

    cycle: int
    playbooks_enabled: bool
    agents: int = 0
    tasks: Counter[str] = field(default_factory=Counter)
    tasks_succeeded: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    events_posted: int = 0
    logs_posted: int = 0
    failures_seen: int = 0
    mistakes: Counter[str] = field(default_factory=Counter)  # planted mistakes actually made
    avoided: Counter[str] = field(default_factory=Counter)  # rolled, but a followed entry prevented it
    errors: Counter[str] = field(default_factory=Counter)  # "POST /sql 400 sql_column_not_found" → n
    entries_followed: Counter[str] = field(default_factory=Counter)  # entry_id → tasks that followed it
    playbook_reads: int = 0
    rescues: Counter[str] = field(default_factory=Counter)  # "succeeded" / "failed"
    corrections: int = 0
    calls: list[Call] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ops_sent(self) -> int:
        """Op records this cycle produced: one per tool call and playbook read, one per op in /events,
        one extra per /log."""
        return self.tool_calls + self.playbook_reads + self.events_posted + self.logs_posted

    @property
    def failure_rate(self) -> float:
        """Failed tool calls / tool calls, reads of GET /playbooks not counted (0 when there were none)."""
        return self.tool_failures / self.tool_calls if self.tool_calls else 0.0

    def route_failures(self, route: str) -> int:
        return sum(1 for c in self.calls if c.route == route and c.status >= 400)

    def route_calls(self, route: str) -> int:
        return sum(1 for c in self.calls if c.route == route)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (without the per-call list)."""
        data: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name != "calls":
                data[item.name] = dict(value) if isinstance(value, Counter) else value
        data.update(ops_sent=self.ops_sent, failure_rate=round(self.failure_rate, 4))
        return data


def sig_hash(endpoint: str, error: str | None) -> str:
    """How the simulated runtime names a failure for /events: 16 hex of sha256("endpoint error")."""
    return hashlib.sha256(f"{endpoint} {error or ''}".encode()).hexdigest()[:16]


def _names(text: str, keywords: Sequence[str]) -> bool:
    lowered = text.lower()
    return any(re.search(rf"(?<![a-z0-9_]){re.escape(k)}(?![a-z0-9_])", lowered) for k in keywords)


def followed_modes(entry: Mapping[str, Any], task_class: str, *, min_confidence: float = 0.0) -> set[str]:
    """The mistake modes a served playbook entry switches off for a task (rules in the module doc)."""
    if float(entry.get("confidence") or 0.0) < min_confidence:
        return set()
    endpoint, entry_class = entry.get("endpoint"), entry.get("task_class")
    if entry_class not in (None, task_class):
        return set()
    candidates = set(TASK_MODES[task_class])
    if endpoint:  # the entry's endpoint must be a step of this task where the mode happens
        if endpoint not in TASK_ENDPOINTS[task_class]:
            return set()
        candidates = {m for m in candidates if endpoint in MODES[m].endpoints}
    elif entry_class is None:
        return set()  # names neither an endpoint nor a task class: too vague to act on
    text = f"{entry.get('trigger', '')} {entry.get('action', '')}"
    named = {m for m in MODES if _names(text, MODES[m].keywords)}
    return candidates & named if named else candidates


# ---- the simulator ------------------------------------------------------------------------------
class _Task:
    """One task being run by one agent (the HTTP calls and their bookkeeping)."""

    def __init__(self, sim: Simulator, agent: SimAgent, plan: TaskPlan, session: str) -> None:
        self.sim, self.agent, self.plan, self.stats = sim, agent, plan, sim.stats
        self.headers = {
            "x-api-key": agent.api_key,
            SESSION_HEADER: session,
            TASK_CLASS_HEADER: plan.task_class,
        }
        self.session = session
        self.careful: set[str] = set()  # modes switched off by followed entries
        self.turn = 0
        self.ok = True
        self.rescued: list[str] = []

    # -- plumbing --------------------------------------------------------------------------------
    def call(
        self,
        method: str,
        path: str,
        route: str,
        *,
        body: Any = None,
        raw: bytes | None = None,
        params: Mapping[str, str | int] | None = None,
        mode: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """One tool call; returns (status, JSON body) and records it."""
        self.turn += 1
        headers = dict(self.headers)
        content = raw
        if body is not None:
            content = json.dumps(body).encode()
        if content is not None:
            headers["content-type"] = "application/json"
        response = self.sim.http.request(method, path, content=content, params=params, headers=headers)
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {"value": payload}
        error = None
        if response.status_code >= 400:
            error = str(payload.get("error") or payload.get("message") or f"http_{response.status_code}")
            self.stats.tool_failures += 1
            self.stats.failures_seen += 1
            self.stats.errors[f"{method} {route} {response.status_code} {error}"] += 1
        # Reading playbooks is the fleet's overhead, not task work: counting it would lower the
        # failure rate of the fleet that reads them for free.
        if route != "/playbooks":
            self.stats.tool_calls += 1
        self.stats.calls.append(
            Call(self.agent.agent_id, self.plan.task_class, method, route, response.status_code, error, mode)
        )
        return response.status_code, payload

    def events(self, *ops: dict[str, Any]) -> None:
        """Report runtime-side ops (the simulated runtime's own knowledge) to POST /events."""
        base = {
            "agent_id": self.agent.agent_id,
            "session_id": self.session,
            "task_class": self.plan.task_class,
        }
        body = {"ops": [{**base, **op} for op in ops]}
        response = self.sim.http.post("/events", json=body, headers={"x-api-key": self.agent.api_key})
        if response.status_code == 202:
            self.stats.events_posted += len(response.json().get("accepted", []))

    def mistake(self, mode: str) -> bool:
        """Whether the agent makes this planted mistake now (rolled, and no entry stops it)."""
        if not self.plan.rolls.get(mode):
            return False
        if mode in self.careful:
            self.stats.avoided[mode] += 1
            return False
        self.stats.mistakes[mode] += 1
        return True

    def after_failure(self, route: str, error: str | None, mode: str, retry: Callable[[], bool]) -> bool:
        """The runtime's side of a failed step: maybe an overseer correction, maybe a rescue (a real
        retry done the careful way), each reported to /events. True if the step finally worked."""
        failed_turn = self.turn
        if self.plan.overseer:
            self.stats.corrections += 1
            self.events(
                {
                    "endpoint": route,
                    "source": "overseer_correction",
                    "event_kind": "correction",
                    "success": True,
                    "duration_ms": 0.0,
                    "sig_hash": sig_hash(route, error),
                    "applied_at_turn": failed_turn + 1,
                    "correction": CORRECTIONS[mode],
                    "attributes": {"mode": mode},
                }
            )
        if not self.plan.rescue:
            return False
        worked = retry()
        self.stats.rescues["succeeded" if worked else "failed"] += 1
        self.rescued.append(mode)
        self.events(
            {
                "endpoint": route,
                "source": "runtime",
                "event_kind": "rescue",
                "success": worked,
                "duration_ms": self.plan.durations[1],
                "sig_hash": sig_hash(route, error),
                "rescue_attempted": True,
                "rescue_succeeded": worked,
                "applied_at_turn": self.turn,
                "output_summary": f"retried {route} the careful way: "
                + ("worked" if worked else "failed again"),
                "attributes": {"mode": mode},
                **({} if worked else {"error_type": "rescue_failed", "error": f"{mode}: retry failed"}),
            }
        )
        return worked

    # -- playbooks -------------------------------------------------------------------------------
    def read_playbooks(self) -> None:
        status, payload = self.call(
            "GET", "/playbooks", "/playbooks", params={"task_class": self.plan.task_class, "limit": 50}
        )
        self.stats.playbook_reads += 1
        if status != 200:
            return
        for entry in payload.get("entries") or []:
            if not isinstance(entry, dict):
                continue
            modes = followed_modes(entry, self.plan.task_class, min_confidence=self.sim.min_confidence)
            if modes:
                self.careful |= modes
                self.stats.entries_followed[str(entry.get("entry_id"))] += 1

    # -- the runtime's own model call ------------------------------------------------------------
    def model_call(self) -> None:
        if not self.mistake("runtime_timeout"):
            return
        self.stats.failures_seen += 1
        self.events(
            {
                "endpoint": MODEL_CALL,
                "source": "runtime",
                "event_kind": "model_call",
                "success": False,
                "duration_ms": 30_000.0,
                "error_type": "Timeout",
                "error": "model call timed out after 30000 ms (prompt of 48k tokens)",
                "sig_hash": sig_hash(MODEL_CALL, "Timeout"),
            }
        )
        rescued = self.plan.timeout_rescued
        self.stats.rescues["succeeded" if rescued else "failed"] += 1
        self.events(
            {
                "endpoint": MODEL_CALL,
                "source": "runtime",
                "event_kind": "rescue",
                "success": rescued,
                "duration_ms": self.plan.durations[2],
                "sig_hash": sig_hash(MODEL_CALL, "Timeout"),
                "rescue_attempted": True,
                "rescue_succeeded": rescued,
                "output_summary": "retried with a smaller prompt",
                **({} if rescued else {"error_type": "Timeout", "error": "retry timed out as well"}),
            }
        )
        self.ok = self.ok and rescued

    # -- tasks -----------------------------------------------------------------------------------
    def run(self) -> bool:
        if self.sim.playbooks_enabled:
            self.read_playbooks()
        self.model_call()
        work = {"staff_job": self.staff_job, "sql_question": self.sql_question, "worker_lookup": self.lookup}
        done = work[self.plan.task_class]()
        self.ok = self.ok and done
        if self.ok and self.plan.log:
            self.log()
        return self.ok

    def log(self) -> None:
        p = self.plan
        lesson = bool(self.rescued)
        approach = {
            "staff_job": f"POST /match with role and state, then GET /worker/{{id}} for the top {p.count}",
            "sql_question": f"described {p.question.table} with GET /tables first; used {p.question.column}",
            "worker_lookup": "found the worker id with POST /sql before GET /worker/{id}",
        }[p.task_class]
        body = {
            "operation": f"{p.task_class.replace('_', ' ')}: {p.role} in {p.city}, {p.state}"[:200],
            "approach": approach,
            "result": "lesson" if lesson else "success",
            "task_class": p.task_class,
            "endpoint": TASK_ENDPOINTS[p.task_class][0],
        }
        if lesson:
            body["context"] = "first attempt failed (" + ", ".join(self.rescued) + "); the careful way worked"
        status, _ = self.call("POST", "/log", "/log", body=body)
        if status == 202:
            self.stats.logs_posted += 1

    def _match(self) -> list[str]:
        """The careful match: role, state, need and count, as /match requires."""
        p = self.plan
        body = {"role": p.role, "state": p.state, "need": p.need, "count": p.count}
        status, payload = self.call("POST", "/match", "/match", body=body)
        return [str(m["worker_id"]) for m in payload.get("matches", [])] if status == 200 else []

    def staff_job(self) -> bool:
        p = self.plan
        ids: list[str] = []
        if self.mistake("match_missing_filters"):
            mode = "match_missing_filters"
            status, payload = self.call(
                "POST", "/match", "/match", body={"need": p.need, "count": p.count}, mode=mode
            )
        elif self.mistake("malformed_body"):
            mode = "malformed_body"
            raw = json.dumps({"role": p.role, "state": p.state, "need": p.need}).encode()[:-9]
            status, payload = self.call("POST", "/match", "/match", raw=raw, mode=mode)
        else:
            ids = self._match()
            status, payload, mode = (200 if ids else 400), {}, ""
        if status >= 400 and mode:

            def retry() -> bool:
                ids.extend(self._match())
                return bool(ids)

            if not self.after_failure("/match", payload.get("error"), mode, retry):
                return False
        if not ids:
            return False
        if self.mistake("worker_guessed_id"):
            status, payload = self.call(
                "GET", f"/worker/{p.guessed_id}", WORKER_ROUTE, mode="worker_guessed_id"
            )
            if status >= 400 and not self.after_failure(
                WORKER_ROUTE, payload.get("error"), "worker_guessed_id", lambda: self._worker(ids[0])
            ):
                return False
        return all([self._worker(worker_id) for worker_id in ids[:2]])

    def _worker(self, worker_id: str) -> bool:
        status, _ = self.call("GET", f"/worker/{worker_id}", WORKER_ROUTE)
        return status == 200

    def _sql(
        self, sql: str, *, limit: int = ROW_LIMIT, mode: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        return self.call("POST", "/sql", "/sql", body={"sql": sql, "limit": limit}, mode=mode)

    def _describe(self, table: str) -> set[str]:
        status, payload = self.call("GET", f"/tables/{table}", "/tables/{name}")
        return {c["name"] for c in payload.get("columns", [])} if status == 200 else set()

    def _column(self) -> str:
        """The column the agent writes: a careful agent describes the table and uses its columns."""
        p, q = self.plan, self.plan.question
        guessed = p.rolls["sql_guessed_column"]
        if "sql_guessed_column" in self.careful:
            known = self._describe(q.table)
            if q.column in known:  # the description corrects any guess
                if guessed:
                    self.stats.avoided["sql_guessed_column"] += 1
                return q.column
        if guessed:
            self.stats.mistakes["sql_guessed_column"] += 1
            return p.guess
        return q.column

    def sql_question(self) -> bool:
        p, q = self.plan, self.plan.question
        values = {"role": p.role, "state": p.state}
        right_sql = q.sql.format(col=q.column, **values)
        if self.mistake("sql_row_cap"):
            status, payload = self._sql(q.listing_sql.format(**values), mode="sql_row_cap")
            if status != 200 or not payload.get("truncated"):
                return status == 200
            self.stats.failures_seen += 1
            self.events(
                {
                    "endpoint": "/sql",
                    "source": "runtime",
                    "event_kind": "result_check",
                    "success": False,
                    "duration_ms": p.durations[0],
                    "error_type": "result_truncated",
                    # the question is what was asked (input), not part of what went wrong
                    "error": f"answer incomplete: /sql returned truncated=true at the {ROW_LIMIT}-row limit",
                    "input_summary": q.text.format(**values),
                    "sig_hash": sig_hash("/sql", "result_truncated"),
                }
            )
            return self.after_failure(
                "/sql", "result_truncated", "sql_row_cap", lambda: self._sql(right_sql)[0] == 200
            )
        if self.mistake("malformed_body"):
            raw = json.dumps({"sql": right_sql}).encode()[:-12]
            status, payload = self.call("POST", "/sql", "/sql", raw=raw, mode="malformed_body")
            return self.after_failure(
                "/sql", payload.get("error"), "malformed_body", lambda: self._sql(right_sql)[0] == 200
            )
        column = self._column()
        mode = "sql_guessed_column" if column != q.column else None
        status, payload = self._sql(q.sql.format(col=column, **values), mode=mode)
        if status == 200:
            return True

        def rescue() -> bool:
            self._describe(q.table)
            return self._sql(right_sql)[0] == 200

        return self.after_failure("/sql", payload.get("error"), mode or "sql_guessed_column", rescue)

    def _find_best(self) -> str | None:
        p = self.plan
        status, payload = self._sql(
            f"SELECT worker_id FROM workers WHERE role = '{p.role}' AND state = '{p.state}' "
            "ORDER BY rating DESC, worker_id LIMIT 1"
        )
        rows = payload.get("rows") or []
        return str(rows[0][0]) if status == 200 and rows else None

    def lookup(self) -> bool:
        if self.mistake("worker_guessed_id"):
            status, payload = self.call(
                "GET", f"/worker/{self.plan.guessed_id}", WORKER_ROUTE, mode="worker_guessed_id"
            )
            if status == 200:
                return True

            def rescue() -> bool:
                found = self._find_best()
                return bool(found) and self._worker(found or "")

            return self.after_failure(WORKER_ROUTE, payload.get("error"), "worker_guessed_id", rescue)
        found = self._find_best()
        return bool(found) and self._worker(found or "")


CORRECTIONS = {
    "sql_guessed_column": "describe the table with GET /tables/{name} and use its columns (hourly_rate, not salary)",
    "sql_row_cap": "aggregate in SQL (count(*), avg) instead of listing rows: the answer was cut at the row cap",
    "malformed_body": "send the body as JSON built by an encoder, not by hand",
    "worker_guessed_id": "find worker ids with POST /match or POST /sql before GET /worker/{id}",
    "match_missing_filters": "POST /match needs role and a city or state",
    "runtime_timeout": "use a smaller prompt",
}


class Simulator:
    """A fleet of agents; each :meth:`run_cycle` runs ``tasks_per_agent`` tasks per agent.

    Deterministic for a seed: cycle ``c`` of agent ``i`` draws from ``Random("seed:c:i")``.
    """

    def __init__(
        self,
        base_url: str,
        agents: Sequence[SimAgent],
        *,
        seed: int = 7,
        playbooks_enabled: bool = True,
        min_confidence: float = 0.0,
        http: httpx.Client | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        if not agents:
            raise ValueError("a simulator needs at least one agent")
        self.base_url = base_url
        self.agents = list(agents)
        self.seed = seed
        self.playbooks_enabled = playbooks_enabled
        self.min_confidence = min_confidence
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._own_http = http is None
        self.cycle = 0
        self.stats = CycleStats(cycle=0, playbooks_enabled=playbooks_enabled)

    @classmethod
    def for_stack(
        cls,
        stack: Any,
        base_url: str,
        *,
        agents: int = 8,
        seed: int = 7,
        prefix: str = "sim-agent",
        **options: Any,
    ) -> Simulator:
        """Agents with keys created in a running :class:`~opslake_local.stack.LocalStack`."""
        return cls(
            base_url,
            create_agents(stack.create_api_key, agents, seed=seed, prefix=prefix),
            seed=seed,
            **options,
        )

    def plans(self, cycle: int, tasks_per_agent: int) -> list[list[TaskPlan]]:
        """The tasks of a cycle, per agent (pure: the same for the same seed and cycle)."""
        plans = []
        for index, agent in enumerate(self.agents):
            rng = random.Random(f"{self.seed}:{cycle}:{index}")
            plans.append([plan_task(rng, agent) for _ in range(tasks_per_agent)])
        return plans

    def run_cycle(self, tasks_per_agent: int = 3) -> CycleStats:
        """Run one cycle: agents take turns, one task each, until each has run its tasks."""
        self.cycle += 1
        started = time.perf_counter()
        self.stats = CycleStats(
            cycle=self.cycle, playbooks_enabled=self.playbooks_enabled, agents=len(self.agents)
        )
        plans = self.plans(self.cycle, tasks_per_agent)
        for number in range(tasks_per_agent):
            for agent, agent_plans in zip(self.agents, plans, strict=True):
                plan = agent_plans[number]
                session = f"{agent.agent_id}-c{self.cycle:03d}-t{number + 1:02d}"
                self.stats.tasks[plan.task_class] += 1
                if _Task(self, agent, plan, session).run():
                    self.stats.tasks_succeeded += 1
        self.stats.elapsed_s = round(time.perf_counter() - started, 3)
        return self.stats

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
