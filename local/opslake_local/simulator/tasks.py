"""What each task does, step by step, with its planted mistakes and the fixed way of each step.

* ``staff_job``: find N workers for a role in a place (``POST /match``), then read the picks
  (``GET /worker/{id}``).
* ``sql_question``: answer a question over ``workers``/``placements`` with ``POST /sql``.
* ``worker_lookup``: read the record of the best-rated worker of a role in a city: find the id with
  ``POST /sql``, then ``GET /worker/{id}``.

A planted mistake is made when the plan rolled it and no followed entry carries its specific fix
(:mod:`opslake_local.simulator.follow`); then the agent does the step the fixed way: for ``/sql``,
the question's real column written directly (``sql_guessed_column``), an aggregate instead of
listing rows (``sql_row_cap``), a body built by a JSON encoder (``malformed_body``); for
``/worker/{id}``, only ids a ``/match`` or ``/sql`` answer returned; for ``/match``, ``role`` and
``state`` always sent; for ``runtime:model_call``, a smaller prompt (no timeout). The entries it
followed are reported once per task as a ``playbook:followed`` op (opslake_sdk's
``report_followed`` shape). After a failed step the runtime may report an overseer's correction
and may rescue the step by retrying it the careful way (describing the table first for a column).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from opslake_local.simulator.client import TaskClient, sig_hash
from opslake_local.simulator.follow import follow_entries
from opslake_local.simulator.modes import (
    ANSWER_TOKENS,
    CORRECTIONS,
    FOLLOWED_ENDPOINT,
    FOLLOWED_EVENT_KIND,
    MODEL_CALL,
    PROMPT_TOKENS,
    RUNTIME_MODEL,
    SMALLER_PROMPT_TOKENS,
    TASK_ENDPOINTS,
    WORKER_ROUTE,
)
from opslake_local.simulator.otlp import ModelCall
from opslake_local.simulator.plan import TaskPlan

ROW_LIMIT = 100  # what an agent asks /sql for when it lists rows


class TaskRun:
    """One task being run by one agent: its steps, mistakes, rescues and reports."""

    def __init__(
        self, client: TaskClient, plan: TaskPlan, *, playbooks_enabled: bool, min_confidence: float
    ) -> None:
        self.client, self.plan, self.stats = client, plan, client.stats
        self.playbooks_enabled = playbooks_enabled
        self.min_confidence = min_confidence
        self.careful: set[str] = set()  # modes switched off by followed entries
        self.ok = True
        self.rescued: list[str] = []

    # -- mistakes and the runtime's side of a failure ---------------------------------------------
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
        retry done the careful way), each reported by the runtime. True if the step finally worked."""
        failed_turn = self.client.turn
        if self.plan.overseer:
            self.stats.corrections += 1
            self.client.events(
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
        self.client.events(
            {
                "endpoint": route,
                "source": "runtime",
                "event_kind": "rescue",
                "success": worked,
                "duration_ms": self.plan.durations[1],
                "sig_hash": sig_hash(route, error),
                "rescue_attempted": True,
                "rescue_succeeded": worked,
                "applied_at_turn": self.client.turn,
                "output_summary": f"retried {route} the careful way: "
                + ("worked" if worked else "failed again"),
                "attributes": {"mode": mode},
                **({} if worked else {"error_type": "rescue_failed", "error": f"{mode}: retry failed"}),
            }
        )
        return worked

    # -- playbooks -------------------------------------------------------------------------------
    def read_playbooks(self) -> None:
        status, payload = self.client.call(
            "GET", "/playbooks", "/playbooks", params={"task_class": self.plan.task_class, "limit": 50}
        )
        self.stats.playbook_reads += 1
        if status != 200:
            return
        followed = follow_entries(payload.get("entries") or [], self.plan, min_confidence=self.min_confidence)
        for entry_id, modes in followed:
            self.careful |= modes
            self.stats.entries_followed[entry_id] += 1
            for mode in modes:
                self.stats.fixed_by.setdefault(mode, Counter())[entry_id] += 1
        if followed:
            self.report_followed([entry_id for entry_id, _ in followed])

    def report_followed(self, entry_ids: list[str]) -> None:
        """The entries this task follows, as one op in opslake_sdk's ``report_followed`` shape
        (the consolidator counts follows per entry and arm)."""
        self.stats.follows_reported += 1
        self.client.events(
            {
                "endpoint": FOLLOWED_ENDPOINT,
                "source": "runtime",
                "event_kind": FOLLOWED_EVENT_KIND,
                "success": True,
                "duration_ms": 0.0,
                "attributes": {"entry_ids": ",".join(entry_ids)},
            }
        )

    # -- the runtime's own model call ------------------------------------------------------------
    def model_call(self) -> None:
        if not self.mistake("runtime_timeout"):
            # Reported like a failed one (a GenAI span, or an /events op): an experiment on model calls
            # needs the successes too, or its arms hold failures only.
            self.client.events(
                {
                    "endpoint": MODEL_CALL,
                    "source": "runtime",
                    "event_kind": "model_call",
                    "success": True,
                    "duration_ms": self.plan.durations[2],
                },
                model=ModelCall(RUNTIME_MODEL, SMALLER_PROMPT_TOKENS, ANSWER_TOKENS),
            )
            return
        self.stats.failures_seen += 1
        self.client.events(
            {
                "endpoint": MODEL_CALL,
                "source": "runtime",
                "event_kind": "model_call",
                "success": False,
                "duration_ms": 30_000.0,
                "error_type": "Timeout",
                "error": "model call timed out after 30000 ms (prompt of 48k tokens)",
                "sig_hash": sig_hash(MODEL_CALL, "Timeout"),
            },
            model=ModelCall(RUNTIME_MODEL, PROMPT_TOKENS),
        )
        rescued = self.plan.timeout_rescued
        self.stats.rescues["succeeded" if rescued else "failed"] += 1
        self.client.events(
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
            },
            model=ModelCall(RUNTIME_MODEL, SMALLER_PROMPT_TOKENS, ANSWER_TOKENS if rescued else 0),
        )
        self.ok = self.ok and rescued

    # -- tasks -----------------------------------------------------------------------------------
    def run(self) -> bool:
        if self.playbooks_enabled:
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
        status, _ = self.client.call("POST", "/log", "/log", body=body)
        if status == 202:
            self.stats.logs_posted += 1

    def _match(self) -> list[str]:
        """The careful match: role, state, need and count, as /match requires."""
        p = self.plan
        body = {"role": p.role, "state": p.state, "need": p.need, "count": p.count}
        status, payload = self.client.call("POST", "/match", "/match", body=body)
        return [str(m["worker_id"]) for m in payload.get("matches", [])] if status == 200 else []

    def staff_job(self) -> bool:
        p = self.plan
        ids: list[str] = []
        if self.mistake("match_missing_filters"):
            mode = "match_missing_filters"
            status, payload = self.client.call(
                "POST", "/match", "/match", body={"need": p.need, "count": p.count}, mode=mode
            )
        elif self.mistake("malformed_body"):
            mode = "malformed_body"
            raw = json.dumps({"role": p.role, "state": p.state, "need": p.need}).encode()[:-9]
            status, payload = self.client.call("POST", "/match", "/match", raw=raw, mode=mode)
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
            status, payload = self.client.call(
                "GET", f"/worker/{p.guessed_id}", WORKER_ROUTE, mode="worker_guessed_id"
            )
            if status >= 400 and not self.after_failure(
                WORKER_ROUTE, payload.get("error"), "worker_guessed_id", lambda: self._worker(ids[0])
            ):
                return False
        return all([self._worker(worker_id) for worker_id in ids[:2]])

    def _worker(self, worker_id: str) -> bool:
        status, _ = self.client.call("GET", f"/worker/{worker_id}", WORKER_ROUTE)
        return status == 200

    def _sql(
        self, sql: str, *, limit: int = ROW_LIMIT, mode: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        return self.client.call("POST", "/sql", "/sql", body={"sql": sql, "limit": limit}, mode=mode)

    def _describe(self, table: str) -> set[str]:
        status, payload = self.client.call("GET", f"/tables/{table}", "/tables/{name}")
        return {c["name"] for c in payload.get("columns", [])} if status == 200 else set()

    def sql_question(self) -> bool:
        p, q = self.plan, self.plan.question
        values = {"role": p.role, "state": p.state}
        right_sql = q.sql.format(col=q.column, **values)
        if self.mistake("sql_row_cap"):
            status, payload = self._sql(q.listing_sql.format(**values), mode="sql_row_cap")
            if status != 200 or not payload.get("truncated"):
                return status == 200
            self.stats.failures_seen += 1
            self.client.events(
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
            status, payload = self.client.call("POST", "/sql", "/sql", raw=raw, mode="malformed_body")
            return self.after_failure(
                "/sql", payload.get("error"), "malformed_body", lambda: self._sql(right_sql)[0] == 200
            )
        # an entry naming this question's column and table: the agent writes that column directly
        column = p.guess if self.mistake("sql_guessed_column") else q.column
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
            status, payload = self.client.call(
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
