"""Overseer-correction counters: each correction matched to what happened next, counted for or
against the entries it concerns (``corrections_for`` / ``corrections_against``), shown beside them
and moving nothing else. Whether an entry helps is its holdout experiment's to say
(:mod:`opslake.analysis.playbooks.experiment`), no longer a before/after measure here. Pure: the
consolidator passes the rows.

**Overseer corrections** (``source`` = ``overseer_correction`` with ``sig_hash`` and
``applied_at_turn``): later outcomes are the other rows with the same signature (``signature_id``
or ``sig_hash``) after the correction — in the same session, a ``turn`` greater than
``applied_at_turn`` when both are known, otherwise a later ``ts``. More later successes than
failures validates it, more failures invalidates it, otherwise it waits. It counts (once) for or
against the active entries it matches (``corrections_for`` / ``corrections_against``): entries
whose ``signature_id`` equals the ``sig_hash``; if none, entries whose ``group_key`` contains it;
if none, entries on the same endpoint (the correction's or that of its later outcomes).

A correction is a claim like any other op (any key may send ``source: overseer_correction``), so
it counts by the identity model (:mod:`opslake.analysis.reporters`): never from a key whose trust
level is ``untrusted`` (nor without a key, nor from opslake's own), and at most once per
independent reporter per entry (``correction_reporters``: a reporter key once, a runtime key once
per claimed agent up to its cap), so one key cannot move a counter by posting many corrections.
Once an entry has :data:`MAX_TRACKED_AGENTS` correction reporters, further corrections do not count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from pydantic import Field

from opslake.analysis.reporters import ReporterTrust
from opslake.models.ops import OpRow
from opslake.models.playbooks import MAX_TRACKED_AGENTS, PlaybookEntry

CORRECTION_SOURCE = "overseer_correction"


class OutcomeRow(OpRow):
    """An op as the correction counter reads it: an overseer correction, or an outcome that
    follows one (same signature, later) and decides whether it is validated."""

    success: bool
    reporter_id: str | None = None  # the API key (server-set); the consolidator keeps it for corrections
    task_class: str | None = None
    signature_id: str | None = None  # the failure's signature (computed in SQL from the op), if any
    sig_hash: str | None = None
    source: str | None = None
    session_id: str | None = None
    turn: int | None = None
    applied_at_turn: int | None = None
    count: Annotated[int, Field(ge=1)] = 1  # ops this row stands for (the consolidator aggregates)

    @property
    def signature(self) -> str | None:
        return self.signature_id or self.sig_hash

    @property
    def is_correction(self) -> bool:
        return self.source == CORRECTION_SOURCE and bool(self.sig_hash)


@dataclass
class CorrectionResult:
    entries: list[PlaybookEntry]
    corrections: dict[str, tuple[int, int]] = field(default_factory=dict)  # entry → (for, against) this run


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


def count_corrections(
    entries: Iterable[PlaybookEntry],
    outcomes: Iterable[OutcomeRow],
    *,
    now: datetime,
    trust: ReporterTrust | None = None,
) -> CorrectionResult:
    """Count every decided overseer correction in ``outcomes`` for or against the active entries it
    matches (see the module doc). ``trust`` says whose corrections count (default: every key as
    one reporter)."""
    trust = trust or ReporterTrust()
    rows = sorted(outcomes, key=lambda r: (r.ts, r.op_id))
    result = CorrectionResult(entries=[])
    current = {entry.entry_id: entry for entry in entries}
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
            current[entry.entry_id] = entry.model_copy(
                update={
                    "corrections_for": entry.corrections_for + validated,
                    "corrections_against": entry.corrections_against + (not validated),
                    "counted_correction_ids": [*entry.counted_correction_ids, correction_id(correction)][
                        -MAX_TRACKED_AGENTS:
                    ],
                    "correction_reporters": [*entry.correction_reporters, witness],
                    "updated_at": now,
                }
            )
    result.entries = list(current.values())
    return result
