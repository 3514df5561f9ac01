"""POST /log: an agent writes down what it tried and how it went; it becomes an op record.

The logged outcome is its own op record (``source`` ``agent_log``, ``event_kind`` ``log``, the
agent's endpoint or ``/log``), distinct from the record the middleware writes for the call itself
(``source`` ``gateway``); the call's record carries the logged record's id as ``logged_op_id``.
Each part of the report has its own place in the record, so nothing has to be parsed back out of
a summary: ``attributes.operation`` and ``attributes.result``, the approach verbatim as
``input_summary`` (up to 2,000 characters, the summaries' limit), the context as ``output_summary``
(and ``attributes.context``, cut at the attributes' 1,000 characters); ``attributes.log_format``
says so (records without it were packed the old way; see opslake.models.playbooks).
"""

import json

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.errors import BadRequestError, QueueError, ServiceUnavailableError
from opslake.http.bodies import parse_body, request_body
from opslake.http.identity import caller_key_id
from opslake.http.responses import json_response
from opslake.ingest.observe import SESSION_HEADER, TRACE_HEADER, summarize, summarize_request
from opslake.ingest.redact import redact
from opslake.models.ops import OpInput, QueuedOp, now_utc
from opslake.models.playbooks import LOG_FORMAT, LOG_FORMAT_ATTRIBUTE
from opslake.models.tools import LogRequest
from opslake.tools.app import create_tool_app

settings = get_settings()
settings.require("ops_queue_url")
app = create_tool_app()


def redacted_approach(operation: str, approach: str) -> str:
    """The approach, redacted as if it still followed the operation: "rotate api_key" then
    "s3cr3t …" is a secret only when read together (as /log records once stored them), and the
    ingest path redacts each field alone."""
    joined, head = redact(f"{operation}: {approach}"), redact(operation) + ": "
    return joined[len(head) :] if joined.startswith(head) else redact(approach)


def log_record(body: LogRequest, headers: dict[str, str]) -> OpInput:
    """The op record of a logged outcome (pure); it makes the reserved claim ``event_kind`` "log",
    so it is built as a server record."""
    failed = body.result == "failure"
    attributes: dict[str, str | int | float | bool] = {
        "operation": body.operation,
        "result": body.result,
        LOG_FORMAT_ATTRIBUTE: LOG_FORMAT,
    }
    if body.context:
        attributes["context"] = body.context
    return OpInput.server_record(
        {
            "op_id": body.op_id,
            "endpoint": body.endpoint or "/log",
            "source": "agent_log",
            "event_kind": "log",
            "success": not failed,
            "duration_ms": 0.0,
            "task_class": body.task_class,
            "session_id": headers.get(SESSION_HEADER) or None,
            "trace_id": headers.get(TRACE_HEADER) or None,
            "input_summary": redacted_approach(body.operation, body.approach),
            "output_summary": body.context or None,
            "error_type": "agent_reported_failure" if failed else None,
            # the approach redacted with its operation here too (the ingest path redacts it alone)
            "error": (body.context or redacted_approach(body.operation, body.approach)) if failed else None,
            "attributes": attributes,
        }
    )


def request_summary(record: QueuedOp) -> str:
    """What the call's own record says was asked: the logged record's fields, already redacted
    (the raw body could hold a secret the plain redaction misses: an approach that is one only
    next to its operation, see :func:`redacted_approach`)."""
    attributes = record.attributes or {}
    fields = {
        "operation": attributes.get("operation"),
        "result": attributes.get("result"),
        "approach": record.input_summary,
        "context": record.output_summary,
        "endpoint": record.endpoint,
        "task_class": record.task_class,
        "op_id": record.op_id,
    }
    shown = {k: v for k, v in fields.items() if v is not None}
    return "POST /log " + json.dumps(shown, separators=(",", ":"), ensure_ascii=False)


@app.post("/log")
def post_log() -> Response:
    event = app.current_event
    summarize_request(app, "POST /log")  # never the raw body, even when the call is refused below
    body = parse_body(LogRequest, request_body(event))
    headers = {k.lower(): v for k, v in (event.headers or {}).items()}
    reporter_id = runtime.key_names().name_of(caller_key_id(event.raw_event["requestContext"]))
    try:
        record = log_record(body, headers).to_queued(reporter_id=reporter_id, received_at=now_utc())
    except ValueError as exc:  # a bad session/trace header or an oversized record
        raise BadRequestError(f"the log entry cannot be recorded: {exc}") from exc
    summarize_request(app, request_summary(record))
    try:
        runtime.ops_queue().send([record.to_message()])
    except QueueError as exc:
        raise ServiceUnavailableError(
            "the log entry was not recorded (the ops queue is unavailable); retry with the same op_id",
            retry_after_s=settings.queue_retry_after_s,
        ) from exc
    summarize(app, f"logged {body.result}", logged_op_id=record.op_id)
    return json_response(202, {"op_id": record.op_id})


handler = runtime.api_handler(app)
