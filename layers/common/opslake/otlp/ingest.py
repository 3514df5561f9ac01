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

from pydantic import ValidationError

from opslake.errors import QueueError, ServiceUnavailableError
from opslake.ingest.events import redacted_fields, validate_op
from opslake.models.ops import QueuedOp
from opslake.models.validation import describe_problems, field_errors
from opslake.otlp.decode import Export
from opslake.otlp.mapping import map_export
from opslake.queue import OpsQueue

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
    for span in mapped.ops:
        try:
            op = validate_op(span.op, reporter_id=reporter_id, received_at=received_at)
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
