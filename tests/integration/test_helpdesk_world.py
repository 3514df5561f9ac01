"""The second world against the local stack: service-desk agents call tools of their own and report
them only through the OpenTelemetry SDK's OTLP exporter to ``POST /v1/traces``. Every tool call of
both fleets lands as exactly one op with the tool's endpoint, its outcome (a raised error and an error
the tool returned as its result are both failures), the task's session and class, the agent and the
key; the fleet that reads playbooks follows a served entry carrying a fix and reports it; the
analyzer's signatures of the world's failures are pure per planted cause."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from opslake.config import load_settings
from opslake.query.base import QueryEngine
from opslake.query.factory import create_engine
from opslake_local.drain import Drainer
from opslake_local.experiments import HELPDESK, read_scorecard
from opslake_local.loop import ANALYZER, LOOP_ENV, WorldRow, scheduled_event
from opslake_local.simulator import FOLLOWED_ENDPOINT, CycleStats, SimAgent
from opslake_local.stack import LocalStack
from opslake_local.worlds.helpdesk import MODES, NOISE, HelpdeskFleet, endpoint
from tests.integration.conftest import local_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AGENTS, TASKS, SEED = 3, 6, 5
#: Served to every key (holdout share 0): the fix of close_without_comment, as a contrast writes it.
ENTRY = {
    "entry_id": "pb_desk_add_comment",
    "trigger": "Before tool:close_ticket",
    "action": "Call tool:add_comment before tool:close_ticket",
    "kind": "do",
    "confidence": 0.7,
    "domain": "tools",
    "endpoint": "tool:close_ticket",
    "task_class": "resolve_ticket",
    "status": "active",
    "holdout_share": 0.0,
    "evidence_op_ids": ["op-a", "op-b", "op-c"],
}
Local = tuple[LocalStack, httpx.Client, Drainer]


@pytest.fixture(scope="module")
def desk() -> Iterator[tuple[LocalStack, QueryEngine, CycleStats, CycleStats]]:
    """One cycle of both fleets (every mistake likely), written to the lake, one analyzer run."""
    with local_stack(**LOOP_ENV) as (stack, client, drainer):
        now = datetime.now(UTC).isoformat()
        snapshot = {"generated_at": now, "entries": [{**ENTRY, "created_at": now, "published_at": now}]}
        stack.client("s3").put_object(
            Bucket=stack.bucket,
            Key=stack.environment.get("OPSLAKE_PLAYBOOKS_KEY", "playbooks/current.json"),
            Body=json.dumps(snapshot).encode(),
        )
        base_url = str(client.base_url).rstrip("/")

        def agents(prefix: str) -> list[SimAgent]:
            rates = {m: 0.6 for m in MODES}
            return [
                SimAgent(
                    f"{prefix}-{i:02d}",
                    stack.create_api_key(f"{prefix}-{i:02d}").value,
                    rates,
                    rescue_rate=0.8,
                )
                for i in range(1, AGENTS + 1)
            ]

        with (
            HelpdeskFleet(base_url, agents(HELPDESK.with_prefix), seed=SEED) as on,
            HelpdeskFleet(
                base_url, agents(HELPDESK.without_prefix), seed=SEED, playbooks_enabled=False
            ) as off,
        ):
            with_stats, without_stats = on.run_cycle(TASKS), off.run_cycle(TASKS)
        assert drainer.drain().failed == 0
        drainer.invoker.invoke(ANALYZER, scheduled_event(stack, ANALYZER))
        engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
        yield stack, engine, with_stats, without_stats


def ops_of(engine: QueryEngine) -> dict[str, dict[str, Any]]:
    rows = engine.run(
        "SELECT op_id, endpoint, success, source, session_id, task_class, agent_id, reporter_id, error, error_type, "
        "input_summary, element_at(attributes, 'opslake.failure_inferred') AS inferred, "
        "element_at(attributes, 'entry_ids') AS entry_ids "
        f"FROM ops WHERE reporter_id LIKE '{HELPDESK.with_prefix}-%' OR reporter_id LIKE '{HELPDESK.without_prefix}-%'"
    ).records()
    return {str(r["op_id"]): r for r in rows}


def test_every_tool_call_lands_once_with_its_endpoint_outcome_session_and_class(
    desk: tuple[LocalStack, QueryEngine, CycleStats, CycleStats],
) -> None:
    _, engine, with_stats, without_stats = desk
    ops = ops_of(engine)
    for stats in (with_stats, without_stats):
        calls = [c for c in stats.calls if c.method == "TOOL"]
        assert len(calls) == stats.tool_calls > 0 and stats.spans_failed == 0
        for call in calls:
            op = ops[str(call.op_id)]
            assert op["endpoint"] == call.route and op["endpoint"].startswith("tool:")
            assert op["success"] is (call.status < 400), (call, op)
            assert op["source"] == "otlp"
            assert op["task_class"] == call.task_class
            assert op["agent_id"] == op["reporter_id"] == call.agent_id
            assert str(op["session_id"]).startswith(f"{call.agent_id}-c001-t")
            assert isinstance(json.loads(str(op["input_summary"])), dict)  # the call's arguments
    # each task is one session of one task class
    sessions: dict[str, set[str]] = {}
    for op in ops.values():
        if str(op["endpoint"]).startswith("tool:"):
            sessions.setdefault(str(op["session_id"]), set()).add(str(op["task_class"]))
    assert len(sessions) == 2 * AGENTS * TASKS and all(len(c) == 1 for c in sessions.values())


def test_raised_and_returned_errors_are_both_failures_with_the_tools_words(
    desk: tuple[LocalStack, QueryEngine, CycleStats, CycleStats],
) -> None:
    _, engine, with_stats, without_stats = desk
    ops = ops_of(engine)
    failed = [
        c for s in (with_stats, without_stats) for c in s.calls if c.method == "TOOL" and c.status >= 400
    ]
    assert {c.mode for c in failed} >= {"customer_id_form", "close_without_comment", "us_date_form"}
    raised = {"get_customer", "update_ticket", "search_customers"}
    for call in failed:
        op, tool = ops[str(call.op_id)], call.route.removeprefix("tool:")
        assert op["error"], op
        if tool in raised:  # the span's status ERROR and its exception
            assert op["inferred"] is None and op["error_type"] in {
                "InvalidRequestError", "NotFoundError", "TypeError", "UpstreamTimeout"
            }  # fmt: skip
        else:  # status OK, the error in the result: inferred from it
            assert op["inferred"] is not None, op
            assert not str(op["error"]).startswith("Error:")
    by_mode = {c.mode: ops[str(c.op_id)] for c in failed}
    if "customer_id_form" in by_mode:
        assert str(by_mode["customer_id_form"]["error"]).startswith("invalid customer_id '")
    if "close_without_comment" in by_mode:
        assert "add a resolution comment first" in str(by_mode["close_without_comment"]["error"])


def test_the_reading_fleet_follows_a_served_fix_and_says_so(
    desk: tuple[LocalStack, QueryEngine, CycleStats, CycleStats],
) -> None:
    _, engine, with_stats, without_stats = desk
    ops = ops_of(engine)
    # the same tasks; the fleet that reads playbooks never closes a ticket before commenting
    assert with_stats.tasks == without_stats.tasks and with_stats.tasks["resolve_ticket"] > 0
    assert with_stats.mistakes["close_without_comment"] == 0 < without_stats.mistakes["close_without_comment"]
    assert with_stats.avoided["close_without_comment"] == without_stats.mistakes["close_without_comment"]
    followed = [op for op in ops.values() if op["endpoint"] == FOLLOWED_ENDPOINT]
    assert len(followed) == with_stats.follows_reported == with_stats.tasks["resolve_ticket"]
    assert {op["entry_ids"] for op in followed} == {ENTRY["entry_id"]}
    assert all(op["task_class"] == "resolve_ticket" for op in followed)
    reads = engine.run(
        "SELECT reporter_id, task_class, element_at(attributes, 'entry_ids') AS served FROM ops "
        f"WHERE endpoint = '/playbooks' AND reporter_id LIKE '{HELPDESK.with_prefix}-%'"
    ).records()
    assert len(reads) == with_stats.playbook_reads == AGENTS * TASKS
    assert {r["served"] for r in reads if r["task_class"] == "resolve_ticket"} == {ENTRY["entry_id"]}
    assert not any(op["endpoint"] == "/playbooks" for op in ops.values() if "off" in str(op["reporter_id"]))


def test_the_worlds_failures_get_signatures_pure_per_cause(
    desk: tuple[LocalStack, QueryEngine, CycleStats, CycleStats],
) -> None:
    _, engine, with_stats, without_stats = desk
    card = read_scorecard(engine, [WorldRow(1, with_stats, without_stats, {}, datetime.now(UTC))])
    assert card.error is None and card.unmatched == 0
    seen = [c for c in card.causes if c.failed_calls]
    assert {c.cause for c in seen} <= set(MODES) | set(NOISE)
    assert len(seen) >= 5
    for cause in seen:
        assert cause.signatures and cause.purity == 1.0, cause
        assert cause.tool and endpoint(cause.tool) in HELPDESK.endpoints


def test_the_loop_runs_both_worlds_and_reads_each_apart() -> None:
    """``run_loop`` with the second world: its fleets run in every cycle after the staffing ones, the
    cycles carry both worlds' stats, and after the last one each world's experiments and the desk's
    scorecard are read apart (the staffing note counts only staffing keys and entries)."""
    from opslake_local.experiments import closing_note, scorecard_lines
    from opslake_local.http import LocalApi
    from opslake_local.loop import HELPDESK_STEPS, LOOP_STEPS, run_loop
    from opslake_local.stack import QUIET_ENV

    steps: list[str] = []
    with LocalStack(env_overrides={**QUIET_ENV, **LOOP_ENV}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            result = run_loop(
                stack, invoker, base_url, cycles=2, agents=1, tasks_per_agent=1, seed=SEED,
                on_step=steps.append, helpdesk_agents=AGENTS, helpdesk_tasks=4,
            )  # fmt: skip
        finally:
            api.stop()
    assert len(steps) == 2 * (LOOP_STEPS + HELPDESK_STEPS)
    assert all(row.helpdesk is not None for row in result.rows)
    first = result.rows[0].helpdesk
    assert first is not None and first.with_playbooks.tasks == first.without_playbooks.tasks
    assert first.with_playbooks.tool_calls == first.without_playbooks.tool_calls > 0  # nothing served yet
    assert result.experiments is not None and result.helpdesk is not None
    staffing, desk = result.experiments, result.helpdesk.experiments
    assert staffing.error is None and desk.error is None
    assert all(not str(e.endpoint or "").startswith("tool:") for e in staffing.entries)
    assert all(owner in HELPDESK.endpoints for owner in (e.endpoint for e in desk.entries if e.endpoint))
    assert desk.fleets.with_playbooks.ops == result.rows[1].helpdesk_with.tool_calls  # type: ignore[union-attr]
    card = result.helpdesk.scorecard
    assert card.error is None and card.unmatched == 0
    assert sum(c.failed_calls for c in card.causes) == sum(
        r.helpdesk_with.tool_failures + r.helpdesk_without.tool_failures  # type: ignore[union-attr]
        for r in result.rows
    )
    summary = result.summary()
    assert {"experiments", "agreement", "helpdesk"} <= set(summary)
    assert {"cycles", "experiments", "agreement", "mistakes", "scorecard"} <= set(summary["helpdesk"])
    assert closing_note(desk, caveats=False) and scorecard_lines(card)[-1].startswith("entries published")


def test_the_loop_learns_the_desk_s_own_mistakes_without_generic_entries() -> None:
    """Three cycles of the desk's fleets (the staffing world barely runs): the loop knows nothing of
    the desk but its traffic, yet the entries it publishes for the desk each name a planted
    mistake's fix or rule (none is generic, issue 24), nearly every planted mistake gets one, and no
    entry is tied to a transient cause."""
    from opslake_local.http import LocalApi
    from opslake_local.loop import run_loop
    from opslake_local.stack import QUIET_ENV

    with LocalStack(env_overrides={**QUIET_ENV, **LOOP_ENV}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            result = run_loop(
                stack, invoker, base_url, cycles=3, agents=1, tasks_per_agent=1, seed=7,
                helpdesk_agents=8, helpdesk_tasks=6,
            )  # fmt: skip
        finally:
            api.stop()
    assert result.helpdesk is not None
    card = result.helpdesk.scorecard
    assert card.error is None and card.unmatched == 0
    assert card.published > 0 and card.generic == ()
    assert set(card.naming_fix) == {e for c in card.causes for e in c.entries}
    planted = [c for c in card.causes if c.planted]
    assert all(not c.entries for c in card.causes if not c.planted)
    learnt = [c.cause for c in planted if c.entries]
    # all 8 when measured; 6 leaves room for a cycle that straddles an hour (the windows move)
    assert len(planted) == 8 and len(learnt) >= 6, learnt
    assert all(c.purity == 1.0 for c in card.causes if c.signatures)
