"""Every gateway tool call becomes an op record: the observation middleware.

``observe(app, ...)`` installs a Powertools middleware on a tool's resolver. For each call it
times the work, notes what the agent asked (method, path, query and body: redacted and
truncated by the op record contract; a route may give its own text instead, with
:func:`summarize_request`), what came back (``output_summary`` such as "12 rows", set
by the route with :func:`summarize`) and whether it failed (any 4xx/5xx, with the error's stable
code as ``error_type`` and its message as ``error``), and sends one op record to the ops queue.

Observation never fails the agent's call: if the record cannot be built or enqueued, the whole
record is written as one structured log line (recoverable from CloudWatch Logs) and the metric
``ObservationsLost`` counts it.

A call that came through ``POST /mcp`` (:mod:`opslake.tools.mcp` dispatches it to the tool's own
resolver) is recorded exactly like the REST call but with ``source`` "mcp": the MCP handler marks
the event's ``requestContext`` (:data:`TRANSPORT_MARKER`), which API Gateway builds and no client
can set; a header could be forged. Its record also carries the MCP session (``Mcp-Session-Id``, as
the client sent it, when no ``x-opslake-session-id`` names one) and the client's name and version
(``clientInfo``, which the MCP handler puts in the ``requestContext`` as :data:`MCP_CLIENT_MARKER`):
claims, like an op's ``agent_id``; the API key stays the identity.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from opslake.http.identity import KeyNameResolver, caller_key_id
from opslake.http.responses import as_opslake_error
from opslake.models.ops import MAX_SUMMARY_CHARS, OpInput, QueuedOp, now_utc
from opslake.observability import MetricUnit, logger, metrics
from opslake.queue import OpsQueue

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

# Optional request headers an agent may send to tie its calls together in the lake.
SESSION_HEADER = "x-opslake-session-id"
TRACE_HEADER = "x-opslake-trace-id"
TASK_CLASS_HEADER = "x-opslake-task-class"

#: The ``requestContext`` key the MCP handler sets on the events it builds, and its value.
TRANSPORT_MARKER = "opslakeTransport"
MCP_TRANSPORT = "mcp"
#: MCP's session header (Streamable HTTP), read for calls that came through ``POST /mcp``.
MCP_SESSION_HEADER = "mcp-session-id"
#: The ``requestContext`` key where the MCP handler puts the client's ``clientInfo`` (name, version).
MCP_CLIENT_MARKER = "opslakeMcpClient"
#: The op attributes that carry it.
MCP_CLIENT_ATTRIBUTES = {"name": "mcp.client.name", "version": "mcp.client.version"}

_OUTPUT_SUMMARY = "opslake_output_summary"
_ATTRIBUTES = "opslake_attributes"
_REQUEST_SUMMARY = "opslake_request_summary"
_KEY_NAMES = "opslake_key_names"
_REPORTER_ID = "opslake_reporter_id"


def summarize(
    app: APIGatewayRestResolver, output_summary: str, **attributes: str | int | float | bool
) -> None:
    """Called by a route: what its answer amounted to ("12 rows", "3 matches"), plus attributes."""
    app.append_context(**{_OUTPUT_SUMMARY: output_summary, _ATTRIBUTES: attributes})


def summarize_request(app: APIGatewayRestResolver, request_summary: str) -> None:
    """Called by a route whose body the plain redaction cannot make safe on its own (``POST /log``:
    a secret may only be recognisable next to another field): the call's record says this instead
    of the request body. Set it before anything can fail, so a refused call is covered too."""
    app.append_context(**{_REQUEST_SUMMARY: request_summary})


def caller_name(app: APIGatewayRestResolver) -> str:
    """The caller's API key name, exactly what this call's op record will carry as ``reporter_id``
    (resolved once per call with the observer's cached resolver, then reused by the record). A route
    that decides by identity (the playbook holdout arms) must hash the name that is recorded, never
    a client's claimed ``agent_id``; when the name lookup fails both use the key id."""
    name = app.context.get(_REPORTER_ID)
    if name is None:
        key_id = caller_key_id(app.current_event.raw_event["requestContext"])
        key_names: Callable[[], KeyNameResolver] | None = app.context.get(_KEY_NAMES)
        name = key_names().name_of(key_id) if key_names is not None else key_id
        app.append_context(**{_REPORTER_ID: name})
    return str(name)


def describe_request(method: str, path: str, query: dict[str, str] | None, body: str | None) -> str:
    """A compact, bounded text of what the agent asked (redaction and truncation happen later)."""
    text = f"{method} {path}"
    if query:
        text += "?" + "&".join(f"{k}={v}" for k, v in sorted(query.items()))
    if body:
        with contextlib.suppress(ValueError, RecursionError):  # compact JSON: spend the characters on content
            body = json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False)
        text += " " + body
    return text[: MAX_SUMMARY_CHARS * 2]


def _well_formed(value: Any) -> Any:
    """A text with its lone surrogates (a proxy event's JSON may carry ``"\\udcff"`` in a query, a
    header or a body) as U+FFFD: the record refuses them, and a client must not be able to make its
    call leave no record that way. Anything but text is returned as it is."""
    if not isinstance(value, str):
        return value
    return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def build_record(
    *,
    endpoint: str,
    reporter_id: str,
    started_at: datetime,
    duration_ms: float,
    status: int,
    request_text: str,
    headers: dict[str, str],
    output_summary: str | None,
    attributes: dict[str, Any],
    error_code: str | None,
    error_message: str | None,
    source: str = "gateway",
    mcp_client: dict[str, str] | None = None,
) -> QueuedOp:
    """The op record of one call (pure: no I/O), through the same contract as ``POST /events``.
    ``mcp_client`` is the MCP client's ``clientInfo`` (name, version) for a call through ``/mcp``."""
    success = status < 400
    claimed = {
        MCP_CLIENT_ATTRIBUTES[key]: value
        for key, value in (mcp_client or {}).items()
        if key in MCP_CLIENT_ATTRIBUTES and isinstance(value, str) and value
    }
    fields: dict[str, Any] = {
        "endpoint": endpoint,
        "source": source,
        "success": success,
        "duration_ms": round(duration_ms, 3),
        "input_summary": request_text,
        "output_summary": output_summary or f"HTTP {status}",
        "attributes": {"http_status": status, **attributes, **claimed},
        "session_id": session_of(headers, source),
        "trace_id": headers.get(TRACE_HEADER) or None,
        "task_class": headers.get(TASK_CLASS_HEADER) or None,
    }
    if not success:
        fields["error_type"] = error_code or f"http_{status}"
        fields["error"] = error_message or f"HTTP {status}"
    fields = {name: _well_formed(value) for name, value in fields.items()}
    fields["attributes"] = {_well_formed(k): _well_formed(v) for k, v in fields["attributes"].items()}
    try:
        op = OpInput.server_record(fields)
    except ValueError:
        # A bad optional header must not cost the record, nor the good ones beside it (a foreign
        # 300-character Mcp-Session-Id must not drop a valid x-opslake-trace-id): start from what
        # the server itself knows, then take back each thing the agent supplied that passes alone.
        supplied = {name: fields[name] for name in ("session_id", "trace_id", "task_class")}
        kept = {**fields, **dict.fromkeys(supplied)}
        kept["attributes"] = {k: v for k, v in fields["attributes"].items() if k not in claimed}
        op = OpInput.server_record(kept)
        for name, value in supplied.items():
            op = _with(op, kept, {name: value}) if value is not None else op
        if claimed:
            op = _with(op, kept, {"attributes": fields["attributes"]})
    return op.to_queued(reporter_id=reporter_id, received_at=started_at)


def _with(op: OpInput, fields: dict[str, Any], more: dict[str, Any]) -> OpInput:
    """``op`` built again with ``more`` added to ``fields`` (which then keep it), or ``op`` as it
    was when ``more`` does not pass the contract."""
    try:
        better = OpInput.server_record({**fields, **more})
    except ValueError:
        return op
    fields.update(more)
    return better


class Observer:
    """The middleware; its queue and key-name resolver are built lazily, once per container."""

    def __init__(
        self,
        queue_factory: Callable[[], OpsQueue],
        key_names_factory: Callable[[], KeyNameResolver],
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._queue_factory = queue_factory
        self._key_names_factory = key_names_factory
        self._clock = clock
        self.__name__ = "observe"  # Powertools names middlewares in its debug output

    def __call__(self, app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response:
        started_at = now_utc()
        start = self._clock()
        app.append_context(**{_KEY_NAMES: self._key_names_factory})  # for caller_name()
        error: Exception | None = None
        response: Response | None = None
        try:
            response = next_middleware(app)
        except Exception as exc:  # recorded, then re-raised to the one error mapping
            error = exc
        duration_ms = (self._clock() - start) * 1000
        try:
            self._record(app, started_at, duration_ms, response, error)
        except Exception as exc:  # observation must never fail the call
            logger.exception("observation failed", error=str(exc))
            metrics.add_metric(name="ObservationsLost", unit=MetricUnit.Count, value=1)
        if error is not None:
            raise error
        assert response is not None
        return response

    def _record(
        self,
        app: APIGatewayRestResolver,
        started_at: datetime,
        duration_ms: float,
        response: Response | None,
        error: Exception | None,
    ) -> None:
        event = app.current_event
        error_code = error_message = None
        if error is not None:
            mapped = as_opslake_error(error, event.request_context.request_id)
            status, error_code, error_message = mapped.status, mapped.code, mapped.message
            if mapped is not error:  # an unexpected exception: keep its type for the analyzer
                error_message = f"{type(error).__name__}: {error}"
        else:
            assert response is not None
            status = response.status_code
            if status >= 400 and isinstance(response.body, str):
                error_code, error_message = _error_from_body(response.body)
        headers = {k.lower(): v for k, v in (event.headers or {}).items()}
        reporter_id = app.context.get(_REPORTER_ID) or self._key_names_factory().name_of(
            caller_key_id(event.raw_event["requestContext"])
        )  # the name a route already resolved (caller_name): the one it decided by
        record = build_record(
            endpoint=event.request_context.resource_path or event.path,
            reporter_id=reporter_id,
            started_at=started_at,
            duration_ms=duration_ms,
            status=status,
            request_text=app.context.get(_REQUEST_SUMMARY)
            or describe_request(
                event.http_method, event.path, event.query_string_parameters, _body_text(event)
            ),
            headers=headers,
            output_summary=app.context.get(_OUTPUT_SUMMARY),
            attributes=app.context.get(_ATTRIBUTES) or {},
            error_code=error_code,
            error_message=error_message,
            source=source_of(event.raw_event),
            mcp_client=mcp_client_of(event.raw_event),
        )
        sent = {"session_id": session_of(headers, record.source), "trace_id": headers.get(TRACE_HEADER)}
        if any(value and getattr(record, name) not in (None, value) for name, value in sent.items()):
            # a secret in the agent's session or trace header: stored as "redacted-<digest>"
            metrics.add_metric(name="IdsRedacted", unit=MetricUnit.Count, value=1)
        try:
            self._queue_factory().send([record.to_message()])
        except Exception as exc:
            logger.error("op record not enqueued", error=str(exc), op_record=record.model_dump(mode="json"))
            metrics.add_metric(name="ObservationsLost", unit=MetricUnit.Count, value=1)
            return
        metrics.add_metric(name="OpsObserved", unit=MetricUnit.Count, value=1)


def session_of(headers: dict[str, str], source: str) -> str | None:
    """The session an agent names: ``x-opslake-session-id``, else for a call through ``/mcp`` its
    ``Mcp-Session-Id`` (as sent: whichever server issued it, the client's id is its own)."""
    session = headers.get(SESSION_HEADER)
    if not session and source == MCP_TRANSPORT:
        session = headers.get(MCP_SESSION_HEADER)
    return session or None


def mcp_client_of(raw_event: dict[str, Any]) -> dict[str, str] | None:
    """The ``clientInfo`` the MCP handler found for this call (``requestContext``), if any."""
    client = (raw_event.get("requestContext") or {}).get(MCP_CLIENT_MARKER)
    return client if isinstance(client, dict) else None


def source_of(raw_event: dict[str, Any]) -> str:
    """``mcp`` for a call the MCP handler dispatched (its marker in ``requestContext``), else ``gateway``."""
    context = raw_event.get("requestContext") or {}
    return MCP_TRANSPORT if context.get(TRANSPORT_MARKER) == MCP_TRANSPORT else "gateway"


def _body_text(event: APIGatewayProxyEvent) -> str | None:
    """The body as text for the record, even when it is not UTF-8 (the route refuses it with a 400)."""
    if not event.body or not event.is_base64_encoded:
        return event.body
    try:
        return base64.b64decode(event.body).decode("utf-8", errors="replace")
    except ValueError:
        return event.body


def _error_from_body(body: str) -> tuple[str | None, str | None]:
    try:
        payload = json.loads(body)
    except ValueError:
        return None, body[:MAX_SUMMARY_CHARS]
    if isinstance(payload, dict):
        return payload.get("error"), payload.get("message")
    return None, None


def observe(app: APIGatewayRestResolver, observer: Observer) -> APIGatewayRestResolver:
    """Install the observation middleware on a tool's resolver (before any other middleware)."""
    app.use(middlewares=[observer])
    return app
