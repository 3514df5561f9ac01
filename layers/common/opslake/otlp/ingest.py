"""POST /v1/traces logic: map an export's spans to ops, validate each like a /events op, enqueue.

The same rules as ``POST /events`` (:mod:`opslake.ingest.events`): every op is validated, redacted
and truncated by the one op contract; nothing is acknowledged before SQS has it (a queue failure is
a 503 with Retry-After and nothing stored); an op id is an idempotency key per API key, and a span's
op id is its trace and span id, so an exporter that retries a batch cannot duplicate an op.
Unlike ``/events``, a batch whose spans are all invalid is still a 200: OTLP reports refused spans
in ``partial_success`` and keeps 400 for a request that is malformed as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from opslake.errors import QueueError, ServiceUnavailableError
from opslake.ingest.events import redacted_fields, validate_op
from opslake.models.ops import (
    MAX_ATTRIBUTE_VALUE_CHARS,
    MAX_ID_CHARS,
    PRE_REDACTION_MARGIN,
    TEXT_LIMITS,
    QueuedOp,
)
from opslake.models.validation import describe_problems, field_errors
from opslake.otlp.decode import Export
from opslake.otlp.mapping import map_export
from opslake.queue import OpsQueue

#: Text one export may hand to redaction, in characters (each field counted as far as redaction reads
#: it). Redaction is the CPU cost of ingest: /events bounds it with its 1 MiB body, an export may be
#: 8 MiB once inflated, so the spans past this budget are refused (named in partial_success) rather
#: than run the function into its timeout, which an exporter would retry forever.
MAX_EXPORT_TEXT_CHARS = 4 * 1024 * 1024
#: Refused spans named one by one in ``partial_success.error_message``; the rest are counted.
MAX_REJECTIONS_LISTED = 10
MAX_ERROR_MESSAGE_CHARS = 2_000


@dataclass
class TraceIngestResult:
    """What happened to each span of one export."""

    spans: int
    stored: list[str] = field(default_factory=list)  # op ids, as stored
    skipped: int = 0  # not op-shaped: counted, not stored
    rejected: list[str] = field(default_factory=list)  # one reason per refused span
    redacted_ids: int = 0  # ops stored under redacted ids (a secret was in one)

    def error_message(self) -> str:
        """``partial_success.error_message``: each refused span and why (the first few)."""
        if not self.rejected:
            return ""
        listed = "; ".join(self.rejected[:MAX_REJECTIONS_LISTED])
        more = len(self.rejected) - MAX_REJECTIONS_LISTED
        message = f"{len(self.rejected)} of {self.spans} spans rejected: {listed}"
        if more > 0:
            message += f"; and {more} more"
        return message[:MAX_ERROR_MESSAGE_CHARS]


def redaction_cost(op: dict[str, Any]) -> int:
    """The characters redaction will read of an op (texts and attribute values, each no further
    than the op contract reads it)."""
    cost = sum(
        min(len(value), TEXT_LIMITS[name] + PRE_REDACTION_MARGIN)
        for name, value in op.items()
        if name in TEXT_LIMITS and isinstance(value, str)
    )
    attributes = op.get("attributes") or {}
    cost += sum(
        len(key) + min(len(str(value)), MAX_ATTRIBUTE_VALUE_CHARS + PRE_REDACTION_MARGIN)
        for key, value in attributes.items()
    )
    # ids and labels: redacted whole, and refused past MAX_ID_CHARS (so read no further than that)
    return cost + sum(
        min(len(value), MAX_ID_CHARS + 1)
        for name, value in op.items()
        if name not in TEXT_LIMITS and isinstance(value, str)
    )


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return describe_problems(field_errors(exc))
    return str(exc)


def ingest_export(
    export: Export,
    *,
    reporter_id: str,
    queue: OpsQueue,
    received_at: datetime,
    keep_all_spans: bool = False,
    retry_after_s: int = 5,
) -> TraceIngestResult:
    """Map, validate and enqueue an export's op-shaped spans; say what happened to each span."""
    mapped = map_export(export.request, keep_all=keep_all_spans)
    result = TraceIngestResult(spans=export.span_count, skipped=mapped.skipped)
    result.rejected = [f"{ref.describe()}: {reason}" for ref, reason in mapped.rejected]
    accepted: list[QueuedOp] = []
    budget = MAX_EXPORT_TEXT_CHARS
    for position, span in enumerate(mapped.ops):
        budget -= redaction_cost(span.op)
        if budget < 0:
            result.rejected.extend(
                f"{later.ref.describe()}: not stored, the export's text is over the {MAX_EXPORT_TEXT_CHARS} "
                "characters one request may carry (lower the exporter's max_export_batch_size)"
                for later in mapped.ops[position:]
            )
            break
        try:
            op = validate_op(  # the mapping judged the span's result already
                span.op, reporter_id=reporter_id, received_at=received_at, infer_failure=False
            )
        except (ValidationError, ValueError) as exc:
            result.rejected.append(f"{span.ref.describe()}: {_reason(exc)}")
            continue
        accepted.append(op)
        result.redacted_ids += bool(redacted_fields(span.op, op))
    if accepted:
        try:
            queue.send([op.to_message() for op in accepted])
        except QueueError as exc:
            raise ServiceUnavailableError(
                f"the spans could not be persisted ({exc}); nothing was stored, retry the same export",
                retry_after_s=retry_after_s,
            ) from exc
    result.stored = [op.op_id for op in accepted]
    return result


__all__ = ["TraceIngestResult", "ingest_export"]
