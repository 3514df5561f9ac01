"""Overseer corrections count for or against the entry they match, once per independent reporter,
and move nothing else: not confidence (the distiller's ranking prior), not the status (whether an
entry helps is its holdout experiment's to say, tests/unit/analysis/test_experiment.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from opslake.analysis.corrections import OutcomeRow, count_corrections, matching_entries
from opslake.analysis.reporters import ReporterTrust
from opslake.models.playbooks import PlaybookEntry

PUBLISHED = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
NOW = PUBLISHED + timedelta(days=1)
SIG = "sig_0123456789abcdef"


def entry(**fields: Any) -> PlaybookEntry:
    values: dict[str, Any] = {
        "entry_id": "pb_sql", "trigger": "SQL question over workers", "action": "Describe the table first",
        "kind": "do", "confidence": 0.5, "domain": "sql", "endpoint": "/sql", "status": "active",
        "group_key": "successes|/sql|-|abc", "created_at": PUBLISHED, "published_at": PUBLISHED, **fields,
    }  # fmt: skip
    return PlaybookEntry(**values)


_counter = iter(range(1_000_000))


def correction(
    op_id: str = "corr-1", *, turn: int = 5, session: str = "s-1", key: str | None = "overseer-key"
) -> OutcomeRow:
    return OutcomeRow(
        op_id=op_id, endpoint="/sql", agent_id="overseer", reporter_id=key, ts=PUBLISHED + timedelta(hours=1),
        success=True, source="overseer_correction", sig_hash=SIG, applied_at_turn=turn, session_id=session,
    )  # fmt: skip


def later(success: bool, *, turn: int, session: str = "s-1", minutes: int = 0) -> OutcomeRow:
    return OutcomeRow(
        op_id=f"later-{next(_counter)}", endpoint="/sql", agent_id="agent-1", session_id=session, turn=turn,
        ts=PUBLISHED + timedelta(hours=1, minutes=minutes), success=success, sig_hash=SIG,
    )  # fmt: skip


def test_a_validated_correction_counts_for_the_matching_entry() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG)
    bystander = entry(entry_id="pb_other")  # same endpoint, but an entry names the signature
    rows = [correction(), later(True, turn=6), later(True, turn=7), later(False, turn=4)]  # turn 4 was before
    result = count_corrections([target, bystander], rows, now=NOW)
    by_id = {e.entry_id: e for e in result.entries}
    assert (by_id["pb_sig"].corrections_for, by_id["pb_sig"].confidence) == (1, 0.5)
    assert by_id["pb_sig"].counted_correction_ids == ["overseer-key/corr-1"]  # key/op id (issue 12)
    assert (by_id["pb_other"].corrections_for, by_id["pb_other"].confidence) == (0, 0.5)
    assert result.corrections == {"pb_sig": (1, 0)}
    again = count_corrections(result.entries, rows, now=NOW)  # counted once, whatever the window
    assert {e.entry_id: e.corrections_for for e in again.entries} == {"pb_sig": 1, "pb_other": 0}


def test_an_invalidated_correction_counts_against_and_retires_nothing() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, confidence=0.25)
    rows = [correction(), later(False, turn=6), later(False, turn=8)]
    result = count_corrections([target], rows, now=NOW)
    (hit,) = result.entries
    assert (hit.corrections_against, hit.confidence, hit.status) == (1, 0.25, "active")
    assert result.corrections == {"pb_sig": (0, 1)}


def test_other_sessions_are_ordered_by_time_and_ties_wait() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG)
    before = later(True, turn=99, session="s-2", minutes=-5)  # another session, earlier: not after
    tie = [correction(), before, later(True, turn=1, session="s-2", minutes=5), later(False, turn=6)]
    assert count_corrections([target], tie, now=NOW).corrections == {}
    assert count_corrections([target], [correction()], now=NOW).corrections == {}  # nothing yet


def test_matching_falls_back_from_signature_to_group_key_to_endpoint() -> None:
    by_sig = entry(entry_id="pb_a", signature_id=SIG)
    by_key = entry(entry_id="pb_b", group_key=f"diagnosis|{SIG}")
    by_endpoint = entry(entry_id="pb_c")
    elsewhere = entry(entry_id="pb_d", endpoint="/match")
    retired = entry(entry_id="pb_e", signature_id=SIG, status="retired")
    everything = [by_sig, by_key, by_endpoint, elsewhere, retired]
    assert [e.entry_id for e in matching_entries(everything, SIG, {"/sql"})] == ["pb_a"]
    assert [e.entry_id for e in matching_entries(everything[1:], SIG, {"/sql"})] == ["pb_b"]
    assert [e.entry_id for e in matching_entries(everything[2:], SIG, {"/sql"})] == ["pb_c"]
    assert matching_entries([elsewhere], SIG, {"/sql"}) == []


# ---- corrections count by the identity model (issue 12) ------------------------------------------
def validated(key: str | None, n: int, *, agent: str = "overseer") -> list[OutcomeRow]:
    """Correction ``n`` from ``key`` in a session of its own, followed by two successes."""
    session = f"s-{key}-{n}"
    return [
        correction(f"corr-{key}-{n}", session=session, key=key).model_copy(update={"agent_id": agent}),
        later(True, turn=6, session=session),
        later(True, turn=7, session=session),
    ]


def test_one_key_posting_many_corrections_counts_as_one_reporter() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG)
    rows = [row for n in range(8) for row in validated("mallory", n, agent=f"agent-{n}")]
    result = count_corrections([target], rows, now=NOW)
    (hit,) = result.entries
    assert (hit.corrections_for, hit.confidence, hit.correction_reporters) == (1, 0.5, ["mallory"])
    assert result.corrections == {"pb_sig": (1, 0)}
    # later runs, and more corrections from the same key, add nothing; another key counts once more
    more = [row for n in range(8, 12) for row in validated("mallory", n)]
    again = count_corrections(result.entries, [*rows, *more, *validated("trent", 0)], now=NOW)
    assert (again.entries[0].corrections_for, again.entries[0].confidence) == (2, 0.5)
    assert again.entries[0].correction_reporters == ["mallory", "trent"]


def test_an_untrusted_keys_corrections_do_not_count() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, confidence=0.25)
    invalidated = [correction(key="mallory"), later(False, turn=6), later(False, turn=8)]
    trust = ReporterTrust(levels={"mallory": "untrusted"})
    result = count_corrections([target], invalidated, now=NOW, trust=trust)
    (kept,) = result.entries
    assert (kept.confidence, kept.status, kept.corrections_against) == (0.25, "active", 0)
    assert result.corrections == {}
    # nor do corrections without a key, or opslake's own
    for key in (None, "opslake-analyzer"):
        rows = [correction(key=key), later(False, turn=6), later(False, turn=8)]
        assert count_corrections([target], rows, now=NOW).corrections == {}
    # with an untrusted default, only the keys named trusted count
    cautious = ReporterTrust(levels={"trent": "reporter"}, default="untrusted")
    rows = [*validated("mallory", 0), *validated("trent", 0)]
    (hit,) = count_corrections([target], rows, now=NOW, trust=cautious).entries
    assert (hit.corrections_for, hit.correction_reporters) == (1, ["trent"])


def test_a_runtime_keys_corrections_count_once_per_claimed_agent_up_to_its_cap() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, confidence=0.2)
    trust = ReporterTrust(levels={"runtime": "runtime"})
    rows = [row for n in range(9) for row in validated("runtime", n, agent=f"agent-{n % 7}")]
    (hit,) = count_corrections([target], rows, now=NOW, trust=trust).entries
    assert hit.corrections_for == trust.runtime_cap == 5 and hit.confidence == 0.2


def test_another_keys_correction_with_a_counted_op_id_still_counts() -> None:
    """Op ids are unique per API key only (issue 12): a correction another key sent first with the
    same op_id must not make an honest key's correction look counted already."""
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG)
    rows = [
        correction("corr-1", key="mallory", session="s-m"),
        later(True, turn=6, session="s-m"),
        correction("corr-1", key="alice", session="s-a"),
        later(True, turn=6, session="s-a"),
    ]
    result = count_corrections([target], rows, now=NOW)
    [kept] = result.entries
    assert (kept.corrections_for, sorted(kept.correction_reporters)) == (2, ["alice", "mallory"])
    assert sorted(kept.counted_correction_ids) == ["alice/corr-1", "mallory/corr-1"]


def test_a_correction_id_stored_before_it_named_the_key_still_counts_it_once() -> None:
    """Ids stored before the key was part of them are bare op ids: they match as they did."""
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, counted_correction_ids=["corr-1"])
    rows = [correction("corr-1", key="alice"), later(True, turn=6)]
    [kept] = count_corrections([target], rows, now=NOW).entries
    assert (kept.corrections_for, kept.counted_correction_ids) == (0, ["corr-1"])
