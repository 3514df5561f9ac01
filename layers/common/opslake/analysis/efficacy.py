"""Does an entry help? Failure rates of the ops it targets before and after publication, and
overseer corrections matched to what happened next. Pure: the consolidator passes the rows.

**Target of an entry**: ops on ``entry.endpoint`` (and ``entry.task_class`` when set); an entry
naming neither is not measured. For an entry with a ``signature_id`` (an avoid entry from a
diagnosis) a failure is a failed op *of that signature*; otherwise any failed op.

**Windows**: ``ts < published_at`` is before, the rest after. ``outcomes`` should cover a lookback
window (numbers are recomputed each run); the before numbers keep the largest sample seen, since
the lookback eventually moves past them. Where rows say which entries the agent had read
(``read_entry_ids``), the after numbers use only readers, when there are enough of them.

**Judgement** (at most once per ``min_ops`` new after-publication ops, and only with ``min_ops``
ops on each side): confidence rises by :data:`STEP_UP` when the failure rate fell by at least
:data:`MIN_ABS_DROP` absolute and :data:`MIN_REL_DROP` relative; it stays when both rates are
already at most :data:`LOW_RATE` (nothing left to improve); otherwise it falls by :data:`STEP_DOWN`.

**Overseer corrections** (``source`` = ``overseer_correction`` with ``sig_hash`` and
``applied_at_turn``): later outcomes are the other rows with the same signature (``signature_id``
or ``sig_hash``) after the correction — in the same session, a ``turn`` greater than
``applied_at_turn`` when both are known, otherwise a later ``ts``. More later successes than
failures validates it, more failures invalidates it, otherwise it waits. It counts (once) for or
against the active entries it matches: entries whose ``signature_id`` equals the ``sig_hash``;
if none, entries whose ``group_key`` contains it; if none, entries on the same endpoint (the
correction's or that of its later outcomes).

A correction is a claim like any other op (any key may send ``source: overseer_correction``), so
it counts by the identity model (:mod:`opslake.analysis.reporters`): never from a key whose trust
level is ``untrusted`` (nor without a key, nor from opslake's own), and at most once per
independent reporter per entry (``correction_reporters``: a reporter key once, a runtime key once
per claimed agent up to its cap), so one key cannot move an entry by posting many corrections.
Once an entry has :data:`MAX_TRACKED_AGENTS` correction reporters, further corrections do not count.

An entry whose confidence falls below ``retire_below`` is retired.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from opslake.analysis.reporters import ReporterTrust
from opslake.models.ops import OpRow
from opslake.models.playbooks import MAX_TRACKED_AGENTS, PlaybookEntry

CORRECTION_SOURCE = "overseer_correction"
STEP_UP = 0.1
STEP_DOWN = 0.1
MIN_ABS_DROP = 0.05
MIN_REL_DROP = 0.2
LOW_RATE = 0.05
CORRECTION_FOR = 0.05
CORRECTION_AGAINST = 0.1

Verdict = Literal["improved", "held", "not_improved", "insufficient_data", "not_measurable"]


class OutcomeRow(OpRow):
    """An op as efficacy reads it (outcomes and overseer corrections alike)."""

    success: bool
    reporter_id: str | None = None  # the API key (server-set); the consolidator keeps it for corrections
    task_class: str | None = None
    signature_id: str | None = None  # the failure's signature (computed in SQL from the op), if any
    sig_hash: str | None = None
    source: str | None = None
    session_id: str | None = None
    turn: int | None = None
    applied_at_turn: int | None = None
    read_entry_ids: tuple[str, ...] | None = None  # entries the agent had read; None = unknown
    count: Annotated[int, Field(ge=1)] = 1  # ops this row stands for (the consolidator aggregates)

    @property
    def signature(self) -> str | None:
        return self.signature_id or self.sig_hash

    @property
    def is_correction(self) -> bool:
        return self.source == CORRECTION_SOURCE and bool(self.sig_hash)


@dataclass
class EfficacyResult:
    entries: list[PlaybookEntry]
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    corrections: dict[str, tuple[int, int]] = field(default_factory=dict)  # entry → (for, against) this run
    retired: list[str] = field(default_factory=list)


def _targets(entry: PlaybookEntry, row: OutcomeRow) -> bool:
    if entry.endpoint is not None and row.endpoint != entry.endpoint:
        return False
    return entry.task_class is None or row.task_class == entry.task_class


def _failed(entry: PlaybookEntry, row: OutcomeRow) -> bool:
    if row.success:
        return False
    return entry.signature_id is None or row.signature == entry.signature_id


def _tally(entry: PlaybookEntry, rows: Sequence[OutcomeRow]) -> tuple[int, int]:
    """(ops, failures of the entry's kind) that ``rows`` stand for."""
    return sum(r.count for r in rows), sum(r.count for r in rows if _failed(entry, r))


def _rate(failures: int, ops: int) -> float | None:
    return round(failures / ops, 4) if ops else None


def _measure(
    entry: PlaybookEntry,
    outcomes: Sequence[OutcomeRow],
    *,
    now: datetime,
    min_ops: int,
    reader_outcomes: Sequence[OutcomeRow] = (),
) -> tuple[PlaybookEntry, Verdict]:
    if entry.published_at is None or (entry.endpoint is None and entry.task_class is None):
        return entry, "not_measurable"
    rows = [r for r in outcomes if _targets(entry, r)]
    before = [r for r in rows if r.ts < entry.published_at]
    after = [r for r in rows if r.ts >= entry.published_at]
    basis: Literal["all", "readers"] = "all"
    readers = [
        r
        for r in (*after, *(r for r in reader_outcomes if _targets(entry, r) and r.ts >= entry.published_at))
        if r.read_entry_ids is not None and entry.entry_id in r.read_entry_ids
    ]
    if sum(r.count for r in readers) >= min_ops:
        after, basis = readers, "readers"
    ops_before, failures_before = _tally(entry, before)
    if entry.ops_before is not None and entry.failures_before is not None and entry.ops_before > ops_before:
        ops_before, failures_before = entry.ops_before, entry.failures_before
    ops_after, failures_after = _tally(entry, after)
    rate_before, rate_after = _rate(failures_before, ops_before), _rate(failures_after, ops_after)
    judged = entry.judged_ops_after
    if judged is not None and ops_after < judged:  # the window moved: count new ops from here
        judged = ops_after
    update: dict[str, object] = {
        "ops_before": ops_before, "failures_before": failures_before, "ops_after": ops_after,
        "failures_after": failures_after, "failure_rate_before": rate_before, "failure_rate_after": rate_after,
        "efficacy_basis": basis, "efficacy_checked_at": now, "judged_ops_after": judged,
    }  # fmt: skip
    due = judged is None or ops_after - judged >= min_ops
    if rate_before is None or rate_after is None or ops_before < min_ops or ops_after < min_ops or not due:
        return entry.model_copy(update=update), "insufficient_data"
    verdict: Verdict
    confidence = entry.confidence
    if rate_before - rate_after >= max(MIN_ABS_DROP, MIN_REL_DROP * rate_before):
        verdict, confidence = "improved", confidence + STEP_UP
    elif rate_before <= LOW_RATE and rate_after <= LOW_RATE:
        verdict = "held"
    else:
        verdict, confidence = "not_improved", confidence - STEP_DOWN
    update.update(
        judged_ops_after=ops_after, confidence=round(min(1.0, max(0.0, confidence)), 3), updated_at=now
    )
    return entry.model_copy(update=update), verdict


def _is_after(row: OutcomeRow, correction: OutcomeRow) -> bool:
    if (
        correction.session_id is not None
        and row.session_id == correction.session_id
        and row.turn is not None
        and correction.applied_at_turn is not None
    ):
        return row.turn > correction.applied_at_turn
    return row.ts > correction.ts


def correction_verdicts(outcomes: Sequence[OutcomeRow]) -> list[tuple[OutcomeRow, bool, set[str]]]:
    """Each decided correction: (the correction, validated?, endpoints it concerns)."""
    decided = []
    for correction in (r for r in outcomes if r.is_correction):
        later = [
            r
            for r in outcomes
            if not r.is_correction and r.signature == correction.sig_hash and _is_after(r, correction)
        ]
        successes = sum(r.count for r in later if r.success)
        failures = sum(r.count for r in later) - successes
        if successes == failures:
            continue
        decided.append(
            (correction, successes > failures, {correction.endpoint, *(r.endpoint for r in later)})
        )
    return decided


def matching_entries(
    entries: Sequence[PlaybookEntry], sig_hash: str, endpoints: set[str]
) -> list[PlaybookEntry]:
    """The active entries a correction of ``sig_hash`` counts for or against (see module doc)."""
    active = [e for e in entries if e.status == "active"]
    for rule in (
        lambda e: e.signature_id == sig_hash,
        lambda e: bool(e.group_key) and sig_hash in (e.group_key or ""),
        lambda e: e.endpoint in endpoints,
    ):
        found = [e for e in active if rule(e)]
        if found:
            return found
    return []


def _correction_witness(entry: PlaybookEntry, correction: OutcomeRow, trust: ReporterTrust) -> str | None:
    """The reporter a correction adds to ``entry``'s correction reporters, or None when it adds no
    independent reporter (an untrusted key, a reporter already counted, a runtime key at its cap,
    or an entry that tracks as many reporters as it can)."""
    witness = trust.witness(correction.reporter_id, correction.agent_id)
    known = entry.correction_reporters
    if witness is None or witness in known or len(known) >= MAX_TRACKED_AGENTS:
        return None
    return witness if trust.count([*known, witness]) > trust.count(known) else None


def correction_id(correction: OutcomeRow) -> str:
    """How ``counted_correction_ids`` names a counted correction: ``reporter_id/op_id`` (the key
    escaped like a witness's), since op ids are unique per API key only: another key's correction
    with the same ``op_id`` is another correction."""
    key = (correction.reporter_id or "").replace("%", "%25").replace("/", "%2F")
    return f"{key}/{correction.op_id}"


def _already_counted(entry: PlaybookEntry, correction: OutcomeRow) -> bool:
    """Whether ``entry`` counted this correction already. Ids stored before they named the key are
    the bare ``op_id``: such an id still matches any correction with that op_id, as it did when it
    was stored (it leaves the list as newer ids push it out)."""
    counted = entry.counted_correction_ids
    return correction_id(correction) in counted or correction.op_id in counted


def measure_efficacy(
    entries: Iterable[PlaybookEntry],
    outcomes: Iterable[OutcomeRow],
    *,
    now: datetime,
    min_ops: int = 10,
    retire_below: float = 0.2,
    reader_outcomes: Iterable[OutcomeRow] = (),
    trust: ReporterTrust | None = None,
) -> EfficacyResult:
    """Measure every active entry, apply overseer corrections, retire what fell below the bar.

    ``reader_outcomes`` are outcomes of agents known to have read entries (``read_entry_ids``),
    counted apart from ``outcomes`` (the same ops may be in both): they only ever form the
    "readers" basis of the entries they name. ``trust`` says whose corrections count (default:
    every key as one reporter)."""
    trust = trust or ReporterTrust()
    rows = sorted(outcomes, key=lambda r: (r.ts, r.op_id))
    readers = list(reader_outcomes)
    result = EfficacyResult(entries=[])
    current: dict[str, PlaybookEntry] = {}
    for entry in entries:
        if entry.status == "active":
            entry, verdict = _measure(entry, rows, now=now, min_ops=min_ops, reader_outcomes=readers)
            result.verdicts[entry.entry_id] = verdict
        current[entry.entry_id] = entry
    for correction, validated, endpoints in correction_verdicts(rows):
        assert correction.sig_hash is not None
        for entry in matching_entries(list(current.values()), correction.sig_hash, endpoints):
            if _already_counted(entry, correction):
                continue
            witness = _correction_witness(entry, correction, trust)
            if witness is None:
                continue
            pro, con = result.corrections.get(entry.entry_id, (0, 0))
            result.corrections[entry.entry_id] = (pro + validated, con + (not validated))
            delta = CORRECTION_FOR if validated else -CORRECTION_AGAINST
            current[entry.entry_id] = entry.model_copy(
                update={
                    "confidence": round(min(1.0, max(0.0, entry.confidence + delta)), 3),
                    "corrections_for": entry.corrections_for + validated,
                    "corrections_against": entry.corrections_against + (not validated),
                    "counted_correction_ids": [*entry.counted_correction_ids, correction_id(correction)][
                        -MAX_TRACKED_AGENTS:
                    ],
                    "correction_reporters": [*entry.correction_reporters, witness],
                    "updated_at": now,
                }
            )
    for entry_id, entry in current.items():
        if entry.status == "active" and entry.confidence < retire_below:
            current[entry_id] = entry.model_copy(
                update={"status": "retired", "retired_at": now, "updated_at": now}
            )
            result.retired.append(entry_id)
    result.entries = sorted(current.values(), key=lambda e: e.entry_id)
    return result
