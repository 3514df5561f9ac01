"""POST /events logic: validate each op on its own, enqueue the good ones, report the rest.

Persist first, then acknowledge: a 202 lists only op ids SQS has accepted; if the queue fails,
the caller gets a 503 with Retry-After and no op is listed as accepted. A client-supplied
``op_id`` is an idempotency key per API key, so a client that retries after a 503 cannot create
duplicates in the lake (compaction dedupes on (``reporter_id``, ``op_id``)). An op whose ids held
a secret is stored under redacted ids; the answer's ``redacted_ids`` says which (``accepted`` lists
the op ids as stored), so a client can tell a rename from a loss.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from opslake.errors import (
    BadRequestError,
    InvalidOpsError,
    JsonTooDeepError,
    MalformedJsonError,
    PayloadTooLargeError,
    QueueError,
    ServiceUnavailableError,
    UndecodableBodyError,
)
from opslake.http.bodies import check_json_depth
from opslake.ingest.tool_errors import with_inferred_failure
from opslake.models.ops import ID_FIELDS, OpInput, QueuedOp
from opslake.models.validation import describe_problems, field_errors
from opslake.queue import OpsQueue

MAX_OPS_PER_REQUEST = 500
MAX_REQUEST_BYTES = 1024 * 1024


class RejectedOp(BaseModel):
    index: int
    message: str
    errors: list[dict[str, str]]


class RedactedIds(BaseModel):
    """An accepted op whose ``fields`` (ids or labels) held a secret and are stored redacted."""

    index: int
    fields: list[str]


class IngestResult(BaseModel):
    accepted: list[str]
    rejected: list[RejectedOp]
    redacted_ids: list[RedactedIds] = []


def redacted_fields(raw: Any, op: QueuedOp) -> list[str]:
    """The id and label fields the client sent that redaction changed (what was sent is compared
    with what is stored; defaults such as a missing ``op_id`` are not the client's)."""
    if not isinstance(raw, dict):
        return []
    return [name for name in ID_FIELDS if isinstance(raw.get(name), str) and raw[name] != getattr(op, name)]


def parse_ops(body: str | bytes | None) -> list[Any]:
    """The list of raw ops in a request body: one op object, or ``{"ops": [...]}``."""
    if body is None or not body.strip():
        raise BadRequestError('the request body is empty; send one op object or {"ops": [...]}')
    try:
        size = len(body.encode() if isinstance(body, str) else body)
    except UnicodeEncodeError:  # lone surrogates cannot be UTF-8
        raise UndecodableBodyError(
            "the request body is not valid UTF-8; send JSON encoded as UTF-8"
        ) from None
    if size > MAX_REQUEST_BYTES:
        raise PayloadTooLargeError(
            f"the request body is {size} bytes; the limit is {MAX_REQUEST_BYTES} (send smaller batches)"
        )
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")  # strictly: json.loads would guess UTF-16/32 from the bytes
        except UnicodeDecodeError as exc:
            raise UndecodableBodyError(
                f"the request body is not valid UTF-8 (byte {exc.start}); send JSON encoded as UTF-8"
            ) from None
    check_json_depth(body)
    try:
        payload = json.loads(body)
    except RecursionError:  # unreachable behind the depth check; kept so no nesting can be a 500
        raise JsonTooDeepError("the JSON body nests too deeply; flatten it") from None
    except ValueError as exc:
        raise MalformedJsonError(f"the request body is not valid JSON: {exc}") from None
    if isinstance(payload, dict) and "ops" in payload:
        extra = sorted(set(payload) - {"ops"})
        if extra:
            raise BadRequestError(f'a batch is {{"ops": [...]}} with no other keys; unexpected: {extra}')
        ops = payload["ops"]
        if not isinstance(ops, list):
            raise BadRequestError(f'"ops" must be a list of op objects, got {type(ops).__name__}')
        if not ops:
            raise BadRequestError('"ops" is empty; send at least one op')
        if len(ops) > MAX_OPS_PER_REQUEST:
            raise PayloadTooLargeError(
                f"{len(ops)} ops in one request; the limit is {MAX_OPS_PER_REQUEST} (split the batch)"
            )
        return ops
    if isinstance(payload, dict):
        return [payload]
    raise BadRequestError(f'send one op object or {{"ops": [...]}}, not a JSON {type(payload).__name__}')


def validate_op(raw: Any, *, reporter_id: str, received_at: datetime, infer_failure: bool = True) -> QueuedOp:
    """One op, ready for the queue; raises ValueError/ValidationError with the reason.

    A tool op that claims success with an error as its result is stored failed
    (:mod:`opslake.ingest.tool_errors`), before redaction and truncation reach the error it gets.
    ``infer_failure`` is False for ops whose mapping applied that rule already (OTLP spans: on the
    span's own result value, with the marker among the span's own attributes).
    """
    if not isinstance(raw, dict):
        raise ValueError(f"an op must be a JSON object, got {type(raw).__name__}")
    op = OpInput.model_validate(raw)
    if infer_failure:
        op = with_inferred_failure(op)
    return op.to_queued(reporter_id=reporter_id, received_at=received_at)


def _rejection(index: int, exc: Exception) -> RejectedOp:
    problems = (
        field_errors(exc) if isinstance(exc, ValidationError) else [{"field": "(op)", "message": str(exc)}]
    )
    return RejectedOp(index=index, message=describe_problems(problems), errors=problems)


def ingest(
    body: str | bytes | None,
    *,
    reporter_id: str,
    queue: OpsQueue,
    received_at: datetime,
    retry_after_s: int = 5,
) -> IngestResult:
    """Validate, enqueue, and say what happened to each op."""
    accepted: list[QueuedOp] = []
    rejected: list[RejectedOp] = []
    redacted: list[RedactedIds] = []
    for index, raw in enumerate(parse_ops(body)):
        try:
            op = validate_op(raw, reporter_id=reporter_id, received_at=received_at)
        except (ValidationError, ValueError) as exc:
            rejected.append(_rejection(index, exc))
            continue
        accepted.append(op)
        fields = redacted_fields(raw, op)
        if fields:
            redacted.append(RedactedIds(index=index, fields=fields))
    if not accepted:
        raise InvalidOpsError(
            f"no op was accepted: {len(rejected)} invalid",
            detail={"accepted": [], "rejected": [r.model_dump() for r in rejected]},
        )
    try:
        queue.send([op.to_message() for op in accepted])
    except QueueError as exc:
        raise ServiceUnavailableError(
            f"the ops could not be persisted ({exc}); nothing was accepted, retry with the same op_ids",
            retry_after_s=retry_after_s,
            detail={"accepted": [], "rejected": [r.model_dump() for r in rejected]},
        ) from exc
    return IngestResult(accepted=[op.op_id for op in accepted], rejected=rejected, redacted_ids=redacted)
