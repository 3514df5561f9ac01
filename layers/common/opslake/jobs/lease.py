"""Run state without a database: one JSON object in S3 per scheduled job, changed only with
conditional writes.

The object holds the job's watermark, its lease and whatever the job keeps between runs (the
analyzer's signatures, the consolidator's entries). A run

1. *acquires* the lease: reads the object and rewrites it with itself as holder, ``IfMatch`` the
   ETag it read (``IfNoneMatch="*"`` when there is no object yet). Of two overlapping runs, S3
   lets exactly one write succeed; the other sees a held lease or a ``PreconditionFailed``;
2. does its work, writing only objects that a rerun would overwrite with the same names;
3. *commits*: writes the new watermark and data with the lease cleared, ``IfMatch`` the ETag of
   its own lease write. If the lease expired and another run took it, the commit fails and the
   run's results are simply redone by the holder: nothing is counted twice.

A run that crashes anywhere before the commit leaves the old watermark and data; its lease
expires after ``lease_s`` and the next run redoes the window.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from opslake.lake.conditional import ConditionalJson, StateError, lease_is_held
from opslake.models.ids import new_ulid

__all__ = [
    "Lease",
    "LeaseLostError",
    "RunState",
    "StateError",
    "StateStore",
    "run_with_lease",
]


class LeaseLostError(StateError):
    """Another run took the lease (ours expired): this run's commit was refused."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat(timespec="milliseconds")


def _parse_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass
class RunState:
    """What a job keeps between runs."""

    watermark: datetime | None = None
    data: dict[str, Any] = field(default_factory=dict)
    lease_holder: str | None = None
    lease_expires: datetime | None = None
    committed_at: datetime | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "watermark": _iso(self.watermark),
                "lease_holder": self.lease_holder,
                "lease_expires": _iso(self.lease_expires),
                "committed_at": _iso(self.committed_at),
                "data": self.data,
            },
            separators=(",", ":"),
            default=str,
        ).encode()

    @classmethod
    def from_json(cls, body: bytes) -> RunState:
        return cls.from_document(json.loads(body))

    @classmethod
    def from_document(cls, document: Any) -> RunState:
        if not isinstance(document, dict):
            raise ValueError("state object is not a JSON object")
        return cls(
            watermark=_parse_time(document.get("watermark")),
            data=document.get("data") or {},
            lease_holder=document.get("lease_holder"),
            lease_expires=_parse_time(document.get("lease_expires")),
            committed_at=_parse_time(document.get("committed_at")),
        )


@dataclass
class Lease:
    """A held lease: the state as it was when taken, and the ETag that proves we hold it."""

    holder: str
    etag: str
    state: RunState


class StateStore:
    """One job's run state at ``s3://bucket/key``, under a lease (see the module docstring)."""

    def __init__(
        self,
        s3: Any,
        bucket: str,
        key: str,
        *,
        lease_s: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._object = ConditionalJson(s3, bucket, key)
        self.bucket = bucket
        self.key = key
        self.lease_s = lease_s
        self._clock = clock

    def read(self) -> tuple[RunState, str | None]:
        """The current state and its ETag (a fresh state and ``None`` when there is none yet)."""
        document, etag = self._object.read()
        if document is None:
            return RunState(), None
        try:
            return RunState.from_document(document), etag
        except ValueError as exc:
            raise StateError(f"{self._object.uri} is not a valid state object: {exc}") from exc

    def acquire(self, holder: str | None = None) -> Lease | None:
        """Take the lease, or ``None`` when another run holds it (or won the race for it)."""
        holder = holder or new_ulid()
        state, etag = self.read()
        now = self._clock()
        if lease_is_held(state.lease_holder, state.lease_expires, now):
            return None
        leased = RunState(
            watermark=state.watermark,
            data=state.data,
            lease_holder=holder,
            lease_expires=now + timedelta(seconds=self.lease_s),
            committed_at=state.committed_at,
        )
        new_etag = self._object.write(leased.to_json(), etag)
        if new_etag is None:
            return None
        return Lease(holder=holder, etag=new_etag, state=leased)

    def commit(self, lease: Lease, *, watermark: datetime | None, data: dict[str, Any]) -> RunState:
        """Store the run's results and release the lease, only if we still hold it."""
        committed = RunState(watermark=watermark, data=data, committed_at=self._clock())
        if self._object.write(committed.to_json(), lease.etag) is None:
            raise LeaseLostError(
                f"{self._object.uri} changed while this run held its lease "
                f"(the lease of {self.lease_s:g} s expired?): the next run redoes this window"
            )
        return committed

    def release(self, lease: Lease) -> bool:
        """Give the lease back unchanged (a run that found nothing to do, or failed)."""
        state = lease.state
        released = RunState(watermark=state.watermark, data=state.data, committed_at=state.committed_at)
        try:
            return self._object.write(released.to_json(), lease.etag) is not None
        except StateError:
            return False  # the lease expires by itself


def run_with_lease(state: StateStore, work: Callable[[Lease], None]) -> Literal["done", "busy", "lease_lost"]:
    """Do ``work`` under the lease: "busy" when another run holds it, "lease_lost" when the work's
    commit was refused (its results are redone by the holder). Any other failure gives the lease
    back at once, so the next scheduled run need not wait for it to expire, and is raised."""
    lease = state.acquire()
    if lease is None:
        return "busy"
    try:
        work(lease)
    except LeaseLostError:
        return "lease_lost"
    except BaseException:
        state.release(lease)
        raise
    return "done"
