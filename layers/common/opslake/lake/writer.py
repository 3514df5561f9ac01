"""The lake writer's logic: a batch of queue messages in, Parquet objects and rejects out.

* Each message is parsed on its own. A message that can never be written (not JSON, not an op)
  is a *reject*: it goes to ``rejects/dt=…/`` with its reason and is not retried.
* Valid ops are deduplicated on ``op_id`` (earliest ``ingested_at`` wins), grouped by partition
  (``dt``/``hour`` of ``ingested_at``) and written as one zstd Parquet object per partition, named
  from the batch's message ids so that a redelivered batch overwrites its object.
* A partition whose Glue registration or S3 write fails reports its messages as failed, so SQS
  redelivers exactly those; other partitions of the same batch still land.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from opslake.errors import LakeWriteError
from opslake.lake.catalog import Catalog
from opslake.lake.layout import ops_object_key, partition_of_millis, rejects_object_key
from opslake.lake.parquet import ops_table, to_parquet_bytes
from opslake.lake.store import ObjectStore
from opslake.models.ops import QueuedOp
from opslake.observability import logger
from opslake.validation import field_errors, summarize

MAX_REJECT_BODY_CHARS = 64 * 1024


@dataclass(frozen=True)
class QueueMessage:
    """What the writer needs of one SQS record."""

    message_id: str
    body: str
    sent_ms: int  # SQS SentTimestamp (epoch ms): becomes the op's ingested_at

    @property
    def sent_at(self) -> datetime:
        return datetime.fromtimestamp(self.sent_ms / 1000, tz=UTC)


@dataclass(frozen=True)
class ParsedOp:
    message_id: str
    op: QueuedOp
    ingested_ms: int


@dataclass(frozen=True)
class Reject:
    message_id: str
    reason: str
    body: str
    sent_at: datetime

    def to_json(self) -> str:
        return json.dumps(
            {
                "message_id": self.message_id,
                "sent_at": self.sent_at.isoformat(),
                "reason": self.reason,
                "body": self.body[:MAX_REJECT_BODY_CHARS],
                "body_truncated": len(self.body) > MAX_REJECT_BODY_CHARS,
            },
            ensure_ascii=False,
        )


@dataclass
class WriteReport:
    """What one batch did; ``failed_message_ids`` are reported back to SQS for redelivery."""

    objects_written: list[str] = field(default_factory=list)
    records_written: int = 0
    duplicates_dropped: int = 0
    rejects_written: int = 0
    failed_message_ids: list[str] = field(default_factory=list)


def parse_message(message: QueueMessage) -> ParsedOp | Reject:
    """A valid op, or a reject with the reason it can never be written."""
    try:
        op = QueuedOp.model_validate_json(message.body)
    except ValidationError as exc:
        if any(err["type"] == "json_invalid" for err in exc.errors()):
            reason = "not valid JSON: " + exc.errors()[0]["msg"]
        else:
            reason = "not a valid op record: " + summarize(field_errors(exc))
        return Reject(message.message_id, reason, message.body, message.sent_at)
    return ParsedOp(message.message_id, op, message.sent_ms)


def dedupe(parsed: Sequence[ParsedOp]) -> tuple[list[ParsedOp], dict[str, str]]:
    """Keep one op per ``op_id`` (earliest ingested_at, then smallest message id).

    Returns the kept ops and, for each dropped message, the message id it collapsed into, so a
    dropped duplicate fails and succeeds together with the copy that is written.
    """
    best: dict[str, ParsedOp] = {}
    for item in parsed:
        current = best.get(item.op.op_id)
        if current is None or (item.ingested_ms, item.message_id) < (current.ingested_ms, current.message_id):
            best[item.op.op_id] = item
    kept_ids = {item.message_id for item in best.values()}
    merged_into = {
        item.message_id: best[item.op.op_id].message_id for item in parsed if item.message_id not in kept_ids
    }
    return sorted(best.values(), key=lambda p: (p.ingested_ms, p.message_id)), merged_into


class LakeWriter:
    """Writes batches of queue messages into the ``ops`` table and ``rejects/``."""

    def __init__(self, store: ObjectStore, catalog: Catalog, *, ops_prefix: str, rejects_prefix: str) -> None:
        self._store = store
        self._catalog = catalog
        self._ops_prefix = ops_prefix
        self._rejects_prefix = rejects_prefix

    def write_batch(self, messages: Sequence[QueueMessage]) -> WriteReport:
        report = WriteReport()
        parsed: list[ParsedOp] = []
        rejects: list[Reject] = []
        for message in messages:
            result = parse_message(message)
            (parsed if isinstance(result, ParsedOp) else rejects).append(result)  # type: ignore[arg-type]

        kept, merged_into = dedupe(parsed)
        report.duplicates_dropped = len(merged_into)
        by_partition: dict[tuple[str, str], list[ParsedOp]] = defaultdict(list)
        for item in kept:
            by_partition[partition_of_millis(item.ingested_ms)].append(item)

        failed: set[str] = set()
        for (dt, hour), items in sorted(by_partition.items()):
            message_ids = [item.message_id for item in items]
            key = ops_object_key(self._ops_prefix, dt, hour, message_ids)
            try:
                self._catalog.ensure_partitions([(dt, hour)])
                data = to_parquet_bytes(
                    ops_table([item.op for item in items], [item.ingested_ms for item in items])
                )
                self._put(key, data, "application/vnd.apache.parquet")
            except LakeWriteError as exc:
                logger.warning("partition write failed; its messages will be retried", key=key, error=str(exc))
                failed.update(message_ids)
                continue
            report.objects_written.append(key)
            report.records_written += len(items)

        self._write_rejects(rejects, report, failed)
        failed.update(dropped for dropped, kept_id in merged_into.items() if kept_id in failed)
        report.failed_message_ids = sorted(failed)
        return report

    def _write_rejects(self, rejects: list[Reject], report: WriteReport, failed: set[str]) -> None:
        by_day: dict[str, list[Reject]] = defaultdict(list)
        for reject in rejects:
            by_day[reject.sent_at.strftime("%Y-%m-%d")].append(reject)
        for dt, items in sorted(by_day.items()):
            key = rejects_object_key(self._rejects_prefix, dt, [r.message_id for r in items])
            data = "".join(r.to_json() + "\n" for r in items).encode()
            try:
                self._put(key, data, "application/x-ndjson")
            except LakeWriteError as exc:
                logger.warning("rejects write failed; those messages will be retried", key=key, error=str(exc))
                failed.update(r.message_id for r in items)
                continue
            for reject in items:
                logger.warning("op record rejected", message_id=reject.message_id, reason=reject.reason, key=key)
            report.rejects_written += len(items)

    def _put(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self._store.put(key, data, content_type=content_type)
        except Exception as exc:
            raise LakeWriteError(f"S3 put of {key} failed: {type(exc).__name__}: {exc}") from exc
