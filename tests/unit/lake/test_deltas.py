"""Deltas (issue 16): every edit of an entry is recorded by a diff of the entries before and after
a step, one delta per changed entry with a stable id and the entry's revision one higher; per-run
tallies are no edit; the run's deltas and an operator's are named by what they hold."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opslake.analysis.playbooks.deltas import delta_id, diff, merge_author
from opslake.lake import derived
from opslake.models.playbooks import PlaybookEntry

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
END = T0 + timedelta(minutes=30)


def entry(**fields: Any) -> PlaybookEntry:
    values: dict[str, Any] = {
        "entry_id": "pb_x", "trigger": "SQL question over workers", "action": "Use the column hourly_rate",
        "kind": "do", "confidence": 0.5, "domain": "sql", "endpoint": "/sql", "status": "proposed",
        "created_at": T0, "distilled_by": "heuristic", **fields,
    }  # fmt: skip
    return PlaybookEntry(**values)


def test_each_change_is_one_delta_and_one_revision() -> None:
    created, [add] = diff([], [entry()], by=lambda e: e.distilled_by or "?", reason="evidence", at=T0)
    assert (add.op, add.by, add.revision, created[0].revision) == ("add", "heuristic", 1, 1)
    assert add.delta_id == delta_id("pb_x", 1) and add.delta_id.startswith("pd_") and len(add.delta_id) == 19
    assert json.loads(add.changes_json)["action"] == [None, "Use the column hourly_rate"]

    published = created[0].model_copy(update={"status": "active", "published_at": T0})
    served, [publish] = diff(created, [published], by="consolidator", reason={"pb_x": "3 reporters"}, at=T0)
    assert (publish.op, publish.revision, publish.reason, served[0].revision) == (
        "publish",
        2,
        "3 reporters",
        2,
    )
    assert json.loads(publish.changes_json)["status"] == ["proposed", "active"]

    graduated = served[0].model_copy(
        update={"experiment_stage": "graduated", "holdout_share": 0.05, "helpful_count": 2}
    )
    _, [graduate] = diff(served, [graduated], by="consolidator", at=T0, run_window_end=END)
    assert (graduate.op, graduate.revision, graduate.run_window_end) == ("graduate", 3, END)
    retired = served[0].model_copy(update={"status": "retired", "retired_reason": "harmful"})
    assert diff(served, [retired], by="consolidator", at=T0)[1][0].op == "deprecate"
    merged = served[0].model_copy(
        update={"status": "retired", "retired_reason": "merged", "merged_into": "pb_y"}
    )
    [merge] = diff(served, [merged], by="consolidator", at=T0)[1]
    assert (merge.op, merge.merged_into) == ("merge", "pb_y")
    approved = created[0].model_copy(update={"status": "active", "approved_at": T0})
    assert diff(created, [approved], by="operator", at=T0)[1][0].op == "approve"
    withheld = served[0].model_copy(update={"status": "proposed", "published_at": None})
    assert diff(served, [withheld], by="consolidator", at=T0)[1][0].op == "withhold"


def test_tallies_are_not_edits_and_nothing_changed_is_no_delta() -> None:
    before = entry(status="active")
    tallied = before.model_copy(
        update={"treatment_ops": 40, "holdout_ops": 38, "effect": 0.1, "design_effect": 1.2, "judged_at": T0,
                "updated_at": T0, "followed_holdout": 3, "experiment_started_at": T0}
    )  # fmt: skip
    entries, deltas = diff([before], [tallied], by="consolidator", at=T0)
    assert deltas == [] and entries[0].revision == 0
    judged = tallied.model_copy(update={"helpful_count": 1, "helpful_streak": 1, "last_verdict": "helpful"})
    [update] = diff([before], [judged], by="consolidator", reason="judged: helpful", at=T0)[1]
    assert update.op == "update" and set(json.loads(update.changes_json)) == {
        "helpful_count", "helpful_streak", "last_verdict",
    }  # fmt: skip


def test_a_redone_step_names_its_deltas_the_same() -> None:
    one = diff([entry()], [entry(confidence=0.6)], by="heuristic", at=T0)[1]
    two = diff([entry()], [entry(confidence=0.6)], by="heuristic", at=T0 + timedelta(seconds=5))[1]
    assert [d.delta_id for d in one] == [d.delta_id for d in two]
    ids = [d.delta_id for d in one]
    # a run's object is named by the committed state it started from: its redo overwrites it
    assert derived.run_deltas_key(END) == "derived/playbook_deltas/run-20261120T103000000000.parquet"
    assert derived.run_deltas_key(None) == "derived/playbook_deltas/run-initial.parquet"
    assert derived.delta_key(ids[0]) == f"derived/playbook_deltas/{ids[0]}.parquet"
    rows = derived.read_rows(derived.parquet_bytes("playbook_deltas", [d.row() for d in one]))
    assert [(r["delta_id"], r["op"], r["revision"]) for r in rows] == [(ids[0], "update", 1)]


def test_the_model_drafts_one_group_at_a_time_and_one_answer_is_at_most_one_add_or_update() -> None:
    """No step lets a model rewrite the playbook (plan §4): its prompt holds one group's evidence and
    no entry's text, and one answer adds or updates one entry at most; the others keep their revision."""
    from opslake.analysis.playbooks import SuccessRow, candidate_groups, distill_groups, merge_candidates

    def success(i: int, agent: str) -> SuccessRow:
        sql = f"SELECT name, rating FROM workers WHERE city = 'Austin' LIMIT {10 + i}"
        return SuccessRow(
            op_id=f"op-{agent}-{i}", endpoint="/sql", agent_id=agent, reporter_id=agent, ts=T0,
            task_class="staffing_lookup", input_summary="POST /sql " + json.dumps({"sql": sql}), source="gateway",
        )  # fmt: skip

    others = [
        entry(
            entry_id=f"pb_other{i}",
            status="active",
            trigger=f"Other trigger {i}",
            action=f"Keep limit {i} rows",
        )
        for i in range(3)
    ]
    prompts: list[str] = []

    def ask(prompt: str, schema: dict[str, Any]) -> str:
        prompts.append(prompt)
        return json.dumps({
            "trigger": "Questions about worker ratings", "action": "Select name and rating from workers",
            "kind": "do", "confidence": 0.6, "domain": "sql", "scope": "project", "evidence_excerpts": ["SELECT name"],
        })  # fmt: skip

    groups = candidate_groups([success(i, f"a{i}") for i in range(3)], [])
    drafts = distill_groups(groups, ask, model="gpt-test")
    assert len(prompts) == len(groups) == 1
    assert not any(e.trigger in prompts[0] or e.action in prompts[0] for e in others)
    merged = merge_candidates(others, drafts.candidates, now=END)
    after, deltas = diff(others, merged.entries, by="gpt-test", at=END)
    assert [d.op for d in deltas] == ["add"] and len(merged.created) + len(merged.updated) == 1
    assert [e for e in after if e.entry_id.startswith("pb_other")] == others


def test_an_evidence_fold_is_the_consolidator_s_edit_and_only_drafted_text_the_distiller_s() -> None:
    """The merge step's deltas: a new entry, or a proposed entry's text replaced by a model's draft,
    is the distiller's; more evidence folded into an entry (its text unchanged) is the consolidator's,
    not the original distiller's (a model that drafted the entry last week did not edit it today)."""
    from opslake.analysis.playbooks import SuccessRow, candidate_groups, distill_groups, merge_candidates
    from tests.vocabulary import staffing_vocabulary

    def success(i: int, agent: str) -> SuccessRow:
        sql = f"SELECT name, rating FROM workers WHERE city = 'Austin' LIMIT {10 + i}"
        return SuccessRow(
            op_id=f"op-{agent}-{i}", endpoint="/sql", agent_id=agent, reporter_id=agent, ts=T0,
            task_class="staffing_lookup", input_summary="POST /sql " + json.dumps({"sql": sql}), source="gateway",
        )  # fmt: skip

    def ask(prompt: str, schema: dict[str, Any]) -> str:
        return json.dumps({
            "trigger": "Questions about worker ratings", "action": "Select name and rating from workers",
            "kind": "do", "confidence": 0.6, "domain": "sql", "scope": "project", "evidence_excerpts": ["SELECT name"],
        })  # fmt: skip

    staffing = staffing_vocabulary()  # the model's action names a known table and column
    first = distill_groups(
        candidate_groups([success(i, f"a{i}") for i in range(3)], []),
        ask,
        model="gpt-test",
        vocabulary=staffing,
    )
    created = merge_candidates([], first.candidates, now=T0, vocabulary=staffing)
    entries, [add] = diff([], created.entries, by=merge_author([]), reason="evidence", at=T0)
    assert (add.op, add.by) == ("add", "gpt-test")
    # the next run: new evidence of the same advice folds into the entry; no text changes
    later = distill_groups(
        candidate_groups([success(i, f"b{i}") for i in range(3)], []),
        ask,
        model="gpt-test",
        vocabulary=staffing,
    )
    folded = merge_candidates(entries, later.candidates, now=END, vocabulary=staffing)
    assert folded.updated == [add.entry_id] and not folded.created
    _, [update] = diff(entries, folded.entries, by=merge_author(entries), reason="evidence", at=END)
    assert (update.op, update.by) == ("update", "consolidator")
    assert "action" not in json.loads(update.changes_json)
    # a proposed entry whose text a better-supported draft replaces: the draft's distiller wrote it
    renamed = entries[0].model_copy(
        update={"action": "Select name from workers", "distilled_by": "heuristic"}
    )
    assert merge_author([renamed])(entries[0]) == "gpt-test"
