"""The demo's closed loop on a small seed: real tool errors become distinct signatures, evidence
becomes playbook entries that pass the quality gate, each served to half of the readers and withheld
from the others, and a simulated agent avoids a mistake only where an entry carrying its specific fix
was served. The closing note's numbers come back from the lake; no claim here depends on the seed
(whether the fleet that reads playbooks fails less is what the demo measures, not what it assumes)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from opslake.analysis.catalog.known import vocabulary_of
from opslake.analysis.playbooks import quality_refusal
from opslake.config import load_settings
from opslake.jobs.catalog import CatalogStore, read_tables
from opslake.query.factory import create_engine
from opslake_local.demo import REPORTED_OPS_SQL
from opslake_local.experiments import closing_note
from opslake_local.http import LocalApi
from opslake_local.loop import LOOP_ENV, LOOP_STEPS, WITH_PREFIX, LoopResult, run_loop
from opslake_local.simulator import FOLLOWED_ENDPOINT, SimAgent, Simulator, TaskPlan, fixes, mistake_profile
from opslake_local.stack import QUIET_ENV, LocalStack

SEED, AGENTS, CYCLES, TASKS = 11, 4, 3, 3

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
                stack,
                invoker,
                base_url,
                cycles=CYCLES,
                agents=AGENTS,
                tasks_per_agent=TASKS,
                seed=SEED,
                on_step=steps.append,
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
    # (issue 24: this short loop's diagnoses are all superseded by contrast fixes of their signatures,
    # or too generic for the gate, so its entries are do entries; the demo's longer run has avoid ones)
    assert active and "do" in {e["kind"] for e in active}
    assert all(e["evidence_op_ids"] and int(e["evidence_agent_count"]) >= 2 for e in active)
    assert result.rows[-1].active_entries == len(active)
    assert sum(row.with_playbooks.entries_followed.total() for row in result.rows[1:]) > 0


def test_the_first_cycle_is_the_same_for_both_fleets(loop: tuple[LocalStack, LoopResult]) -> None:
    """Before any entry exists both fleets plan, roll and make exactly the same mistakes."""
    _, result = loop
    first = result.rows[0]
    assert first.with_playbooks.tasks == first.without_playbooks.tasks
    assert first.with_playbooks.mistakes == first.without_playbooks.mistakes
    assert not first.with_playbooks.avoided and not first.with_playbooks.entries_followed
    assert first.with_playbooks.failure_rate == pytest.approx(first.without_playbooks.failure_rate)
    summary = result.summary()
    assert {c["arm"] for c in summary["cycles"]} == {"with playbooks", "without playbooks"}


def with_fleet_plans(cycle: int) -> list[TaskPlan]:
    """The tasks the fleet that reads playbooks planned in ``cycle`` (plans are pure for a seed)."""
    agents = [SimAgent(f"{WITH_PREFIX}-{i + 1:02d}", "", mistake_profile(SEED, i)) for i in range(AGENTS)]
    with Simulator("http://unused", agents, seed=SEED) as sim:
        return [plan for plans in sim.plans(cycle, TASKS) for plan in plans]


def test_a_mistake_is_avoided_only_where_an_entry_with_its_fix_was_served(
    loop: tuple[LocalStack, LoopResult],
) -> None:
    stack, result = loop
    entries = {
        r["entry_id"]: r
        for r in sql(
            stack,
            "SELECT entry_id, trigger, action, instead_of, endpoint, task_class, confidence FROM playbooks",
        )
    }
    served: dict[str, set[str]] = {}  # entry id -> keys it was served to
    for record in sql(
        stack,
        f"SELECT reporter_id, element_at(attributes, 'entry_ids') AS ids FROM ops "
        f"WHERE endpoint = '/playbooks' AND reporter_id LIKE '{WITH_PREFIX}-%'",
    ):
        for entry_id in filter(None, (record["ids"] or "").split(",")):
            served.setdefault(entry_id, set()).add(str(record["reporter_id"]))
    for row in result.rows:
        stats = row.with_playbooks
        assert not row.without_playbooks.avoided  # a fleet that reads nothing avoids nothing
        assert set(stats.avoided) <= set(stats.fixed_by)
        plans = with_fleet_plans(row.cycle)
        for mode, by_entry in stats.fixed_by.items():
            for entry_id in by_entry:
                assert entry_id in served, entry_id
                # the entry as the table holds it carries the specific fix of that mode for a task of the cycle
                assert any(mode in fixes(entries[entry_id], plan) for plan in plans), (
                    mode,
                    entries[entry_id],
                )
    followed = sum(row.with_playbooks.follows_reported for row in result.rows)
    reported = sql(
        stack,
        f"SELECT count(*) AS n FROM ops WHERE endpoint = '{FOLLOWED_ENDPOINT}' AND reporter_id LIKE '{WITH_PREFIX}-%'",
    )
    assert reported[0]["n"] == followed


def test_what_was_withheld_is_recorded_beside_what_was_served(loop: tuple[LocalStack, LoopResult]) -> None:
    stack, result = loop
    records = sql(
        stack,
        "SELECT reporter_id, element_at(attributes, 'entry_ids') AS served, "
        "element_at(attributes, 'withheld_ids') AS withheld, element_at(attributes, 'holdout') AS holdout "
        f"FROM ops WHERE endpoint = '/playbooks' AND reporter_id LIKE '{WITH_PREFIX}-%'",
    )
    assert len(records) == sum(row.with_playbooks.playbook_reads for row in result.rows)
    assert {r["holdout"] for r in records} == {"1"}
    assert any(r["withheld"] for r in records) and any(r["served"] for r in records)
    for record in records:
        served = set(filter(None, (record["served"] or "").split(",")))
        withheld = set(filter(None, (record["withheld"] or "").split(",")))
        assert not served & withheld


def test_every_active_entry_passes_the_quality_gate(loop: tuple[LocalStack, LoopResult]) -> None:
    stack, _ = loop
    active = sql(
        stack,
        "SELECT trigger, action, instead_of, endpoint, task_class FROM playbooks WHERE status = 'active'",
    )
    assert active
    # judged as the run judged them: against the tool catalog the consolidator published and Glue
    s3, glue = stack.client("s3"), stack.client("glue")
    settings = load_settings(stack.environment)
    vocabulary = vocabulary_of(
        CatalogStore(s3, settings.lake_bucket).current(), read_tables(glue, settings.glue_database)
    )
    for e in active:
        assert (
            quality_refusal(
                e["trigger"],
                e["action"],
                e["instead_of"],
                e["endpoint"],
                e["task_class"],
                vocabulary=vocabulary,
            )
            is None
        )


def test_the_experiments_are_measured_and_the_closing_note_compares_them(
    loop: tuple[LocalStack, LoopResult],
) -> None:
    stack, result = loop
    measured = sql(
        stack,
        "SELECT entry_id, treatment_ops, holdout_ops, treatment_rate_low, holdout_rate_high, followed_treatment, "
        "followed_holdout, effect_low, effect_high FROM playbooks WHERE treatment_ops > 0 AND holdout_ops > 0",
    )
    assert measured
    for r in measured:  # both arms have ops: their intervals and the difference's are in the table
        assert None not in (
            r["treatment_rate_low"],
            r["holdout_rate_high"],
            r["effect_low"],
            r["effect_high"],
        )
    # the simulator follows only what it was served: nothing held out is ever followed
    assert sum(int(r["followed_holdout"] or 0) for r in measured) == 0
    assert result.experiments is not None and result.experiments.error is None
    assert {e.entry_id for e in result.experiments.entries} >= {r["entry_id"] for r in measured}
    note = "\n".join(closing_note(result.experiments))
    assert "entries published" in note and "refused by the quality gate" in note
    assert "two fleets, cycles 2+: with " in note and "agree in sign: " in note
    summary = result.summary()
    assert summary["agreement"]["agree_in_sign"] in ("yes", "no", "—")
    assert len(summary["experiments"]) == result.experiments.published


def test_every_call_of_each_fleet_lands_as_its_own_op_record(loop: tuple[LocalStack, LoopResult]) -> None:
    """Each fleet's calls, route by route, are the gateway's op records of its keys. The fleet that
    reports through OTLP exports its spans when a cycle ends: an export during a tool call would run
    two API functions at once in the local stack's one process, and Powertools' class-level current
    event gave the tool call's record the /v1/traces route (about 10 records of 270 per demo)."""
    stack, result = loop
    for prefix, fleet in ((WITH_PREFIX, "with_playbooks"), ("pb-off", "without_playbooks")):
        calls = Counter(c.route for row in result.rows for c in getattr(row, fleet).calls)
        records = sql(
            stack,
            f"SELECT endpoint, count(*) AS n FROM ops WHERE reporter_id LIKE '{prefix}-%' AND source = 'gateway' "
            "GROUP BY endpoint",
        )
        assert {r["endpoint"]: r["n"] for r in records} == dict(calls), fleet


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
