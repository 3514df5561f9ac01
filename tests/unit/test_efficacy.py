"""Efficacy: failure rates before/after publication move confidence; overseer corrections count
for or against the entry they match; entries below the bar are retired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from opslake.analysis.efficacy import OutcomeRow, matching_entries, measure_efficacy
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


def ops(n: int, failures: int, *, after: bool, endpoint: str = "/sql", **fields: Any) -> list[OutcomeRow]:
    """``n`` ops on ``endpoint`` (the first ``failures`` failed), before or after publication."""
    start = PUBLISHED + (timedelta(minutes=1) if after else -timedelta(hours=5))
    return [
        OutcomeRow(
            op_id=f"op-{next(_counter)}",
            endpoint=endpoint,
            agent_id=f"agent-{i % 3}",
            ts=start + timedelta(seconds=i),
            success=i >= failures,
            **fields,
        )
        for i in range(n)
    ]


def test_confidence_rises_when_failures_fall() -> None:
    result = measure_efficacy([entry()], [*ops(20, 8, after=False), *ops(20, 2, after=True)], now=NOW)
    (measured,) = result.entries
    assert result.verdicts == {"pb_sql": "improved"}
    assert (measured.ops_before, measured.failures_before, measured.ops_after, measured.failures_after) == (
        20, 8, 20, 2,
    )  # fmt: skip
    assert (measured.failure_rate_before, measured.failure_rate_after) == (0.4, 0.1)
    assert (
        measured.confidence == 0.6 and measured.judged_ops_after == 20 and measured.efficacy_checked_at == NOW
    )


def test_aggregated_rows_count_as_the_ops_they_stand_for() -> None:
    def grouped(n: int, failures: int, *, after: bool) -> list[OutcomeRow]:
        at = PUBLISHED + (timedelta(minutes=1) if after else -timedelta(hours=5))
        base = {"endpoint": "/sql", "agent_id": "agent-0", "ts": at}
        return [
            OutcomeRow(op_id=f"g-{after}-f", success=False, count=failures, **base),
            OutcomeRow(op_id=f"g-{after}-s", success=True, count=n - failures, **base),
        ]

    one_by_one = measure_efficacy([entry()], [*ops(20, 8, after=False), *ops(20, 2, after=True)], now=NOW)
    grouped_result = measure_efficacy(
        [entry()], [*grouped(20, 8, after=False), *grouped(20, 2, after=True)], now=NOW
    )
    assert grouped_result.entries == one_by_one.entries and grouped_result.verdicts == one_by_one.verdicts


def test_confidence_falls_when_failures_do_not() -> None:
    result = measure_efficacy([entry()], [*ops(20, 4, after=False), *ops(20, 5, after=True)], now=NOW)
    assert result.verdicts == {"pb_sql": "not_improved"} and result.entries[0].confidence == 0.4


def test_nothing_to_improve_holds_confidence() -> None:
    result = measure_efficacy([entry()], [*ops(20, 0, after=False), *ops(20, 0, after=True)], now=NOW)
    assert result.verdicts == {"pb_sql": "held"} and result.entries[0].confidence == 0.5


def test_too_few_ops_after_publication_is_not_judged() -> None:
    result = measure_efficacy([entry()], [*ops(20, 8, after=False), *ops(9, 9, after=True)], now=NOW)
    (measured,) = result.entries
    assert result.verdicts == {"pb_sql": "insufficient_data"} and measured.confidence == 0.5
    assert measured.ops_after == 9  # the numbers are kept anyway
    assert measure_efficacy([entry()], ops(9, 9, after=True), now=NOW, min_ops=5).verdicts == {
        "pb_sql": "insufficient_data"  # no baseline
    }


def test_judged_once_per_min_ops_new_ops() -> None:
    rows = [*ops(20, 8, after=False), *ops(20, 2, after=True)]
    once = measure_efficacy([entry()], rows, now=NOW).entries
    again = measure_efficacy(once, rows, now=NOW)  # same data, next run: no second step
    assert again.verdicts == {"pb_sql": "insufficient_data"} and again.entries[0].confidence == 0.6
    more = measure_efficacy(once, [*rows, *ops(10, 1, after=True)], now=NOW)
    assert more.verdicts == {"pb_sql": "improved"} and more.entries[0].confidence == 0.7


def test_the_baseline_keeps_its_largest_sample() -> None:
    (measured,) = measure_efficacy(
        [entry()], [*ops(20, 8, after=False), *ops(20, 2, after=True)], now=NOW
    ).entries
    (later,) = measure_efficacy([measured], ops(30, 3, after=True), now=NOW).entries  # lookback moved on
    assert (later.ops_before, later.failures_before, later.ops_after) == (20, 8, 30)


def test_target_is_endpoint_task_class_and_signature() -> None:
    rows = [
        *ops(20, 8, after=False),
        *ops(20, 20, after=True, endpoint="/match"),  # another endpoint: ignored
        *ops(20, 2, after=True),
    ]
    assert measure_efficacy([entry()], rows, now=NOW).verdicts == {"pb_sql": "improved"}
    scoped = entry(task_class="staffing")
    assert measure_efficacy([scoped], rows, now=NOW).verdicts == {"pb_sql": "insufficient_data"}
    # an avoid entry about a signature counts only that signature's failures
    avoid = entry(kind="avoid", signature_id=SIG)
    sig_rows = [
        *ops(20, 10, after=False, signature_id=SIG),
        *ops(20, 10, after=True, signature_id="sig_other"),
    ]
    result = measure_efficacy([avoid], sig_rows, now=NOW)
    assert result.entries[0].failures_after == 0 and result.verdicts == {"pb_sql": "improved"}


def test_readers_are_measured_when_known() -> None:
    readers = ops(10, 0, after=True, read_entry_ids=("pb_sql",))
    others = ops(30, 30, after=True, read_entry_ids=())
    result = measure_efficacy([entry()], [*ops(20, 8, after=False), *readers, *others], now=NOW)
    (measured,) = result.entries
    assert (measured.efficacy_basis, measured.ops_after, measured.failures_after) == ("readers", 10, 0)
    assert result.verdicts == {"pb_sql": "improved"}


def test_reader_outcomes_form_the_readers_basis_without_counting_twice() -> None:
    everyone = [*ops(20, 8, after=False), *ops(40, 20, after=True)]  # all agents, readers included
    readers = ops(12, 1, after=True, read_entry_ids=("pb_sql",))
    other_entry = ops(12, 12, after=True, read_entry_ids=("pb_other",))
    result = measure_efficacy([entry()], everyone, now=NOW, reader_outcomes=[*readers, *other_entry])
    (measured,) = result.entries
    assert (measured.efficacy_basis, measured.ops_before, measured.ops_after, measured.failures_after) == (
        "readers", 20, 12, 1,
    )  # fmt: skip
    assert result.verdicts == {"pb_sql": "improved"}
    too_few = measure_efficacy([entry()], everyone, now=NOW, reader_outcomes=readers[:5])
    assert (too_few.entries[0].efficacy_basis, too_few.entries[0].ops_after) == ("all", 40)


def test_retired_below_the_threshold() -> None:
    rows = [*ops(20, 4, after=False), *ops(20, 5, after=True)]
    result = measure_efficacy([entry(confidence=0.25)], rows, now=NOW)
    (retired,) = result.entries
    assert (retired.status, retired.retired_at, retired.confidence) == ("retired", NOW, 0.15)
    assert result.retired == ["pb_sql"]
    kept = measure_efficacy([entry(confidence=0.25)], rows, now=NOW, retire_below=0.1)
    assert kept.entries[0].status == "active" and kept.retired == []


def test_only_active_entries_are_measured() -> None:
    proposed = entry(status="proposed", published_at=None)
    result = measure_efficacy([proposed], [*ops(20, 4, after=False), *ops(20, 5, after=True)], now=NOW)
    assert result.entries == [proposed] and result.verdicts == {}


# ---- overseer corrections -----------------------------------------------------------------------
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
    result = measure_efficacy([target, bystander], rows, now=NOW)
    by_id = {e.entry_id: e for e in result.entries}
    assert (by_id["pb_sig"].corrections_for, by_id["pb_sig"].confidence) == (1, 0.55)
    assert by_id["pb_sig"].counted_correction_ids == ["overseer-key/corr-1"]  # key/op id (issue 12)
    assert (by_id["pb_other"].corrections_for, by_id["pb_other"].confidence) == (0, 0.5)
    assert result.corrections == {"pb_sig": (1, 0)}
    again = measure_efficacy(result.entries, rows, now=NOW)  # counted once, whatever the window
    assert {e.entry_id: e.confidence for e in again.entries} == {"pb_sig": 0.55, "pb_other": 0.5}


def test_an_invalidated_correction_counts_against_and_can_retire() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, confidence=0.25)
    rows = [correction(), later(False, turn=6), later(False, turn=8)]
    result = measure_efficacy([target], rows, now=NOW)
    (hit,) = result.entries
    assert (hit.corrections_against, hit.confidence, hit.status) == (1, 0.15, "retired")
    assert result.corrections == {"pb_sig": (0, 1)} and result.retired == ["pb_sig"]


def test_other_sessions_are_ordered_by_time_and_ties_wait() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG)
    before = later(True, turn=99, session="s-2", minutes=-5)  # another session, earlier: not after
    tie = [correction(), before, later(True, turn=1, session="s-2", minutes=5), later(False, turn=6)]
    assert measure_efficacy([target], tie, now=NOW).corrections == {}
    assert measure_efficacy([target], [correction()], now=NOW).corrections == {}  # nothing yet


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


def test_one_key_posting_many_corrections_moves_confidence_as_one_reporter() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG)
    rows = [row for n in range(8) for row in validated("mallory", n, agent=f"agent-{n}")]
    result = measure_efficacy([target], rows, now=NOW)
    (hit,) = result.entries
    assert (hit.corrections_for, hit.confidence, hit.correction_reporters) == (1, 0.55, ["mallory"])
    assert result.corrections == {"pb_sig": (1, 0)}
    # later runs, and more corrections from the same key, add nothing; another key counts once more
    more = [row for n in range(8, 12) for row in validated("mallory", n)]
    again = measure_efficacy(result.entries, [*rows, *more, *validated("trent", 0)], now=NOW)
    assert (again.entries[0].corrections_for, again.entries[0].confidence) == (2, 0.6)
    assert again.entries[0].correction_reporters == ["mallory", "trent"]


def test_an_untrusted_keys_corrections_do_not_count() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, confidence=0.25)
    invalidated = [correction(key="mallory"), later(False, turn=6), later(False, turn=8)]
    trust = ReporterTrust(levels={"mallory": "untrusted"})
    result = measure_efficacy([target], invalidated, now=NOW, trust=trust)
    (kept,) = result.entries
    assert (kept.confidence, kept.status, kept.corrections_against) == (0.25, "active", 0)
    assert result.corrections == {} and result.retired == []
    # nor do corrections without a key, or opslake's own
    for key in (None, "opslake-analyzer"):
        rows = [correction(key=key), later(False, turn=6), later(False, turn=8)]
        assert measure_efficacy([target], rows, now=NOW).corrections == {}
    # with an untrusted default, only the keys named trusted count
    cautious = ReporterTrust(levels={"trent": "reporter"}, default="untrusted")
    rows = [*validated("mallory", 0), *validated("trent", 0)]
    (hit,) = measure_efficacy([target], rows, now=NOW, trust=cautious).entries
    assert (hit.corrections_for, hit.correction_reporters) == (1, ["trent"])


def test_a_runtime_keys_corrections_count_once_per_claimed_agent_up_to_its_cap() -> None:
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, confidence=0.2)
    trust = ReporterTrust(levels={"runtime": "runtime"})
    rows = [row for n in range(9) for row in validated("runtime", n, agent=f"agent-{n % 7}")]
    (hit,) = measure_efficacy([target], rows, now=NOW, trust=trust).entries
    assert hit.corrections_for == trust.runtime_cap == 5 and hit.confidence == 0.45


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
    result = measure_efficacy([target], rows, now=NOW)
    [kept] = result.entries
    assert (kept.corrections_for, sorted(kept.correction_reporters)) == (2, ["alice", "mallory"])
    assert sorted(kept.counted_correction_ids) == ["alice/corr-1", "mallory/corr-1"]


def test_a_correction_id_stored_before_it_named_the_key_still_counts_it_once() -> None:
    """Ids stored before the key was part of them are bare op ids: they match as they did."""
    target = entry(entry_id="pb_sig", kind="avoid", signature_id=SIG, counted_correction_ids=["corr-1"])
    rows = [correction("corr-1", key="alice"), later(True, turn=6)]
    [kept] = measure_efficacy([target], rows, now=NOW).entries
    assert (kept.corrections_for, kept.counted_correction_ids) == (0, ["corr-1"])
