"""The honest simulator (issue 16): a planted mistake is switched off only by a served entry that
carries its specific fix (the real column and table, the missing fields, the id form or source, an
aggregate, a JSON encoder, a prompt bound); generic entries, and every bad entry the issue names,
fix nothing. A task that follows entries reports them as one ``playbook:followed`` op."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import httpx
import pytest

from opslake_local.simulator import (
    FOLLOWED_ENDPOINT,
    FOLLOWED_EVENT_KIND,
    MODES,
    QUESTIONS,
    TASK_CLASSES,
    TASK_MODES,
    CycleStats,
    SimAgent,
    TaskClient,
    TaskPlan,
    TaskRun,
    fixes,
    follow_entries,
    plan_task,
)

pytestmark = pytest.mark.unit

QUESTION = {q.name: q for q in QUESTIONS}
MALFORMED_GUESSES = ("w-123", "2817")
WELL_FORMED_GUESS = "W93124"


def plan(
    task_class: str, *, question: str = "avg_rate", guessed_id: str = "w-123", **values: str
) -> TaskPlan:
    """A plan of ``task_class`` that rolled every mistake, in Phoenix, AZ for a welder unless told."""
    agent = SimAgent("a", "k", dict.fromkeys(MODES, 1.0))
    base = plan_task(random.Random("follow"), agent)
    place = {"role": "welder", "city": "Phoenix", "state": "AZ", **values}
    return replace(base, task_class=task_class, question=QUESTION[question], guessed_id=guessed_id, **place)


def every_plan() -> list[TaskPlan]:
    """One plan per task class × question × kind of guessed id (the cases the rules tell apart)."""
    return [
        plan(task_class, question=question.name, guessed_id=guess)
        for task_class in TASK_CLASSES
        for question in QUESTIONS
        for guess in (*MALFORMED_GUESSES, WELL_FORMED_GUESS)
    ]


def entry(action: str, endpoint: str | None, *, trigger: str = "t", **fields: Any) -> dict[str, Any]:
    return {"entry_id": "pb_x", "trigger": trigger, "action": action, "endpoint": endpoint, "confidence": 0.5,
            **fields}  # fmt: skip


# (entry, plan, the modes it fixes there): the canonical phrasings and a model's wording of the same names
FIX_TABLE = [
    # column: only the questions whose real column and table it names; the guess does not matter
    (entry("Use the column hourly_rate of workers", "/sql", instead_of="salary, pay_rate"),
     plan("sql_question", question="avg_rate"), {"sql_guessed_column"}),
    (entry("Use the column hourly_rate of workers", "/sql"), plan("sql_question", question="top_rated"), set()),
    (entry("Use the column status of placements", "/sql"),
     plan("sql_question", question="active_by_client"), {"sql_guessed_column"}),
    (entry("placements has no placement_status: filter on its status column", "/sql"),
     plan("sql_question", question="active_by_client"), {"sql_guessed_column"}),
    (entry("Use the column availability of workers", "/sql"), plan("worker_lookup"), set()),  # no guessed column
    # aggregate
    (entry("Aggregate in SQL (count(*), avg()) instead of listing rows: /sql cuts answers at its row limit",
           "/sql"), plan("sql_question"), {"sql_row_cap"}),
    (entry("Ask for sum(...) with GROUP BY; listed answers are truncated", "/sql"), plan("sql_question"),
     {"sql_row_cap"}),
    # json body, on the step whose body is built
    (entry("Build the POST /sql body with a JSON encoder (json.dumps), never by hand", "/sql"),
     plan("sql_question"), {"malformed_body"}),
    (entry("Build the POST /sql body with a JSON encoder (json.dumps), never by hand", "/sql"),
     plan("staff_job"), set()),
    (entry("Build the POST /match body with a JSON encoder (json.dumps), never by hand", "/match"),
     plan("staff_job"), {"malformed_body"}),
    (entry("Serialize the body with a JSON library", None, task_class="staff_job"), plan("staff_job"),
     {"malformed_body"}),
    # fields
    (entry("Send role and city or state in the POST /match body", "/match",
           instead_of="a body with only need and count"), plan("staff_job"), {"match_missing_filters"}),
    (entry("Requests to /match miss required fields (role, city, state): always send them", "/match"),
     plan("staff_job"), {"match_missing_filters"}),
    (entry("POST /match with role and state, then GET /worker/{id} for the top 5", "/match",
           trigger="staff job: {role} in {city}, {state}"), plan("staff_job"), {"match_missing_filters"}),
    (entry("Send role and city or state in the POST /match body", "/match"), plan("worker_lookup"), set()),
    # id form: malformed guesses only
    (entry("Use worker ids of the form W + five digits (^W[0-9]{5}$)", "/worker/{id}",
           instead_of="ids like w-999 or 9999"), plan("worker_lookup", guessed_id="w-123"),
     {"worker_guessed_id"}),
    (entry("Use worker ids of the form W + 5 digits (^W[0-9]{5}$)", "/worker/{id}"),
     plan("staff_job", guessed_id="2817"), {"worker_guessed_id"}),
    (entry("A worker id is W followed by five digits", "/worker/{id}"), plan("worker_lookup", guessed_id="2817"),
     {"worker_guessed_id"}),
    (entry("Use worker ids of the form W + five digits (^W[0-9]{5}$)", "/worker/{id}"),
     plan("worker_lookup", guessed_id=WELL_FORMED_GUESS), set()),  # a well-formed id that does not exist
    # id source: any guess
    (entry("Take worker ids from a POST /match or POST /sql answer; never guess them", "/worker/{id}"),
     plan("worker_lookup", guessed_id=WELL_FORMED_GUESS), {"worker_guessed_id"}),
    (entry("Take worker ids from a POST /match or /sql answer; never guess them", "/worker/{id}"),
     plan("staff_job", guessed_id="w-123"), {"worker_guessed_id"}),
    (entry("Use worker ids returned by POST /match", "/worker/{id}"),
     plan("staff_job", guessed_id=WELL_FORMED_GUESS), {"worker_guessed_id"}),
    # prompt bound: at most the 12,000 tokens the retry succeeds with
    (entry("Keep model prompts under 12000 input tokens", "runtime:model_call"), plan("worker_lookup"),
     {"runtime_timeout"}),
    (entry("Keep model prompts under 8k tokens", "runtime:model_call"), plan("sql_question"), {"runtime_timeout"}),
    (entry("Keep model prompts under 12,000 tokens", None, task_class="staff_job"), plan("staff_job"),
     {"runtime_timeout"}),
    (entry("Keep model prompts under 40000 input tokens", "runtime:model_call"), plan("staff_job"), set()),
    # one entry, several fixes, each on its own step
    (entry("Send role and state in the POST /match body; keep prompts under 10000 tokens", None,
           task_class="staff_job"), plan("staff_job"), {"match_missing_filters", "runtime_timeout"}),
]  # fmt: skip

# Entries that name the step but carry no fix: the bad examples, the old simulator's
# generic entries, and the demo's entries that the experiment (not the simulator) must judge.
GENERIC = [
    entry("Call GET /worker/{id} as other agents did", "/worker/{id}", trigger="worker lookup task using /worker/{id}"),
    entry("Call runtime:model_call as other agents did", "runtime:model_call",
          trigger="llm task using runtime:model_call"),
    entry("Call GET /tables/{name} as other agents did", "/tables/{name}"),
    entry("Call /match as other agents did", "/match", trigger="staff job task using /match"),
    entry("Worker 'W90519' does not exist: use worker ids returned by POST /match or /sql instead of guessing them",
          "/worker/{id}", trigger="/worker/{id} call that risks not found"),
    entry("POST /match with role and state, then GET /worker/{id} for the top 5", "/match",
          trigger="staff job: assembler in Tucson, AZ"),
    entry("Describe the table first (GET /tables/workers), then select listed columns", "/sql",
          trigger="SQL question over workers"),
    entry("describe the table with GET /tables/{name} first and use only the columns it lists", "/sql"),
    entry("Column 'availability_status' does not exist: call GET /tables/{name} and use the listed columns "
          "before writing SQL", "/sql", trigger="/sql call that risks unknown column"),
    entry("Queries on /sql are too broad: add WHERE filters (on ops, the dt/hour partitions), select only the "
          "needed columns, aggregate in SQL and add a LIMIT", "/sql"),
    entry("guessing ids", "/worker/{id}", kind="avoid", trigger="reading a worker"),
    entry("be careful", "/sql", trigger="SQL questions"),
    entry("send the body as JSON", "/match"),
    entry("use a smaller prompt", "runtime:model_call"),
    entry("use a prompt of 48000 tokens", "runtime:model_call"),
    entry("send role and state filters", None),  # neither an endpoint nor a task class
    entry("Avoid the call pattern that fails for other agents on /match", "/match"),
    # a generalized trigger's placeholders ({role}, {city}, {state}) name no field to send
    entry("Call POST /match for a shortlist, then GET /worker/{id} for the top 5", "/match",
          trigger="staff job: {role} in {city}, {state}"),
    entry("Staff it through POST /match", None, task_class="staff_job", trigger="staff job: {role} in {state}"),
]  # fmt: skip


@pytest.mark.parametrize(("served", "task", "expected"), FIX_TABLE)
def test_an_entry_fixes_only_the_mistakes_whose_specific_fix_it_carries(
    served: dict[str, Any], task: TaskPlan, expected: set[str]
) -> None:
    assert fixes(served, task) == expected


@pytest.mark.parametrize("served", GENERIC, ids=[e["action"][:40] for e in GENERIC])
def test_an_entry_without_a_specific_fix_fixes_nothing_in_any_task(served: dict[str, Any]) -> None:
    assert {mode for task in every_plan() for mode in fixes(served, task)} == set()


def test_every_mode_has_a_fix_and_every_fix_is_in_the_table() -> None:
    fixed = {mode for _, _, modes in FIX_TABLE for mode in modes}
    assert fixed == set(MODES) == {mode for modes in TASK_MODES.values() for mode in modes}


def test_an_entry_tied_to_one_instance_applies_to_that_instance_only() -> None:
    """'Worker W90519 does not exist' is news to an agent about to guess W90519, not to the others."""
    tucson = entry("POST /match with role and state", "/match", trigger="staff job: assembler in Tucson, AZ")
    assert fixes(tucson, plan("staff_job", role="assembler", city="Tucson", state="AZ")) == {
        "match_missing_filters"
    }
    assert fixes(tucson, plan("staff_job", role="assembler", city="Phoenix", state="AZ")) == set()
    assert fixes(tucson, plan("staff_job", role="welder", city="Tucson", state="AZ")) == set()
    w90519 = entry("Worker 'W90519' does not exist: use worker ids returned by POST /match", "/worker/{id}")
    assert fixes(w90519, plan("worker_lookup", guessed_id="W90519")) == {"worker_guessed_id"}
    assert fixes(w90519, plan("worker_lookup", guessed_id="W90520")) == set()


def test_applicability_task_class_endpoint_and_confidence() -> None:
    column = entry("Use the column hourly_rate of workers", "/sql")
    assert fixes({**column, "task_class": "staff_job"}, plan("sql_question")) == set()  # another task's entry
    assert fixes({**column, "endpoint": None, "task_class": "sql_question"}, plan("sql_question")) == {
        "sql_guessed_column"
    }
    assert fixes({**column, "endpoint": "/ask"}, plan("sql_question")) == set()  # not a step of the task
    assert fixes(column, plan("sql_question"), min_confidence=0.9) == set()
    # the endpoint confines the fix: the same words on /match do not fix /sql's body
    assert fixes(entry("a JSON encoder (json.dumps) for the body", "/match"), plan("sql_question")) == set()


def test_follow_entries_keeps_the_followed_ones_in_order() -> None:
    served = [
        {**GENERIC[0], "entry_id": "pb_generic"},
        "not an entry",
        {**FIX_TABLE[0][0], "entry_id": "pb_column"},
        {**FIX_TABLE[5][0], "entry_id": "pb_aggregate"},
    ]
    task = plan("sql_question", question="avg_rate")
    assert follow_entries(served, task) == [
        ("pb_column", {"sql_guessed_column"}),
        ("pb_aggregate", {"sql_row_cap"}),
    ]
    assert follow_entries(served, plan("worker_lookup")) == []


def test_the_followed_op_is_the_sdk_s_report_followed_shape() -> None:
    from opslake_sdk.client import FOLLOWED_ENDPOINT as SDK_ENDPOINT
    from opslake_sdk.client import FOLLOWED_EVENT_KIND as SDK_EVENT_KIND

    assert (FOLLOWED_ENDPOINT, FOLLOWED_EVENT_KIND) == (SDK_ENDPOINT, SDK_EVENT_KIND)


class FakeApi:
    """The routes an sql_question task calls, answered in memory; every request is kept."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.requests: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        path = request.url.path
        if path == "/playbooks":
            return httpx.Response(200, json={"entries": self.entries})
        if path == "/events":
            return httpx.Response(202, json={"accepted": [str(i) for i in range(len(body["ops"]))]})
        if path == "/sql":
            sql = body["sql"]
            if any(guess in sql for q in QUESTIONS for guess in q.guesses):
                return httpx.Response(400, json={"error": "sql_column_not_found"})
            return httpx.Response(200, json={"rows": [[1]], "truncated": "worker_id," in sql})
        return httpx.Response(200, json={})


def run_task(task: TaskPlan, entries: list[dict[str, Any]]) -> tuple[CycleStats, FakeApi]:
    api = FakeApi(entries)
    stats = CycleStats(cycle=1, playbooks_enabled=True)
    agent = SimAgent("pb-on-01", "key", dict.fromkeys(MODES, 1.0), rescue_rate=0.0, overseer_rate=0.0)
    with httpx.Client(base_url="http://api", transport=httpx.MockTransport(api)) as http:
        client = TaskClient(http, stats, agent, task.task_class, "s-1")
        TaskRun(client, task, playbooks_enabled=True, min_confidence=0.0).run()
    return stats, api


def test_a_task_that_follows_an_entry_writes_the_column_and_reports_the_follow() -> None:
    task = replace(plan("sql_question", question="avg_rate"), rolls=dict.fromkeys(MODES, False) | {
        "sql_guessed_column": True}, log=False)  # fmt: skip
    column = {**FIX_TABLE[0][0], "entry_id": "pb_column"}
    stats, api = run_task(task, [{**GENERIC[6], "entry_id": "pb_describe"}, column])
    sql = [body["sql"] for method, path, body in api.requests if path == "/sql"]
    assert len(sql) == 1 and "hourly_rate" in sql[0] and task.guess not in sql[0]
    assert not any(path.startswith("/tables") for _, path, _ in api.requests)  # written directly, no describe
    assert stats.avoided == {"sql_guessed_column": 1} and not stats.mistakes
    assert stats.entries_followed == {"pb_column": 1}
    assert stats.fixed_by == {"sql_guessed_column": {"pb_column": 1}}
    reports = [op for _, path, body in api.requests if path == "/events" for op in body["ops"]]
    followed, model_call = reports  # the follow (reported when read), then the model call (no timeout)
    assert (model_call["endpoint"], model_call["event_kind"], model_call["success"]) == (
        "runtime:model_call", "model_call", True)  # fmt: skip
    assert followed == {
        "agent_id": "pb-on-01", "session_id": "s-1", "task_class": "sql_question", "endpoint": FOLLOWED_ENDPOINT,
        "source": "runtime", "event_kind": FOLLOWED_EVENT_KIND, "success": True, "duration_ms": 0.0,
        "attributes": {"entry_ids": "pb_column"}}  # fmt: skip
    assert stats.follows_reported == 1 and stats.events_posted == 2


def test_a_generic_entry_changes_nothing_and_reports_no_follow() -> None:
    task = replace(plan("sql_question", question="avg_rate"), rolls=dict.fromkeys(MODES, False) | {
        "sql_guessed_column": True}, log=False)  # fmt: skip
    stats, api = run_task(task, [{**GENERIC[6], "entry_id": "pb_describe"}])
    assert stats.mistakes == {"sql_guessed_column": 1} and not stats.avoided
    assert not stats.entries_followed and stats.follows_reported == 0
    # the model call's report, then the failing call: no rescue, no follow reported
    assert [path for _, path, _ in api.requests] == ["/playbooks", "/events", "/sql"]
    assert stats.tool_failures == 1
