"""Deltas: every edit of a playbook entry, recorded (table ``playbook_deltas``).

Entries change by small recorded edits only, never by a rewrite of the playbook. The steps that
change entries (merge, review, experiment, an operator's approve or retire) emit nothing
themselves: :func:`diff` compares the entries before and after a step and writes one
:class:`Delta` per changed entry, numbering the entry's ``revision`` (+1 per delta). What a delta
records (``changes_json``: ``{field: [old, new]}``) leaves out the per-run tallies (the arms'
counts and rates, the bookkeeping of judgements and corrections, ``updated_at``), so a delta is
an edit, not a heartbeat.

``op`` says what the edit was: ``add`` (a new entry), ``publish`` / ``withhold`` (served or not,
:func:`~.lifecycle.review`), ``approve`` (an operator), ``graduate`` (helpful in its experiment),
``merge`` (folded into ``merged_into``), ``deprecate`` (retired: harmful, no effect, an operator),
else ``update`` (evidence folded in, a judgement's counters, text of a proposed entry).
``by`` is who made it: ``heuristic`` or the model's name (a distiller) for what it drafted (a new
entry, or new text of a proposed one: :func:`merge_author`), else ``consolidator`` or ``operator``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from opslake.models.playbooks import PlaybookEntry

DeltaOp = Literal["add", "update", "merge", "deprecate", "publish", "withhold", "approve", "graduate"]

#: Fields a delta never records: tallies recomputed by every run, and bookkeeping.
TALLIES = frozenset({
    "updated_at", "revision", "efficacy_checked_at", "experiment_started_at", "judged_at",
    "judged_treatment_ops", "judged_holdout_ops", "treatment_units", "holdout_units", "treatment_ops",
    "treatment_failures", "holdout_ops", "holdout_failures", "treatment_sig_failures",
    "holdout_sig_failures", "treatment_rate", "treatment_rate_low", "treatment_rate_high", "holdout_rate",
    "holdout_rate_low", "holdout_rate_high", "effect", "effect_low", "effect_high", "design_effect",
    "followed_treatment", "followed_holdout", "counted_correction_ids", "correction_reporters", "fix_failures",
    "fix_successes",
})  # fmt: skip


#: Fields a distiller's draft writes: a merge that changes one of them put the draft's text in.
DRAFTED = frozenset({"trigger", "action", "instead_of", "distilled_by"})
CONSOLIDATOR = "consolidator"


@dataclass(frozen=True)
class Delta:
    """One recorded edit of one entry (a row of ``playbook_deltas``)."""

    delta_id: str
    entry_id: str
    revision: int
    op: DeltaOp
    at: datetime
    by: str
    reason: str | None
    changes_json: str
    merged_into: str | None = None
    run_window_end: datetime | None = None

    def row(self) -> dict[str, Any]:
        return asdict(self)


def delta_id(entry_id: str, revision: int) -> str:
    """``pd_`` + 16 hex of sha256(entry_id:revision): a redone run that makes the same edit names
    it the same, so the table dedupes by it."""
    return "pd_" + hashlib.sha256(f"{entry_id}:{revision}".encode()).hexdigest()[:16]


def changes(before: PlaybookEntry | None, after: PlaybookEntry) -> dict[str, list[Any]]:
    """``{field: [old, new]}`` of every recorded field that differs (all of them for a new entry)."""
    new = after.model_dump(mode="json", exclude=set(TALLIES))
    old = before.model_dump(mode="json", exclude=set(TALLIES)) if before is not None else {}
    return {
        name: [old.get(name), value]
        for name, value in new.items()
        if old.get(name) != value and (before is not None or value not in (None, [], 0))
    }


def op_of(before: PlaybookEntry | None, after: PlaybookEntry) -> DeltaOp:
    """What kind of edit turned ``before`` into ``after``."""
    if before is None:
        return "add"
    if after.status == "retired" and before.status != "retired":
        return "merge" if after.retired_reason == "merged" or after.merged_into else "deprecate"
    if after.approved_at is not None and before.approved_at is None:
        return "approve"
    if after.status == "active" and before.status != "active":
        return "publish"
    if before.status == "active" and after.status != "active":
        return "withhold"
    if after.experiment_stage == "graduated" and before.experiment_stage != "graduated":
        return "graduate"
    return "update"


def diff(
    before: Iterable[PlaybookEntry],
    after: Iterable[PlaybookEntry],
    *,
    by: str | Callable[[PlaybookEntry], str],
    reason: str | Mapping[str, str] | None = None,
    at: datetime,
    run_window_end: datetime | None = None,
) -> tuple[list[PlaybookEntry], list[Delta]]:
    """The deltas that turn ``before`` into ``after`` (one per changed entry; an entry missing
    from ``after`` is not deleted, entries never are), and ``after`` with each changed entry's
    ``revision`` one higher. ``by`` and ``reason`` may depend on the entry (a callable, a mapping
    by entry_id)."""
    old = {e.entry_id: e for e in before}
    entries: list[PlaybookEntry] = []
    deltas: list[Delta] = []
    for entry in after:
        previous = old.get(entry.entry_id)
        changed = changes(previous, entry)
        if not changed:
            entries.append(entry)
            continue
        revision = (previous.revision if previous is not None else entry.revision) + 1
        entry = entry.model_copy(update={"revision": revision})
        why = reason.get(entry.entry_id) if isinstance(reason, Mapping) else reason
        deltas.append(
            Delta(
                delta_id=delta_id(entry.entry_id, revision),
                entry_id=entry.entry_id,
                revision=revision,
                op=op_of(previous, entry),
                at=at,
                by=by(entry) if callable(by) else by,
                reason=why,
                changes_json=json.dumps(changed, sort_keys=True, default=str),
                merged_into=entry.merged_into,
                run_window_end=run_window_end,
            )
        )
        entries.append(entry)
    return entries, deltas


def merge_author(before: Iterable[PlaybookEntry]) -> Callable[[PlaybookEntry], str]:
    """``by`` for the merge step's deltas: a new entry, or a proposed entry's text replaced by a
    draft, is the distiller's work (``distilled_by``); evidence folded into an entry, its text
    unchanged, is the consolidator's edit (crediting it to the entry's original distiller would
    say a model wrote what no model touched)."""
    old = {e.entry_id: e for e in before}

    def by(entry: PlaybookEntry) -> str:
        previous = old.get(entry.entry_id)
        drafted = previous is None or any(getattr(previous, f) != getattr(entry, f) for f in DRAFTED)
        return (entry.distilled_by or CONSOLIDATOR) if drafted else CONSOLIDATOR

    return by
