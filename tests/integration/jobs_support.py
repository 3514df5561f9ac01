"""Shared plumbing of the scheduled-job tests: a local stack per module and a clean lake per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opslake.config import Settings, load_settings
from opslake.lake.catalog import GlueCatalog
from opslake.lake.compaction import Compactor
from opslake.lake.compaction.report import CompactionReport
from opslake.lake.layout import ops_object_key, partition_of_millis
from opslake.lake.parquet import ops_table, to_parquet_bytes
from opslake.models.ops import QueuedOp
from opslake.query.embedded import EmbeddedEngine
from opslake_local.stack import QUIET_ENV, LocalStack


@dataclass
class Lake:
    stack: LocalStack
    settings: Settings
    clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        """One client per service for the test (clients are reusable; making one is not free)."""
        if service not in self.clients:
            self.clients[service] = self.stack.client(service)
        return self.clients[service]

    def count(self, sql: str) -> int:
        return int(EmbeddedEngine.from_settings(self.settings).run(sql).rows[0][0])


@pytest.fixture(scope="module")
def jobs_stack() -> Iterator[LocalStack]:
    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as local:
        yield local


@pytest.fixture
def jobs_lake(jobs_stack: LocalStack) -> Iterator[Lake]:
    settings = load_settings()
    s3 = jobs_stack.client("s3")
    yield Lake(jobs_stack, settings)
    # Each test starts from an empty lake: remove what it wrote (objects and partitions).
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=settings.lake_bucket)
    for page in pages:
        for obj in page.get("Contents", []):
            if not obj["Key"].startswith("datasets/"):
                s3.delete_object(Bucket=settings.lake_bucket, Key=obj["Key"])
    glue = jobs_stack.client("glue")
    for table in ("ops",):  # failures is a view over ops (the analyzer creates it)
        parts = glue.get_partitions(DatabaseName=settings.glue_database, TableName=table)["Partitions"]
        for part in parts:
            glue.delete_partition(
                DatabaseName=settings.glue_database, TableName=table, PartitionValues=part["Values"]
            )


def write_ops(lake: Lake, ops: list[tuple[QueuedOp, datetime]]) -> None:
    """Ops as the writer would land them: ``ingested_at`` decides the partition."""
    by_partition: dict[tuple[str, str], list[tuple[QueuedOp, int]]] = {}
    for record, ingested in ops:
        millis = int(ingested.timestamp() * 1000)
        by_partition.setdefault(partition_of_millis(millis), []).append((record, millis))
    s3 = lake.client("s3")
    for (dt, hour), members in by_partition.items():
        key = ops_object_key(lake.settings.ops_prefix, dt, hour, [r.op_id for r, _ in members])
        body = to_parquet_bytes(ops_table([r for r, _ in members], [m for _, m in members]))
        s3.put_object(Bucket=lake.settings.lake_bucket, Key=key, Body=body)
    GlueCatalog(lake.client("glue"), lake.settings.glue_database, "ops").ensure_partitions(by_partition)


def query(lake: Lake, sql: str) -> list[dict[str, Any]]:
    return EmbeddedEngine.from_settings(lake.settings).run(sql).records()


def receive_all(lake: Lake) -> list[dict[str, Any]]:
    """Every message on the ops queue (removed from it)."""
    sqs = lake.client("sqs")
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(QueueUrl=lake.settings.ops_queue_url, MaxNumberOfMessages=10).get(
        "Messages"
    ):
        messages.extend(batch)
        sqs.delete_message_batch(
            QueueUrl=lake.settings.ops_queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
        )
    return messages


def compact_closed_hours(stack: LocalStack) -> CompactionReport:
    """Run compaction as it would run once every hour written so far is closed and past its
    grace period (the clock moved past ``compact_after_hours``); its report."""
    settings = load_settings()
    later = datetime.now(UTC) + timedelta(hours=settings.compact_after_hours + 1.5)
    return Compactor.from_settings(
        settings, stack.client("s3"), stack.client("glue"), clock=lambda: later
    ).run()
