"""How the compactor chooses and sizes its work."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class CompactionOptions:
    """How the compactor chooses and sizes its work.

    ``min_age_hours`` counts from the END of an hour. It must exceed the longest time the
    writer may still add files to an hour: a message sent in hour H can be redelivered for
    maxReceiveCount 5 x VisibilityTimeout 900 s = 75 min (template.yaml, OpsQueue), plus the
    60 s batching window and the writer's 120 s timeout, i.e. about 78 min after H ends. A file
    written into ``ops/`` after the swap is not lost (the next run finds it and compacts a new
    generation with it) but is invisible to readers until then; 3 h leaves a wide margin.
    """

    min_age_hours: float = 3.0
    target_file_bytes: int = 128 * MiB
    grace_s: float = (
        3600.0  # old files outlive the swap by this much (readers that resolved the old location)
    )
    max_partitions: int = 24  # partitions that do work (write, swap or delete) per run
    lease_s: float = 1800.0  # a compactor owns a partition this long after each step (2x Lambda timeout)
    max_replans: int = 1  # re-plans in one run when sources change under it; then left for the next run
