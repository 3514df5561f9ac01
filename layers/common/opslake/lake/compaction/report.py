"""What a compaction run reports: one result per partition it looked at, and their totals."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class PartitionResult:
    """What one run did to one partition.

    ``status``: ``compacted`` (swapped this run), ``cleaned`` (old files deleted this run),
    ``waiting`` (swapped earlier, old files kept until the grace period ends), ``skipped``
    (nothing to gain or cannot proceed now: see ``reason``), ``busy`` (another compactor owns
    it), ``failed`` (an error: ``reason``; retried next run).
    """

    dt: str
    hour: str
    status: str = ""
    reason: str = ""
    generation: str = ""
    state: str = ""  # journal state at the end of the run
    files_in: int = 0
    files_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    duplicates_dropped: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    files_deleted: int = 0


@dataclass
class CompactionReport:
    run_id: str
    partitions: list[PartitionResult] = field(default_factory=list)
    deferred: int = 0  # eligible partitions left for the next run (max_partitions reached)

    def _with(self, *statuses: str) -> list[PartitionResult]:
        return [p for p in self.partitions if p.status in statuses]

    @property
    def compacted(self) -> list[PartitionResult]:
        return self._with("compacted")

    @property
    def skipped(self) -> dict[str, str]:
        return {
            f"{p.dt}/{p.hour}": f"{p.status}: {p.reason}" for p in self._with("skipped", "busy", "waiting")
        }

    @property
    def errors(self) -> dict[str, str]:
        return {f"{p.dt}/{p.hour}": p.reason for p in self._with("failed")}

    def total(self, name: str) -> int:
        return sum(int(getattr(p, name)) for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        totals = ("files_in", "files_out", "rows_in", "rows_out", "duplicates_dropped", "bytes_in")
        return {
            "run_id": self.run_id,
            "compacted": len(self.compacted),
            **{name: self.total(name) for name in (*totals, "bytes_out", "files_deleted")},
            "skipped": self.skipped,
            "errors": self.errors,
            "deferred": self.deferred,
            "partitions": [asdict(p) for p in self.partitions],
        }
