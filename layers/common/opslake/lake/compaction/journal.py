"""The per-partition journal: one JSON object holding a compaction's state, its lease and history.

It lives at ``state/compaction/<table>/dt=D/hour=H.json`` and changes only through
:class:`~opslake.lake.conditional.ConditionalJson` (``IfNoneMatch="*"`` to create,
``IfMatch=<etag>`` to change), so two compactors can never both advance one partition. ``owner``
and ``lease_until`` are the lease: every step renews it, and a run that finds it held by another
reports the partition busy.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opslake.lake.compaction.planner import SourceFile
from opslake.lake.conditional import ConditionalJson, lease_is_held

PLANNED, WRITTEN, VERIFIED, SWAPPED, DONE = "planned", "written", "verified", "swapped", "done"
ACTIVE_STATES = (PLANNED, WRITTEN, VERIFIED)

_HISTORY = 20  # journal history entries kept


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def parse_time(text: str) -> datetime:
    """A journal time; the empty string (never set) is the earliest time."""
    return datetime.fromisoformat(text) if text else datetime.min.replace(tzinfo=UTC)


@dataclass
class Journal:
    """The per-partition state object (JSON in S3)."""

    dt: str
    hour: str
    state: str
    generation: str
    owner: str
    lease_until: str
    source_location: str  # Glue location when planned (ops/ prefix, or a previous generation)
    target_location: str
    sources: list[dict[str, Any]]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)  # generation prefixes never made visible
    rows_in: int = 0
    distinct_ops: int = 0  # distinct (reporter_id, op_id) pairs of the sources
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    swapped_at: str = ""
    delete_after: str = ""
    last_error: str = ""
    history: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Journal:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @property
    def source_files(self) -> list[SourceFile]:
        return [SourceFile(s["key"], int(s["size"]), s["etag"]) for s in self.sources]

    def leased(self, now: datetime) -> bool:
        """Whether ``owner`` still holds the partition at ``now``."""
        return lease_is_held(self.owner, parse_time(self.lease_until) if self.lease_until else None, now)


class JournalLeaseLost(Exception):
    """A conditional journal write failed: another compactor owns the partition now."""


class JournalStore:
    """One partition's journal in S3, and the ETag this run last read or wrote: its hold on it."""

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        self._object = ConditionalJson(s3, bucket, key)
        self.etag: str | None = None

    def read(self) -> Journal | None:
        """The journal (``None`` when the partition was never planned); remembers its ETag."""
        document, etag = self._object.read()
        journal = None if document is None else Journal.from_json(document)
        self.etag = etag
        return journal

    def save(self, journal: Journal, state: str, *, owner: str, now: datetime, lease_s: float) -> None:
        """Record ``state`` by ``owner``, leased for ``lease_s`` from ``now`` (0 releases it), only if
        the journal is still the one this run read or wrote last; else :class:`JournalLeaseLost`."""
        journal.state = state
        journal.owner = owner
        journal.lease_until = iso(now + timedelta(seconds=lease_s))
        journal.history = [*journal.history, {"state": state, "at": iso(now), "by": owner}][-_HISTORY:]
        etag = self._object.write(journal.to_json(), self.etag)
        if etag is None:
            raise JournalLeaseLost("journal changed since read")
        self.etag = etag
