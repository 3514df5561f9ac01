"""The demo's closing note (issue 16), from hand-made rows of table ``playbooks``, of the fleets'
ops and of the loop's cycles: the consolidator's numbers are shown as the table holds them (never
recomputed), beside the fleets' comparison with Newcombe intervals, the pooled holdout Δ and
whether the two agree in sign; refusals by the quality gate are summed over the cycles."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from opslake.analysis.intervals import newcombe, wilson
from opslake_local.experiments import (
    closing_note,
    experiments_from,
    fix_label,
    fleet_comparison,
    refused_by_gate,
    sign_agreement,
)
from opslake_local.simulator import CycleStats

pytestmark = pytest.mark.unit


@dataclass
class Row:
    """A cycle of the loop, as the closing note reads it (loop.CycleRow's fields)."""

    cycle: int
    with_playbooks: CycleStats
    without_playbooks: CycleStats
    consolidator: dict[str, Any] = field(default_factory=dict)
    started_at: datetime = field(default_factory=lambda: datetime(2026, 11, 23, tzinfo=UTC))


def stats(calls: int, failures: int, *, enabled: bool) -> CycleStats:
    return CycleStats(cycle=1, playbooks_enabled=enabled, tool_calls=calls, tool_failures=failures)


ROWS = [
    Row(1, stats(100, 20, enabled=True), stats(100, 20, enabled=False), {"refused_by_gate": {}}),
    Row(2, stats(120, 10, enabled=True), stats(118, 22, enabled=False),
        {"refused_by_gate": {"restates the endpoint": 3, "tied to one instance": 1},
         "nothing_specific": ["successes|/match|staff_job|a", "successes|/tables/{name}|sql_question|b"]}),
    Row(3, stats(110, 8, enabled=True), stats(112, 20, enabled=False),
        {"refused_by_gate": {"restates the endpoint": 1}, "nothing_specific": ["successes|/match|staff_job|a"]}),
]  # fmt: skip

COLUMN = {
    "entry_id": "pb_column", "status": "active", "endpoint": "/sql", "task_class": None,
    "action": "Use the column hourly_rate of workers", "fix_kind": "column", "fix_names": ["workers", "hourly_rate"],
    "experiment_stage": "new", "treatment_ops": 31, "treatment_failures": 2, "treatment_rate": 0.0645,
    "treatment_rate_low": 0.018, "treatment_rate_high": 0.207, "holdout_ops": 29, "holdout_failures": 9,
    "holdout_rate": 0.3103, "holdout_rate_low": 0.17, "holdout_rate_high": 0.49, "effect": 0.2458,
    "effect_low": 0.051, "effect_high": 0.422, "last_verdict": "helpful", "helpful_count": 1,
}  # fmt: skip
FIELDS = {
    **COLUMN, "entry_id": "pb_fields", "endpoint": "/match", "action": "Send role and city or state in the POST "
    "/match body", "fix_kind": "fields", "fix_names": ["role", "city|state"], "treatment_ops": 20,
    "treatment_failures": 4, "treatment_rate": 0.2, "holdout_ops": 22, "holdout_failures": 3, "holdout_rate": 0.1364,
    "effect": -0.0636, "effect_low": -0.28, "effect_high": 0.16, "last_verdict": "undecided",
}  # fmt: skip
NEW = {
    "entry_id": "pb_new",
    "status": "active",
    "endpoint": "runtime:model_call",
    "action": "Keep model prompts under 12000 input tokens",
    "fix_kind": "prompt_bound",
    "fix_names": ["12000"],
    "last_verdict": "insufficient",
}
RETIRED = {**FIELDS, "entry_id": "pb_gone", "status": "retired", "last_verdict": "no_effect"}
# failures / ops per (endpoint, task class, fleet) from cycle 2 on, as fleet_ops_sql answers
FLEET_ROWS = [
    {"endpoint": "/sql", "task_class": "sql_question", "with_playbooks": True, "ops": 80, "failures": 8},
    {"endpoint": "/sql", "task_class": "worker_lookup", "with_playbooks": True, "ops": 20, "failures": 0},
    {"endpoint": "/sql", "task_class": "sql_question", "with_playbooks": False, "ops": 90, "failures": 27},
    {"endpoint": "/sql", "task_class": "worker_lookup", "with_playbooks": False, "ops": 10, "failures": 0},
    {"endpoint": "/match", "task_class": "staff_job", "with_playbooks": True, "ops": 40, "failures": 4},
    {"endpoint": "/match", "task_class": "staff_job", "with_playbooks": False, "ops": 40, "failures": 2},
]  # fmt: skip


def test_the_fleets_are_compared_from_the_second_cycle_with_newcombe() -> None:
    fleets = fleet_comparison(ROWS)
    assert (fleets.with_playbooks.failures, fleets.with_playbooks.ops) == (18, 230)
    assert (fleets.without_playbooks.failures, fleets.without_playbooks.ops) == (42, 230)
    assert (fleets.with_playbooks.low, fleets.with_playbooks.high) == wilson(18, 230)
    assert (fleets.delta, fleets.low, fleets.high) == newcombe(42, 230, 18, 230)
    assert fleets.delta > 0  # without − with: the fleet that reads playbooks fails less here


def test_refusals_by_the_quality_gate_are_summed_over_the_cycles() -> None:
    assert refused_by_gate(r.consolidator for r in ROWS) == {
        "restates the endpoint": 4,
        "tied to one instance": 1,
    }
    assert refused_by_gate([{}, {"refused_by_gate": None}]) == {}  # runs from before the gate count nothing


def test_each_entry_shows_the_table_s_numbers_beside_its_fleets_delta() -> None:
    x = experiments_from([COLUMN, FIELDS, NEW, RETIRED], FLEET_ROWS, ROWS)
    by_id = {e.entry_id: e for e in x.entries}
    column = by_id["pb_column"]
    # as the consolidator stored them: nothing recomputed (0.2458 is not 9/29 − 2/31 rounded here)
    assert (column.treatment_failures, column.treatment_ops, column.treatment_rate) == (2, 31, 0.0645)
    assert (column.effect, column.effect_low, column.effect_high, column.verdict) == (
        0.2458,
        0.051,
        0.422,
        "helpful",
    )
    # the fleets' Δ of its target ops (every /sql op, whatever the task class): 27/100 − 8/100
    assert column.fleet_delta == pytest.approx(0.19) and column.sign == "agree"
    assert (
        by_id["pb_fields"].fleet_delta == pytest.approx(2 / 40 - 4 / 40)
        and by_id["pb_fields"].sign == "agree"
    )
    assert by_id["pb_new"].fleet_delta is None and by_id["pb_new"].sign == "—"
    assert x.published == 4 and x.refused == 5
    # pooled over judged entries only (not the insufficient one), weights n_t·n_h/(n_t + n_h)
    weights = [31 * 29 / 60, 20 * 22 / 42, 20 * 22 / 42]
    deltas = [9 / 29 - 2 / 31, 3 / 22 - 4 / 20, 3 / 22 - 4 / 20]
    assert x.judged == 3
    assert x.pooled == pytest.approx(sum(w * d for w, d in zip(weights, deltas, strict=True)) / sum(weights))
    assert x.agreement == "yes"


def test_the_closing_note_says_everything_the_issue_asks_for() -> None:
    note = "\n".join(closing_note(experiments_from([COLUMN, FIELDS, NEW, RETIRED], FLEET_ROWS, ROWS)))
    assert (
        "entries published 4 · refused by the quality gate 5 (4 restates the endpoint, 1 tied to one instance)"
        in note
    )
    assert "pb_column  /sql column workers.hourly_rate" in note
    assert "2/31 6.5% [1.8,20.7]" in note and "9/29 31.0% [17.0,49.0]" in note
    assert "+24.6 pp [+5.1,+42.2]" in note and "helpful" in note and "+19.0 pp" in note
    assert "no_effect (retired)" in note and "insufficient" in note
    assert (
        "pb_new     runtime:model_call prompt_bound 12000  —                      —  " in note
    )  # no ops yet
    assert "two fleets, cycles 2+: with 7.8% [5.0,12.0] of 230 tool calls · without 18.3%" in note
    assert "(tool calls treated as independent)" in note
    assert "pooled holdout Δ +" in note and "(Mantel–Haenszel, 3 judged entries) · agree in sign: yes" in note
    assert note.count("caveat: ") == 3 and "(1 − holdout share)" in note
    # the same rows give the same note (the demo's closing note is deterministic for a seed)
    assert note == "\n".join(closing_note(experiments_from([COLUMN, FIELDS, NEW, RETIRED], FLEET_ROWS, ROWS)))


def test_without_judged_entries_or_a_table_the_note_says_so() -> None:
    note = closing_note(experiments_from([NEW], FLEET_ROWS, ROWS))
    assert "pooled holdout Δ — (no entry judged yet) · agree in sign: —" in note
    broken = closing_note(experiments_from([], [], ROWS, error="TABLE_NOT_FOUND playbooks"))
    assert "table playbooks could not be read: TABLE_NOT_FOUND playbooks" in broken


def test_sign_agreement_and_fix_labels() -> None:
    assert sign_agreement(0.1, 0.02) == "agree" and sign_agreement(-0.1, 0.02) == "differ"
    assert sign_agreement(0.0, 0.1) == sign_agreement(None, 0.1) == "—"
    assert fix_label({"endpoint": "/match", "fix_kind": "fields", "fix_names": ["role", "city|state"]}) == (
        "/match fields role, city|state"
    )
    assert fix_label({"endpoint": None, "task_class": "staff_job", "action": "Describe the table first"}) == (
        "staff_job Describe the table first"
    )


def test_the_fleets_delta_of_an_entry_counts_calls_only_as_its_experiment_does() -> None:
    """A correction or a rescue report on /sql is no call: the experiment leaves them out, so the
    fleets' Δ beside it must too (else the sign column compares two different measures)."""
    import duckdb
    import pyarrow as pa

    from opslake.query.dialect import to_duckdb
    from opslake_local.experiments import fleet_ops_sql

    since = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [
        {"reporter_id": "pb-off-01", "success": False, "source": "gateway", "event_kind": None},
        {"reporter_id": "pb-off-01", "success": True, "source": "overseer_correction", "event_kind": "correction"},
        {"reporter_id": "pb-off-01", "success": True, "source": "runtime", "event_kind": "rescue"},
        {"reporter_id": "pb-off-01", "success": True, "source": "gateway", "event_kind": None},
    ]  # fmt: skip
    table = pa.Table.from_pylist(
        [{**r, "ts": since, "endpoint": "/sql", "task_class": "sql_question"} for r in rows]
    )
    con = duckdb.connect()
    con.register("ops", table)
    found = con.execute(to_duckdb(fleet_ops_sql(since)).sql).fetchall()
    assert [(ops, failures) for *_, ops, failures in found] == [(2, 1)]


# ---- two worlds in one lake ---------------------------------------------------------------------
DESK_ENTRY = {
    **COLUMN, "entry_id": "pb_desk", "endpoint": "tool:close_ticket", "task_class": "resolve_ticket",
    "trigger": "Before tool:close_ticket", "action": "Call tool:add_comment before tool:close_ticket",
    "instead_of": None, "confidence": 0.5, "fix_kind": "preceding_call", "fix_names": ["add_comment"],
}  # fmt: skip
DESK_GENERIC = {**DESK_ENTRY, "entry_id": "pb_desk_generic", "action": "Check the input of tool:close_ticket",
                "fix_kind": None, "fix_names": None}  # fmt: skip
DESK_RUN = {
    "refused_by_gate": {"restates the endpoint": 2, "names nothing actionable": 1},
    "rejected": [
        "successes|tool:get_ticket|resolve_ticket|f6e3: quality: restates the endpoint: the action only restates",
        "diagnosis|sig_desk: quality: names nothing actionable: the action names no column",
        "successes|/tables/{name}|sql_question|b: quality: restates the endpoint: the action only restates",
        "contrast|/sql|sql_question|column|x: fence: not a catalog column",
    ],
    "nothing_specific": ["successes|/match|staff_job|a", "successes|tool:list_assets|book_visit|c"],
}


def test_each_world_counts_its_own_entries_refusals_and_groups() -> None:
    """A diagnosis group is keyed by its signature: whose it is comes from the signature's endpoint."""
    from opslake_local.experiments import HELPDESK, STAFFING, key_owner, nothing_specific

    endpoints = {"sig_desk": "tool:close_ticket", "sig_sql": "/sql"}
    assert key_owner("diagnosis|sig_desk", endpoints=endpoints) == HELPDESK
    assert key_owner("diagnosis|sig_desk") == STAFFING  # an unknown signature: the first world's
    assert key_owner("contrast|tool:update_ticket|reassign_ticket|preceding_call|x") == HELPDESK
    assert key_owner("log|/match|book_visit|x") == HELPDESK  # its task class is the desk's
    runs = [DESK_RUN]
    assert refused_by_gate(runs) == {"restates the endpoint": 2, "names nothing actionable": 1}
    assert refused_by_gate(runs, HELPDESK, endpoints=endpoints) == {
        "names nothing actionable": 1,
        "restates the endpoint": 1,
    }
    assert refused_by_gate(runs, STAFFING, endpoints=endpoints) == {"restates the endpoint": 1}
    assert nothing_specific(runs, HELPDESK) == nothing_specific(runs, STAFFING) == 1
    assert nothing_specific(runs) == 2
    rows = [Row(1, ROWS[0].with_playbooks, ROWS[0].without_playbooks, DESK_RUN)]
    staffing = experiments_from([COLUMN, DESK_ENTRY, DESK_GENERIC], FLEET_ROWS, rows, endpoints=endpoints)
    desk = experiments_from([COLUMN, DESK_ENTRY, DESK_GENERIC], [], rows, world=HELPDESK, endpoints=endpoints)
    assert [e.entry_id for e in staffing.entries] == ["pb_column"] and staffing.refused == 1
    assert [e.entry_id for e in desk.entries] == ["pb_desk", "pb_desk_generic"] and desk.refused == 2


def desk_stats(
    calls: list[Any], *, enabled: bool, mistakes: dict[str, int], avoided: dict[str, int]
) -> CycleStats:
    from collections import Counter

    stats = CycleStats(cycle=1, playbooks_enabled=enabled, tool_calls_in_spans=True)
    stats.calls, stats.mistakes, stats.avoided = calls, Counter(mistakes), Counter(avoided)
    if enabled:
        stats.fixed_by = {"close_without_comment": Counter({"pb_desk": 3})}
    return stats


def test_the_scorecard_ties_each_failed_call_to_its_cause_signature_and_fixing_entry() -> None:
    from opslake_local.experiments import scorecard_from, scorecard_lines
    from opslake_local.simulator import Call

    def call(mode: str, op: str, tool: str = "close_ticket") -> Call:
        return Call("hd-on-01", "resolve_ticket", "TOOL", f"tool:{tool}", 500, "rule", mode, op)

    with_calls = [call("close_without_comment", "a1"), call("close_without_comment", "a2"),
                  call("rate_limited", "a3", "search_tickets"),
                  Call("hd-on-01", "resolve_ticket", "TOOL", "tool:get_ticket", 200, None, None, "a4")]  # fmt: skip
    without_calls = [call("close_without_comment", "b1"), call("guessed_ticket_id", "b2", "update_ticket"),
                     call("assignee_argument", "b3", "update_ticket")]  # fmt: skip
    # the close errors carry two customers' names: two signatures until the analyzer merges them;
    # the update_ticket failures share one signature (impure), one failure is not in the view yet
    signature_of = {"a1": "sig_close_1", "a2": "sig_close_2", "b1": "sig_close_1", "a3": "sig_rate",
                    "b2": "sig_update"}  # fmt: skip
    rows = [
        Row(1, desk_stats(with_calls, enabled=True, mistakes={"close_without_comment": 2},
                          avoided={"close_without_comment": 3}),
            desk_stats(without_calls, enabled=False, mistakes={"close_without_comment": 1, "guessed_ticket_id": 1,
                                                                "assignee_argument": 1}, avoided={}))
    ]  # fmt: skip
    card = scorecard_from(rows, signature_of | {"b3": "sig_update"}, [COLUMN, DESK_ENTRY, DESK_GENERIC])
    by_cause = {c.cause: c for c in card.causes}
    close = by_cause["close_without_comment"]
    assert (close.made_with, close.made_without, close.avoided, close.failed_calls) == (2, 1, 3, 3)
    assert close.signatures == ("sig_close_1", "sig_close_2") and close.purity == 1.0
    assert close.entries == ("pb_desk",) and close.followed == 3
    assert by_cause["guessed_ticket_id"].purity == 0.5 == by_cause["assignee_argument"].purity
    assert by_cause["guessed_ticket_id"].entries == ()
    rate = by_cause["rate_limited"]
    assert not rate.planted and (rate.made_with, rate.made_without, rate.signatures) == (1, 0, ("sig_rate",))
    assert by_cause["weekend_visit"].failed_calls == 0 and by_cause["weekend_visit"].purity is None
    assert card.signatures == 4 and card.published == 2
    assert card.naming_fix == ("pb_desk",) and card.generic == ("pb_desk_generic",) and card.unmatched == 0
    assert scorecard_from(rows, signature_of, []).unmatched == 1
    lines = "\n".join(scorecard_lines(card))
    assert "close_without_comment" in lines and "rate_limited (transient)" in lines
    assert "→ 4 signatures (1–2 per cause), purity min 0.50" in lines
    assert "planted mistakes with an entry naming their fix: 1/8" in lines
    assert (
        "entries published 2: naming a planted mistake's fix or rule 1, generic 1 (pb_desk_generic)" in lines
    )
