"""Where things live in the lake bucket. Pure string logic (no pyarrow, no boto3)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache

PARTITION_KEYS: tuple[str, ...] = ("dt", "hour")
MILLIS_PER_HOUR = 3_600_000


def partition_values(ingested_at: datetime) -> tuple[str, str]:
    """(dt, hour) of a record: from the UTC time the queue received it."""
    return ingested_at.strftime("%Y-%m-%d"), ingested_at.strftime("%H")


@lru_cache(maxsize=4096)
def _hour_partition(hour_bucket: int) -> tuple[str, str]:
    return partition_values(datetime.fromtimestamp(hour_bucket * 3600, tz=UTC))


def partition_of_millis(epoch_ms: int) -> tuple[str, str]:
    """(dt, hour) for an epoch-milliseconds ingestion time; cached per hour (hot path of the writer)."""
    return _hour_partition(epoch_ms // MILLIS_PER_HOUR)


def partition_prefix(table_prefix: str, dt: str, hour: str) -> str:
    """``ops/dt=2026-11-21/hour=07/``: Hive-style so Glue, Athena and pyarrow agree."""
    return f"{table_prefix.rstrip('/')}/dt={dt}/hour={hour}/"


def batch_name(message_ids: Iterable[str]) -> str:
    """A deterministic object name for a batch: the same messages always give the same name,
    so a redelivered batch overwrites its object instead of duplicating rows."""
    digest = hashlib.sha256("\n".join(sorted(message_ids)).encode()).hexdigest()
    return digest[:32]


def ops_object_key(table_prefix: str, dt: str, hour: str, message_ids: Iterable[str]) -> str:
    return f"{partition_prefix(table_prefix, dt, hour)}{batch_name(message_ids)}.parquet"


def rejects_object_key(rejects_prefix: str, dt: str, message_ids: Iterable[str]) -> str:
    return f"{rejects_prefix.rstrip('/')}/dt={dt}/{batch_name(message_ids)}.jsonl"


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"
