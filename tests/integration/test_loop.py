"""The demo's closed loop on a small seed: real tool errors become distinct signatures, evidence
becomes playbook entries, and the fleet that reads them fails less than the one that does not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opslake.config import load_settings
from opslake.query.factory import create_engine
from opslake_local.demo import REPORTED_OPS_SQL
from opslake_local.http import LocalApi
from opslake_local.loop import LOOP_ENV, LOOP_STEPS, LoopResult, run_loop
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loop_run() -> Iterator[tuple[LocalStack, LoopResult, list[str]]]:
    """The loop on a small seed, and the steps it announced (what a progress display shows)."""
    steps: list[str] = []
    with LocalStack(env_overrides={**QUIET_ENV, **LOOP_ENV}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            result = run_loop(
                stack, invoker, base_url, cycles=3, agents=4, tasks_per_agent=3, seed=11, on_step=steps.append
            )
            yield stack, result, steps
        finally:
            api.stop()


@pytest.fixture(scope="module")
def loop(loop_run: tuple[LocalStack, LoopResult, list[str]]) -> tuple[LocalStack, LoopResult]:
    stack, result, _ = loop_run
    return stack, result


def sql(stack: LocalStack, query: str) -> list[dict[str, object]]:
    engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
    return engine.run(query).records()


def test_planted_failure_modes_are_found_as_distinct_signatures(loop: tuple[LocalStack, LoopResult]) -> None:
    stack, _ = loop
    rows = sql(stack, "SELECT endpoint, error_type, template FROM signatures WHERE count > 0")
    kinds = {(r["endpoint"], r["error_type"]) for r in rows}
    # guessed columns, guessed worker ids, /match without filters: each its own signature
    assert ("/sql", "sql_column_not_found") in kinds
    assert any(endpoint == "/worker/{id}" for endpoint, _ in kinds)
    assert any(endpoint == "/match" and error_type == "bad_request" for endpoint, error_type in kinds)
    assert len({r["template"] for r in rows}) == len(rows)
    failures = sql(stack, "SELECT count(*) AS n, count(DISTINCT op_id) AS d FROM failures")[0]
    lake_failures = sql(stack, "SELECT count(*) AS n FROM ops WHERE NOT success AND source <> 'llm'")[0]
    assert failures["n"] == failures["d"] == lake_failures["n"]  # every failure exactly once


def test_entries_are_created_with_evidence_and_served(loop: tuple[LocalStack, LoopResult]) -> None:
    stack, result = loop
    entries = sql(stack, "SELECT kind, status, evidence_op_ids, evidence_agent_count FROM playbooks")
    active = [e for e in entries if e["status"] == "active"]
    assert active and {"do", "avoid"} <= {e["kind"] for e in active}
    assert all(e["evidence_op_ids"] and int(e["evidence_agent_count"]) >= 2 for e in active)
    assert result.rows[-1].active_entries == len(active)
    assert sum(row.with_playbooks.entries_followed.total() for row in result.rows[1:]) > 0


def test_the_fleet_that_reads_playbooks_fails_less(loop: tuple[LocalStack, LoopResult]) -> None:
    _, result = loop
    first = result.rows[0]
    # the first cycle runs before any entry exists: both fleets do exactly the same thing
    assert first.with_playbooks.failure_rate == pytest.approx(first.without_playbooks.failure_rate)
    later = slice(1, None)
    assert result.failure_rate(with_playbooks=True, cycles=later) < result.failure_rate(
        with_playbooks=False, cycles=later
    )
    summary = result.summary()
    assert {c["arm"] for c in summary["cycles"]} == {"with playbooks", "without playbooks"}


def test_each_cycle_announces_its_steps(loop_run: tuple[LocalStack, LoopResult, list[str]]) -> None:
    _, result, steps = loop_run
    assert len(steps) == len(result.rows) * LOOP_STEPS
    assert steps[:LOOP_STEPS] == [
        "cycle 1/3, agents with playbooks",
        "cycle 1/3, agents without playbooks",
        "cycle 1/3, writer",
        "cycle 1/3, analyzer",
        "cycle 1/3, consolidator",
    ]
    assert steps[-1] == "cycle 3/3, consolidator"


def test_one_fleet_reports_through_otlp_spans_the_other_through_events(
    loop: tuple[LocalStack, LoopResult],
) -> None:
    """The fleet with playbooks exports its runtime's reports as spans (the OpenTelemetry SDK to
    /v1/traces), the other posts them to /events; the demo's count finds each way's ops in the lake."""
    stack, result = loop
    otlp = [row.with_playbooks for row in result.rows]
    events = [row.without_playbooks for row in result.rows]
    assert {s.report for s in otlp} == {"otlp"} and {s.report for s in events} == {"events"}
    assert sum(s.events_posted for s in otlp) == 0 and sum(s.spans_failed for s in otlp) == 0
    assert sum(s.spans_exported for s in events) == 0
    # every task is an invoke_agent span, and every runtime report one more span
    assert sum(s.spans_exported for s in otlp) == sum(s.spans_reported + s.tasks.total() for s in otlp)
    lake = {bool(r["with_playbooks"]): r for r in sql(stack, REPORTED_OPS_SQL)}
    assert lake[True]["otlp"] == sum(s.spans_exported for s in otlp) and lake[True]["events"] == 0
    assert lake[False]["events"] == sum(s.events_posted for s in events) > 0 and lake[False]["otlp"] == 0
