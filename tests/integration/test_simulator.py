"""The agent simulator against the real local HTTP API: every task kind becomes op records, the
planted mistakes come back as the tools' own errors, and served playbook entries that carry a
specific fix change what the agents do (fewer /sql failures than the same seed without playbooks).
Which entry fixes which mistake is tested in tests/unit/local/test_simulator_follow.py."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest

from opslake.config import load_settings
from opslake.query.factory import create_engine
from opslake_local.drain import Drainer
from opslake_local.simulator import (
    MODES,
    QUESTIONS,
    Report,
    SimAgent,
    Simulator,
    plan_task,
)
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration

Local = tuple[LocalStack, httpx.Client, Drainer]
#: One column entry per SQL question (the contrast rules' canonical phrasing), never held out.
SQL_ENTRIES = [
    {
        "entry_id": f"pb_sql_column_{q.name}",
        "trigger": f"SQL question over {q.table}",
        "action": f"Use the column {q.column} of {q.table}",
        "instead_of": ", ".join(q.guesses),
        "kind": "do",
        "confidence": 0.8,
        "domain": "sql",
        "endpoint": "/sql",
        "status": "active",
        "fix_kind": "column",
        "holdout_share": 0.0,
        "evidence_op_ids": ["op-a", "op-b", "op-c"],
    }
    for q in QUESTIONS
]


@pytest.fixture(scope="module")
def stack(local: Local) -> LocalStack:
    """The module's stack with a playbook snapshot holding a column entry per SQL question, written
    before any agent reads /playbooks (the handler caches the snapshot for 60 s)."""
    stack = local[0]
    now = datetime.now(UTC).isoformat()
    entries = [{**e, "created_at": now, "published_at": now} for e in SQL_ENTRIES]
    snapshot = {"generated_at": now, "entries": entries}
    stack.client("s3").put_object(
        Bucket=stack.bucket,
        Key=stack.environment.get("OPSLAKE_PLAYBOOKS_KEY", "playbooks/current.json"),
        Body=json.dumps(snapshot).encode(),
    )
    return stack


def agents(stack: LocalStack, prefix: str, count: int, rate: float) -> list[SimAgent]:
    """Agents with the same high rate for every mistake (so a short cycle plants each of them)."""
    return [
        SimAgent(
            f"{prefix}-{i:02d}", stack.create_api_key(f"{prefix}-{i:02d}").value, dict.fromkeys(MODES, rate)
        )
        for i in range(1, count + 1)
    ]


def test_plans_are_deterministic_for_a_seed() -> None:
    agent = SimAgent("a", "k", {name: 0.5 for name in MODES})
    first = [plan_task(random.Random("7:1:0"), agent) for _ in range(20)]
    again = [plan_task(random.Random("7:1:0"), agent) for _ in range(20)]
    other = [plan_task(random.Random("8:1:0"), agent) for _ in range(20)]
    assert first == again
    assert first != other


@pytest.mark.slow
def test_a_cycle_records_every_task_kind_and_real_tool_errors(local: Local, stack: LocalStack) -> None:
    _, _, drainer = local
    sim = Simulator(stack_url(local), agents(stack, "simt", 6, 0.5), seed=3, playbooks_enabled=False)
    stats = sim.run_cycle(tasks_per_agent=4)
    sim.close()

    assert set(stats.tasks) == {"staff_job", "sql_question", "worker_lookup"}
    assert stats.tool_calls > 0 and stats.playbook_reads == 0
    assert stats.ops_sent == stats.tool_calls + stats.events_posted + stats.logs_posted
    # the planted mistakes are the tools' real answers
    failed = Counter((c.route, c.status, c.error) for c in stats.calls if c.status >= 400)
    assert failed[("/sql", 400, "sql_column_not_found")] >= 1
    assert failed[("/match", 400, "bad_request")] >= 1
    assert failed[("/worker/{id}", 404, "not_found")] + failed[("/worker/{id}", 400, "bad_request")] >= 1
    assert all(c.mode is not None for c in stats.calls if c.status >= 400)  # no failure without a plan
    assert {"sql_guessed_column", "match_missing_filters", "worker_guessed_id"} <= set(stats.mistakes)
    assert stats.rescues and stats.corrections >= 1

    assert drainer.drain().failed == 0
    engine = create_engine(
        load_settings({**stack.environment, "OPSLAKE_QUERY_ENGINE": "embedded"}),
        glue_client=stack.client("glue"),
    )
    rows = engine.run(
        "SELECT source, task_class, endpoint, success, error_type, rescue_attempted, applied_at_turn, sig_hash "
        "FROM ops WHERE agent_id LIKE 'simt-%'"
    ).records()
    gateway = [r for r in rows if r["source"] == "gateway"]
    assert len(gateway) == stats.tool_calls
    assert {r["task_class"] for r in gateway} == {"staff_job", "sql_question", "worker_lookup"}
    assert {"/sql", "/match", "/worker/{id}"} <= {r["endpoint"] for r in gateway}
    assert any(r["error_type"] == "sql_column_not_found" and not r["success"] for r in gateway)
    assert any(r["error_type"] == "not_found" and r["endpoint"] == "/worker/{id}" for r in gateway) or any(
        r["error_type"] == "bad_request" and r["endpoint"] == "/worker/{id}" for r in gateway
    )
    corrections = [r for r in rows if r["source"] == "overseer_correction"]
    assert corrections and all(r["sig_hash"] and r["applied_at_turn"] for r in corrections)
    assert any(r["rescue_attempted"] for r in rows if r["source"] == "runtime")


def stack_url(local: Local) -> str:
    return str(local[1].base_url).rstrip("/")


@pytest.mark.slow
def test_agents_follow_served_column_entries(local: Local, stack: LocalStack) -> None:
    runs, sims = {}, {}
    for enabled in (False, True):
        sims[enabled] = Simulator(
            stack_url(local),
            agents(stack, f"simpb{int(enabled)}", 5, 0.45),
            seed=5,
            playbooks_enabled=enabled,
        )
        runs[enabled] = sims[enabled].run_cycle(tasks_per_agent=4)
        sims[enabled].close()
    without, with_ = runs[False], runs[True]
    assert with_.tasks == without.tasks  # same seed, same tasks
    plans = [p for agent_plans in sims[True].plans(1, 4) for p in agent_plans]

    # each SQL question follows the entry naming its own column and table, and only that one
    asked = Counter(p.question.name for p in plans if p.task_class == "sql_question")
    assert sum(asked.values()) >= 2
    assert with_.entries_followed == {f"pb_sql_column_{name}": n for name, n in asked.items()}
    assert with_.fixed_by == {"sql_guessed_column": with_.entries_followed}
    assert with_.follows_reported == sum(asked.values())
    assert with_.avoided["sql_guessed_column"] == without.mistakes["sql_guessed_column"] > 0
    assert "sql_guessed_column" not in with_.mistakes
    # the agent writes the column directly: no describe call (without: only when rescuing)
    assert not any(c.route == "/tables/{name}" for c in with_.calls)
    assert not any(c.error == "sql_column_not_found" for c in with_.calls)
    assert with_.route_failures("/sql") < without.route_failures("/sql")
    # the entries name columns only: every other mistake is still made as often
    assert {m: n for m, n in with_.mistakes.items()} == {
        m: n for m, n in without.mistakes.items() if m != "sql_guessed_column"
    }


RUNTIME_COLUMNS = (
    "endpoint", "source", "event_kind", "success", "error_type", "error", "sig_hash", "applied_at_turn",
    "correction", "rescue_attempted", "rescue_succeeded", "task_class", "duration_ms", "input_summary",
    "output_summary",
)  # fmt: skip


def reporting_agents(stack: LocalStack, prefix: str) -> list[SimAgent]:
    """Agents that always make the mistakes the runtime reports (a model-call timeout, a result cut
    at the row cap, a guessed worker id), each followed by a correction and a rescue."""
    planted = {"runtime_timeout": 1.0, "sql_row_cap": 1.0, "worker_guessed_id": 1.0}
    return [
        SimAgent(
            name,
            stack.create_api_key(name).value,
            {mode: planted.get(mode, 0.0) for mode in MODES},
            rescue_rate=1.0,
            overseer_rate=1.0,
            log_rate=0.0,
        )
        for name in (f"{prefix}-01", f"{prefix}-02")
    ]


@pytest.mark.slow
def test_otlp_reports_land_as_the_ops_events_would_store(local: Local, stack: LocalStack) -> None:
    """The same seeded fleet once through /events and once through OTLP spans (the SDK's exporter
    to /v1/traces): the runtime's ops in the lake are the same, field by field, and each task's
    ops share the trace of its invoke_agent op."""
    _, _, drainer = local
    runs = {}
    fleets: tuple[tuple[Report, str], ...] = (("events", "simev"), ("otlp", "simot"))
    for report, prefix in fleets:
        with Simulator(
            stack_url(local), reporting_agents(stack, prefix), seed=9, playbooks_enabled=False, report=report
        ) as sim:
            runs[report] = sim.run_cycle(tasks_per_agent=3)
    events, otlp = runs["events"], runs["otlp"]
    assert otlp.spans_failed == 0 and otlp.events_posted == 0
    assert otlp.spans_exported == otlp.spans_reported + sum(otlp.tasks.values())  # reports + a span per task
    assert events.events_posted == otlp.spans_reported > 0
    assert drainer.drain().failed == 0

    engine = create_engine(
        load_settings({**stack.environment, "OPSLAKE_QUERY_ENGINE": "embedded"}),
        glue_client=stack.client("glue"),
    )
    rows = engine.run(
        f"SELECT agent_id, session_id, trace_id, attributes, {', '.join(RUNTIME_COLUMNS)} "
        "FROM ops WHERE agent_id LIKE 'simev-%' OR agent_id LIKE 'simot-%'"
    ).records()
    for row in rows:
        row["attributes"] = dict(row["attributes"] or ())  # a map column: (key, value) pairs

    def runtime_ops(prefix: str) -> Counter[tuple[object, ...]]:
        """The runtime's ops of a fleet, as comparable tuples (the session without the agent prefix)."""
        return Counter(
            (r["session_id"].split("-", 1)[1], *(r[c] for c in RUNTIME_COLUMNS), r["attributes"].get("mode"))
            for r in rows
            if r["agent_id"].startswith(prefix) and r["source"] in ("runtime", "overseer_correction")
        )

    from_events, from_otlp = runtime_ops("simev"), runtime_ops("simot")
    assert sum(from_otlp.values()) == otlp.spans_reported
    assert from_otlp == from_events
    # (session, endpoint, source, event_kind, success, error_type, ...): every kind of report, failures too
    assert {k[3] for k in from_otlp} == {"model_call", "rescue", "correction", "result_check"}
    assert ("runtime:model_call", "model_call", False, "Timeout") in {
        (k[1], k[3], k[4], k[5]) for k in from_otlp
    }

    otlp_rows = [r for r in rows if r["agent_id"].startswith("simot")]
    tasks = [r for r in otlp_rows if r["attributes"].get("otlp.op") == "agent"]
    assert len(tasks) == sum(otlp.tasks.values())
    for task in tasks:
        assert task["endpoint"] == f"agent:{task['agent_id']}" and task["success"]
        assert task["source"] == "otlp" and task["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        session = [r for r in otlp_rows if r["session_id"] == task["session_id"]]
        reports = [r for r in session if r["source"] in ("runtime", "overseer_correction")]
        assert reports and {r["trace_id"] for r in session} == {task["trace_id"]}  # tool calls too
        assert {r["attributes"]["otel.parent_span_id"] for r in reports} == {
            task["attributes"]["otel.span_id"]
        }
    chats = [r for r in otlp_rows if r["attributes"].get("gen_ai.operation.name") == "chat"]
    assert chats and all(r["endpoint"] == "runtime:model_call" for r in chats)
    assert all(r["attributes"]["gen_ai.request.model"] for r in chats)
    assert {r["error_type"] for r in chats if not r["success"]} == {"Timeout"}
