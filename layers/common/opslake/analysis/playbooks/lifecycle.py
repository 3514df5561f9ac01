"""Lifecycle and serving: approving a proposed entry, and the snapshot ``GET /playbooks`` serves."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from opslake.models.playbooks import PlaybookEntry, PlaybookSnapshot


class EntryNotFoundError(KeyError):
    """No entry with that id."""


def approve(entries: Sequence[PlaybookEntry], entry_id: str, now: datetime) -> list[PlaybookEntry]:
    """Publish a proposed entry (``opslake playbooks approve ID`` or the admin route).

    Approving an active entry changes nothing; a retired one cannot be approved (ValueError).
    """
    out: list[PlaybookEntry] = []
    found = False
    for entry in entries:
        if entry.entry_id == entry_id:
            found = True
            if entry.status == "retired":
                raise ValueError(f"playbook entry {entry_id} is retired and cannot be approved")
            if entry.status != "active":
                entry = entry.model_copy(update={"status": "active", "published_at": now, "updated_at": now})
        out.append(entry)
    if not found:
        raise EntryNotFoundError(entry_id)
    return out


def snapshot(entries: Iterable[PlaybookEntry], now: datetime) -> PlaybookSnapshot:
    """What ``GET /playbooks`` serves: active entries only, in a stable order."""
    active = sorted((e for e in entries if e.status == "active"), key=lambda e: e.entry_id)
    return PlaybookSnapshot(generated_at=now, entries=active)
