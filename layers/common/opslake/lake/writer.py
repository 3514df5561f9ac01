"""The lake writer's logic: a batch of queue messages in, Parquet objects and rejects out.

* A message holds one or more op records, one per line (:mod:`opslake.queue.packing`; old
  one-op messages are the one-line case). Each line is handled as a record of its own, known as
  ``<message id>#<line>`` (a one-line message keeps its message id), so a bad record is a reject
  on its own while its neighbours land, and object names stay derived from these ids, the same
  for every delivery of the same messages. A failure of any of a message's records reports
  the whole message for redelivery (SQS retries messages, not lines).
* A batch is first decoded at once in Arrow (:mod:`opslake.lake.fastpath`); when that path
  cannot vouch for every message, each message is parsed on its own. A message that can never be
  written (not JSON, not an op) is a *reject*: it goes to ``rejects/dt=…/`` with its reason and
  is not retried. Both paths write the same rows, objects and report.
* Valid ops are deduplicated on (``reporter_id``, ``op_id``): an op id is unique only per API key,
  so one key can never replace or shadow another key's op (earliest ``ingested_at`` wins among
  one key's copies), then grouped by partition
  (``dt``/``hour`` of ``ingested_at``) and written as one zstd Parquet object per partition, named
  from the batch's record ids so that a redelivered batch overwrites its object.
* A partition whose Glue registration or S3 write fails reports its messages as failed, so SQS
  redelivers exactly those; other partitions of the same batch still land.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from opslake.errors import LakeWriteError
from opslake.lake.catalog import Catalog
from opslake.lake.fastpath import decode_batch
from opslake.lake.layout import MILLIS_PER_HOUR, ops_object_key, partition_of_millis, rejects_object_key
from opslake.lake.opkey import OP_KEY, first_of_each_key
from opslake.lake.parquet import ops_table, to_parquet_bytes
from opslake.lake.schema import OPS_SCHEMA
from opslake.lake.store import ObjectStore
from opslake.models.ops import QueuedOp
from opslake.models.validation import describe_problems, field_errors
from opslake.observability import logger
from opslake.queue.packing import unpack

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


RECORD_ID_SEPARATOR = "#"


def unpack_messages(messages: Sequence[QueueMessage]) -> tuple[list[QueueMessage], dict[str, str]]:
    """One :class:`QueueMessage` per op record of the batch, and for each record id that is not a
    message id, the message that holds it. Record ids are ``<message id>#<line>``: the same
    message always gives the same ids, so object names stay deterministic across redeliveries."""
    records: list[QueueMessage] = []
    holder: dict[str, str] = {}
    for message in messages:
        lines = unpack(message.body)
        if len(lines) == 1:  # the old format, and /log's and the middleware's single records
            records.append(message)
            continue
        for line_number, line in enumerate(lines):
            record_id = f"{message.message_id}{RECORD_ID_SEPARATOR}{line_number}"
            holder[record_id] = message.message_id
            records.append(QueueMessage(record_id, line, message.sent_ms))
    return records, holder


def parse_message(message: QueueMessage) -> ParsedOp | Reject:
    """A valid op, or a reject with the reason it can never be written."""
    try:
        op = QueuedOp.model_validate_json(message.body)
    except ValidationError as exc:
        if any(err["type"] == "json_invalid" for err in exc.errors()):
            reason = "not valid JSON: " + exc.errors()[0]["msg"]
        else:
            reason = "not a valid op record: " + describe_problems(field_errors(exc))
        return Reject(message.message_id, reason, message.body, message.sent_at)
    return ParsedOp(message.message_id, op, message.sent_ms)


def op_key(op: QueuedOp) -> tuple[str, str]:
    """What makes an op one op (:data:`~opslake.lake.opkey.OP_KEY`): its ``op_id`` as sent by one
    API key. Keying on ``op_id`` alone would let any key pre-empt another key's op ids."""
    return (op.reporter_id, op.op_id)


def dedupe(parsed: Sequence[ParsedOp]) -> tuple[list[ParsedOp], dict[str, str]]:
    """Keep one op per (reporter_id, op_id) (earliest ingested_at, then smallest message id).

    Returns the kept ops and, for each dropped message, the message id it collapsed into, so a
    dropped duplicate fails and succeeds together with the copy that is written.
    """
    best: dict[tuple[str, str], ParsedOp] = {}
    for item in parsed:
        current = best.get(op_key(item.op))
        if current is None or (item.ingested_ms, item.message_id) < (current.ingested_ms, current.message_id):
            best[op_key(item.op)] = item
    kept_ids = {item.message_id for item in best.values()}
    merged_into = {
        item.message_id: best[op_key(item.op)].message_id
        for item in parsed
        if item.message_id not in kept_ids
    }
    return sorted(best.values(), key=lambda p: (p.ingested_ms, p.message_id)), merged_into


@dataclass(frozen=True)
class _Partition:
    """The kept ops of one (dt, hour) partition, as rows in the lake's order, ready to write."""

    dt: str
    hour: str
    message_ids: list[str]
    table: pa.Table


def _slow_partitions(parsed: Sequence[ParsedOp]) -> tuple[list[_Partition], dict[str, str]]:
    """Dedupe and partition ops validated one by one (see :func:`dedupe`)."""
    kept, merged_into = dedupe(parsed)
    by_partition: dict[tuple[str, str], list[ParsedOp]] = defaultdict(list)
    for item in kept:
        by_partition[partition_of_millis(item.ingested_ms)].append(item)
    partitions = [
        _Partition(
            dt,
            hour,
            [item.message_id for item in items],
            ops_table([item.op for item in items], [item.ingested_ms for item in items]),
        )
        for (dt, hour), items in by_partition.items()
    ]
    return partitions, merged_into


def _dedupe_rows(
    reporter_ids: pa.Array, op_ids: pa.Array, ingested_ms: pa.Array, message_ids: pa.Array
) -> tuple[pa.Array, dict[str, str]]:
    """The rows to keep, in the lake's order, and for each dropped duplicate the message id it
    collapsed into: the same rule as :func:`dedupe` (one row per (reporter_id, op_id): earliest
    ingested_ms, then smallest message id; Arrow orders strings by UTF-8 bytes, which is Python's
    code point order)."""
    rows = pa.table(
        {"reporter_id": reporter_ids, "op_id": op_ids, "ingested_ms": ingested_ms, "message_id": message_ids}
    )
    by_op = pc.sort_indices(rows, sort_keys=[(name, "ascending") for name in rows.column_names])
    first_of_op = first_of_each_key(rows, OP_KEY, by_op)
    keep = pc.filter(by_op, first_of_op)
    merged_into: dict[str, str] = {}
    if len(keep) < len(by_op):  # rare: walk the duplicates in Python
        kept_message_id = ""
        for is_first, row in zip(first_of_op.to_pylist(), by_op.to_pylist(), strict=True):
            message_id = message_ids[row].as_py()
            if is_first:
                kept_message_id = message_id
            else:
                merged_into[message_id] = kept_message_id
    kept = rows.take(keep)
    in_lake_order = pc.sort_indices(
        kept, sort_keys=[("ingested_ms", "ascending"), ("message_id", "ascending")]
    )
    return pc.take(keep, in_lake_order), merged_into


def _fast_partitions(
    messages: Sequence[QueueMessage], queued: pa.Table
) -> tuple[list[_Partition], dict[str, str]]:
    """Dedupe and partition a batch decoded by :func:`decode_batch` (row i is message i).

    Rows are in (ingested_ms, message id) order, so each partition is one contiguous run.
    """
    ingested_ms = pa.array([m.sent_ms for m in messages], pa.int64())
    message_ids = pa.array([m.message_id for m in messages], pa.string())
    keep, merged_into = _dedupe_rows(
        queued.column("reporter_id").combine_chunks(),
        queued.column("op_id").combine_chunks(),
        ingested_ms,
        message_ids,
    )
    # The usual case (no duplicates, delivered in order) needs no copy.
    in_order = keep.equals(pa.array(range(len(messages)), keep.type))
    kept = queued if in_order else queued.take(keep)
    kept_ms = pc.take(ingested_ms, keep)
    table = kept.add_column(
        OPS_SCHEMA.get_field_index("ingested_at"),
        OPS_SCHEMA.field("ingested_at"),
        kept_ms.cast(OPS_SCHEMA.field("ingested_at").type),
    )
    kept_ids = pc.take(message_ids, keep).to_pylist()
    partitions: list[_Partition] = []
    start = 0
    for hour_bucket, run in groupby(kept_ms.to_pylist(), key=lambda ms: ms // MILLIS_PER_HOUR):
        length = sum(1 for _ in run)
        dt, hour = partition_of_millis(hour_bucket * MILLIS_PER_HOUR)
        partitions.append(_Partition(dt, hour, kept_ids[start : start + length], table.slice(start, length)))
        start += length
    return partitions, merged_into


class LakeWriter:
    """Writes batches of queue messages into the ``ops`` table and ``rejects/``."""

    def __init__(
        self,
        store: ObjectStore,
        catalog: Catalog,
        *,
        ops_prefix: str,
        rejects_prefix: str,
        fast_path: bool = True,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._ops_prefix = ops_prefix
        self._rejects_prefix = rejects_prefix
        self._fast_path = fast_path

    def write_batch(self, messages: Sequence[QueueMessage]) -> WriteReport:
        """Write a batch: its records decoded at once in Arrow when :func:`decode_batch` vouches
        for every one, else validated record by record (which also sorts out the rejects).
        ``failed_message_ids`` names the SQS messages holding any record that failed."""
        records, holder = unpack_messages(messages)
        report = self._write_records(records)
        if holder:
            report.failed_message_ids = sorted({holder.get(i, i) for i in report.failed_message_ids})
        return report

    def _write_records(self, messages: Sequence[QueueMessage]) -> WriteReport:
        decoded = self._decode(messages)
        rejects: list[Reject] = []
        if decoded is not None:
            partitions, merged_into = _fast_partitions(messages, decoded)
        else:
            parsed: list[ParsedOp] = []
            for message in messages:
                result = parse_message(message)
                (parsed if isinstance(result, ParsedOp) else rejects).append(result)  # type: ignore[arg-type]
            partitions, merged_into = _slow_partitions(parsed)

        report = WriteReport(duplicates_dropped=len(merged_into))
        failed: set[str] = set()
        for partition in sorted(partitions, key=lambda p: (p.dt, p.hour)):
            self._write_partition(partition, report, failed)
        self._write_rejects(rejects, report, failed)
        failed.update(dropped for dropped, kept_id in merged_into.items() if kept_id in failed)
        report.failed_message_ids = sorted(failed)
        return report

    def _decode(self, messages: Sequence[QueueMessage]) -> pa.Table | None:
        """The fast path's table, or ``None`` (disabled, declined, or message ids not unique,
        which SQS guarantees but the per-record dedupe would treat in its own way)."""
        if not self._fast_path or len({m.message_id for m in messages}) != len(messages):
            return None
        return decode_batch([m.body for m in messages])

    def _write_partition(self, partition: _Partition, report: WriteReport, failed: set[str]) -> None:
        key = ops_object_key(self._ops_prefix, partition.dt, partition.hour, partition.message_ids)
        try:
            self._catalog.ensure_partitions([(partition.dt, partition.hour)])
            self._put(key, to_parquet_bytes(partition.table), "application/vnd.apache.parquet")
        except LakeWriteError as exc:
            logger.warning("partition write failed; its messages will be retried", key=key, error=str(exc))
            failed.update(partition.message_ids)
            return
        report.objects_written.append(key)
        report.records_written += partition.table.num_rows

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
                logger.warning(
                    "rejects write failed; those messages will be retried", key=key, error=str(exc)
                )
                failed.update(r.message_id for r in items)
                continue
            for reject in items:
                logger.warning(
                    "op record rejected", message_id=reject.message_id, reason=reject.reason, key=key
                )
            report.rejects_written += len(items)

    def _put(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self._store.put(key, data, content_type=content_type)
        except Exception as exc:
            raise LakeWriteError(f"S3 put of {key} failed: {type(exc).__name__}: {exc}") from exc
