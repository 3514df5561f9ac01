"""Lifecycle and serving: who may be served (:func:`review`), approving a proposed entry, and the
snapshot ``GET /playbooks`` serves."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from opslake.analysis.reporters import ReporterTrust
from opslake.models.playbooks import PlaybookEntry, PlaybookSnapshot


class EntryNotFoundError(KeyError):
    """No entry with that id."""


@dataclass
class Review:
    """Entries after :func:`review`, and which of them changed status."""

    entries: list[PlaybookEntry]
    published: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)


def review(
    entries: Sequence[PlaybookEntry],
    *,
    trust: ReporterTrust,
    min_reporters: int,
    approval_mode: bool,
    now: datetime,
) -> Review:
    """Recount every entry's independent reporters under the trust levels as they are now, and
    apply the one rule of what is served: an entry is ``active`` when an operator approved it, or
    when at least ``min_reporters`` independent reporters vouch for its evidence.

    * an active entry that was never approved and no longer has enough reporters (a key marked
      untrusted since, or an entry published before reporters were counted) goes back to
      ``proposed`` (``withheld``) until it is approved or gathers enough reporters again;
    * a proposed entry that has gathered enough reporters is published (``published``), except in
      approval mode, where only an operator publishes;
    * retired entries stay retired.
    """
    out = Review(entries=[])
    for entry in entries:
        if entry.status == "retired":
            out.entries.append(entry)
            continue
        count = trust.count(entry.evidence_reporters)
        update: dict[str, object] = {}
        if count != entry.evidence_reporter_count:
            update["evidence_reporter_count"] = count
        vouched = count >= min_reporters
        if entry.status == "active" and entry.approved_at is None and not vouched:
            update.update(status="proposed", published_at=None, updated_at=now)
            out.withheld.append(entry.entry_id)
        elif entry.status != "active" and vouched and not approval_mode:
            update.update(status="active", published_at=now, updated_at=now)
            out.published.append(entry.entry_id)
        out.entries.append(entry.model_copy(update=update) if update else entry)
    return out


def approve(entries: Sequence[PlaybookEntry], entry_id: str, now: datetime) -> list[PlaybookEntry]:
    """Publish a proposed entry (``opslake playbooks approve ID`` or the admin route): it is then
    served whatever its evidence (``approved_at``), until efficacy retires it.

    Approving an active entry records the approval; a retired one cannot be approved (ValueError).
    """
    out: list[PlaybookEntry] = []
    found = False
    for entry in entries:
        if entry.entry_id == entry_id:
            found = True
            if entry.status == "retired":
                raise ValueError(f"playbook entry {entry_id} is retired and cannot be approved")
            if entry.status != "active":
                entry = entry.model_copy(update={"status": "active", "published_at": now})
            if entry.approved_at is None:
                entry = entry.model_copy(update={"approved_at": now, "updated_at": now})
        out.append(entry)
    if not found:
        raise EntryNotFoundError(entry_id)
    return out


def snapshot(entries: Iterable[PlaybookEntry], now: datetime) -> PlaybookSnapshot:
    """What ``GET /playbooks`` serves: active entries only, in a stable order."""
    active = sorted((e for e in entries if e.status == "active"), key=lambda e: e.entry_id)
    return PlaybookSnapshot(generated_at=now, entries=active)
