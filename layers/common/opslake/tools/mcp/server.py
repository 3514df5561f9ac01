"""``POST /mcp``: MCP's Streamable HTTP transport, stateless (no SSE stream, no session state: the
``Mcp-Session-Id`` ``initialize`` issues carries the client's name itself, see
:mod:`opslake.tools.mcp.session`) with JSON answers, hand-rolled on plain dicts (see
:mod:`opslake.tools.mcp.protocol` for why).

Both eras: the handshake (``initialize`` first; 2024-11-05 … 2025-11-25) and 2026-07-28 (no
handshake: an envelope in every request's ``params._meta``, mirrored in headers; see
:mod:`opslake.tools.mcp.modern`), chosen by the ``MCP-Protocol-Version`` header.

One POST carries one JSON-RPC message. Requests are answered with one JSON-RPC response;
notifications and a client's responses get 202 and no body; a batch, a body that is not one
JSON-RPC message, or an ``MCP-Protocol-Version`` opslake does not speak get a 4xx JSON-RPC error.

``tools/call`` and ``resources/read`` are dispatched, in process, to the tool's own observed
resolver with a REST proxy event (:mod:`opslake.tools.mcp.dispatch`): one op record per call, the
REST one but for ``source``. A ``tools/call`` that reaches no tool (an unknown name, params that
are not an object: -32602; an empty path parameter, or an argument to a tool that takes none: an
``isError`` result) is recorded too, as
endpoint ``/mcp`` with error_type ``mcp_unknown_tool`` / ``mcp_invalid_params``, so a confused
agent shows in the lake. ``initialize``, ``ping``,
``tools/list`` and ``resources/list`` are not tool calls and leave no record.

A service failing behind a call is never silent: a tool's 5xx is an ``isError`` result with the
REST body and ``retry_after_s``; ``resources/list`` or ``resources/read`` while the playbooks cannot
be read is a -32603 at the route's 503 with ``Retry-After``, ``data`` the REST body and
``retry_after_s`` (:func:`opslake.tools.mcp.protocol.unavailable`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from opslake import __version__
from opslake.errors import BadRequestError, MalformedJsonError, OpslakeError
from opslake.http.bodies import check_json_depth, request_body
from opslake.http.identity import KeyNameResolver, caller_key_id
from opslake.http.responses import json_response, report_error
from opslake.ingest.observe import MCP_CLIENT_MARKER
from opslake.tools.mcp import modern as modern_era
from opslake.tools.mcp import protocol as rpc
from opslake.tools.mcp.dispatch import call_event, rest_answer, synthesize, tool_result
from opslake.tools.mcp.registry import BY_NAME, TOOLS, ToolSpec
from opslake.tools.mcp.session import (
    CLIENT_INFO_META,
    SESSION_HEADER,
    ClientInfo,
    client_info,
    client_of_session,
    issue_session_id,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

#: ``tools/list`` lists every tool; ``resources/list`` every active playbook entry as this URI.
PLAYBOOK_URI = "opslake://playbooks"
SERVER_INFO = {"name": "opslake", "title": "opslake agent ops lake", "version": __version__}
CAPABILITIES = {"tools": {"listChanged": False}, "resources": {"listChanged": False}}
INSTRUCTIONS = (
    "opslake observes agents' tool calls and learns from them. Read the playbook entries (the "
    "`playbooks` tool or the opslake://playbooks resources) before a task; describe a table "
    "(`tables`, `table`) before writing SQL; `log` what you tried and how it went."
)
#: Loads ``functions/gateway/<module>.py`` (the handler module exposes ``app``, its resolver).
ModuleLoader = Callable[[str], ModuleType]


class McpRefusalError(BadRequestError):
    """A ``tools/call`` that reaches no tool; its ``code`` is the record's ``error_type``."""

    def __init__(self, code: str, message: str, *, detail: Any = None) -> None:
        super().__init__(message, detail=detail)
        self.code = code


class McpServer:
    """The protocol, given how to load a tool's handler module and an observed resolver for the
    calls refused before any tool (built lazily: most containers never need it)."""

    def __init__(
        self,
        load_module: ModuleLoader,
        refusal_app: Callable[[], APIGatewayRestResolver] | None = None,
        key_names: Callable[[], KeyNameResolver] | None = None,
    ) -> None:
        self._load_module = load_module
        self._refusal_app_factory = refusal_app
        # the tools' own resolver of key names (their op records' reporter_id): resources/list hides
        # the caller's held-out entries by the same name GET /playbooks splits by; none: the key id
        self._key_names = key_names
        self._refusal_app: APIGatewayRestResolver | None = None
        self._refusal: McpRefusalError | None = None
        self._methods: dict[str, Callable[[dict[str, Any], APIGatewayProxyEvent, Any], dict[str, Any]]] = {
            "initialize": self._initialize,
            "ping": lambda params, event, context: {},
            "tools/list": lambda params, event, context: {"tools": [tool.listed() for tool in TOOLS]},
            "tools/call": self._call_tool,
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": self._read_resource,
        }
        self._modern_methods = {
            **{name: fn for name, fn in self._methods.items() if name != "initialize"},
            "server/discover": self._discover,
        }

    # ---- the transport ---------------------------------------------------------------------------
    def handle(self, event: APIGatewayProxyEvent, context: Any) -> Response:
        """Answer one POST /mcp."""
        message: Any = None
        version = (event.headers or {}).get(rpc.VERSION_HEADER)
        era_modern = version in rpc.MODERN_VERSIONS
        try:
            message = self._parse(event)
            if version is not None and version not in rpc.HANDSHAKE_VERSIONS and not era_modern:
                raise rpc.unsupported_version(version)
            return self._message(message, event, context, modern=era_modern)
        except rpc.RpcError as exc:
            if era_modern and exc.code in (rpc.METHOD_NOT_FOUND, rpc.INVALID_PARAMS):
                exc.http = modern_era.HTTP_STATUS[exc.code]  # this era's statuses (404, 400)
            return self._error(rpc.request_id(message), exc)
        except Exception as exc:  # never a stack trace to the client: logged and counted instead
            error = report_error(exc, event.request_context.request_id)
            return self._error(rpc.request_id(message), rpc.RpcError(rpc.INTERNAL_ERROR, error.message))

    def _parse(self, event: APIGatewayProxyEvent) -> Any:
        try:
            text = request_body(event)  # 415 for gzip or a type that is not JSON, 400 for bad UTF-8
            if not text:
                raise MalformedJsonError("the body is empty: POST one JSON-RPC message")
            check_json_depth(text)
        except OpslakeError as exc:
            code = rpc.PARSE_ERROR if isinstance(exc, MalformedJsonError) else rpc.INVALID_REQUEST
            raise rpc.RpcError(code, exc.message, data=exc.body(), http=exc.status) from exc
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise rpc.RpcError(rpc.PARSE_ERROR, f"the body is not JSON: {exc}"[:300]) from exc

    def _message(self, message: Any, event: APIGatewayProxyEvent, context: Any, *, modern: bool) -> Response:
        if isinstance(message, list):
            raise rpc.RpcError(
                rpc.INVALID_REQUEST, "batches are not accepted: POST one JSON-RPC message at a time"
            )
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise rpc.RpcError(
                rpc.INVALID_REQUEST, 'not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0")'
            )
        if "method" not in message:
            if "id" in message and ("result" in message or "error" in message):
                return _accepted()  # a response to a server request: opslake sends none
            raise rpc.RpcError(rpc.INVALID_REQUEST, 'a JSON-RPC request needs a "method"')
        method = message["method"]
        if not isinstance(method, str):
            raise rpc.RpcError(rpc.INVALID_REQUEST, '"method" must be a string')
        if "id" not in message:
            return _accepted()  # a notification (notifications/initialized, …): nothing to do
        id_ = message["id"]
        if rpc.request_id(message) is None:
            raise rpc.RpcError(rpc.INVALID_REQUEST, '"id" must be a string or an integer')
        methods = self._modern_methods if modern else self._methods
        params = message.get("params", {})
        if params is None:
            params = {}
        headers = {k.lower(): v for k, v in (event.headers or {}).items()}
        session = headers.get(SESSION_HEADER.lower())
        if modern:  # the envelope first (the SDK's order), then method existence
            if not isinstance(params, dict):
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method} params must be an object carrying _meta")
            modern_era.check_envelope(method, params, headers)
            _mark_client(event, client_info(params["_meta"].get(CLIENT_INFO_META)))
            params = {k: v for k, v in params.items() if k != "_meta"}
        else:
            _mark_client(event, client_of_session(session))
        handler = methods.get(method)
        if handler is None:
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"method not found: {method[:80]}")
        if not isinstance(params, dict):
            if method == "tools/call":
                self._refuse(
                    event, context, "mcp_invalid_params", "tools/call params must be an object", params
                )
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method} params must be an object")
        result = handler(params, event, context)
        answer = rpc.result(id_, modern_era.complete(method, result) if modern else result)
        if method == "initialize" and not session:  # the client's name, for its calls' records
            return json_response(
                200, answer, {SESSION_HEADER: issue_session_id(client_info(params.get("clientInfo")))}
            )
        return json_response(200, answer)

    def _error(self, id_: rpc.JsonRpcId, exc: rpc.RpcError) -> Response:
        return json_response(exc.http, rpc.error(id_, exc), exc.headers or None)

    # ---- methods ---------------------------------------------------------------------------------
    def _initialize(
        self, params: dict[str, Any], event: APIGatewayProxyEvent, context: Any
    ) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in rpc.HANDSHAKE_VERSIONS else rpc.LATEST_VERSION
        return {
            "protocolVersion": version,
            "capabilities": CAPABILITIES,
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }

    def _discover(self, params: dict[str, Any], event: APIGatewayProxyEvent, context: Any) -> dict[str, Any]:
        """The 2026-07-28 era's opening: what opslake speaks and offers (no state is kept)."""
        return {
            "supportedVersions": list(rpc.MODERN_VERSIONS),
            "capabilities": CAPABILITIES,
            "instructions": INSTRUCTIONS,
            "_meta": {modern_era.SERVER_INFO_META: SERVER_INFO},
        }

    def _call_tool(self, params: dict[str, Any], event: APIGatewayProxyEvent, context: Any) -> dict[str, Any]:
        name = params.get("name")
        tool = BY_NAME.get(name) if isinstance(name, str) else None
        if tool is None:
            shown = name[:80] if isinstance(name, str) else json.dumps(name)[:80]
            message = f"unknown tool: {shown}; the tools are {', '.join(BY_NAME)}"
            self._refuse(event, context, "mcp_unknown_tool", message, params)
            raise rpc.RpcError(rpc.INVALID_PARAMS, message)
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            message = f"tools/call arguments must be an object (the {tool.name} tool's inputSchema)"
            self._refuse(event, context, "mcp_invalid_params", message, params)
            raise rpc.RpcError(rpc.INVALID_PARAMS, message)
        # An empty path parameter is another path (``/tables/`` is GET /tables, ``/worker/`` no
        # route): no REST call is like it (API Gateway routes neither), so it reaches no tool. A
        # bad argument is the tool's error (isError, which the model reads), not the protocol's.
        missing = [name for name in tool.path_parameters if arguments.get(name) in (None, "")]
        if missing:
            message = f"the {tool.name} tool needs {missing[0]!r}: a non-empty string (its inputSchema)"
            self._refuse(event, context, "mcp_invalid_params", message, params)
            return _invalid_arguments(message, {"argument": missing[0]})
        # A tool that takes no arguments (tables, model) advertises additionalProperties false: an
        # argument sent to it is the agent's mistake (it meant another tool, or a filter that does
        # not exist), said as the REST body routes say an unknown field, not silently ignored.
        if tool.arguments_as == "none" and arguments:
            unknown = sorted(arguments)
            shown = ", ".join(repr(name[:80]) for name in unknown[:10])
            message = f"the {tool.name} tool takes no arguments; remove {shown} (its inputSchema has none)"
            self._refuse(event, context, "mcp_invalid_params", message, params)
            return _invalid_arguments(message, {"unknown_arguments": [name[:80] for name in unknown[:10]]})
        return tool_result(
            self._resolve(tool, call_event(event.raw_event, tool, arguments), context), tool.name
        )

    def _resolve(self, tool: ToolSpec, rest_event: dict[str, Any], context: Any) -> dict[str, Any]:
        """The tool's own observed resolver's answer (plain ``resolve``: logging, tracing and
        metrics wrap the outer /mcp invocation once)."""
        answer: dict[str, Any] = self._load_module(tool.module).app.resolve(rest_event, context)
        return answer

    def _list_resources(
        self, params: dict[str, Any], event: APIGatewayProxyEvent, context: Any
    ) -> dict[str, Any]:
        """Every active playbook entry the caller is not held out from, read from the snapshot the
        playbooks route serves. The list names entries (trigger, kind, endpoint); their advice is
        read with ``resources/read``, which is a ``GET /playbooks`` and so an op record of who read
        which entry. A held-out entry is not listed (its ``resources/read`` finds nothing either)."""
        from opslake.config import get_settings
        from opslake.errors import ServiceUnavailableError
        from opslake.tools.playbook_arms import visible_entries
        from opslake.tools.snapshots import SnapshotUnavailableError

        try:
            snapshot = self._load_module(BY_NAME["playbooks"].module).snapshot.get()
        except SnapshotUnavailableError as exc:
            # what GET /playbooks answers then (its 503, message and Retry-After), as a JSON-RPC error
            error = ServiceUnavailableError(
                "playbooks cannot be read right now; retry shortly",
                retry_after_s=get_settings().queue_retry_after_s,
            )
            raise rpc.unavailable(error.message, error.body(), error.status, error.retry_after_s) from exc
        entries = snapshot.select(limit=len(snapshot.entries)) if snapshot is not None else []
        if entries:
            key_id = caller_key_id(event.raw_event["requestContext"])
            key_name = self._key_names().name_of(key_id) if self._key_names is not None else key_id
            entries = visible_entries(entries, key_name, salt=get_settings().playbook_holdout_salt)
        return {
            "resources": [
                {
                    "uri": f"{PLAYBOOK_URI}/{quote(entry.entry_id, safe='')}",
                    "name": entry.entry_id,
                    "title": entry.trigger[:200],
                    "description": (
                        f"playbook entry ({entry.kind}, confidence {entry.confidence:.2f}) "
                        f"for {entry.endpoint or 'any endpoint'}: when {entry.trigger[:200]}"
                    ),
                    "mimeType": "application/json",
                }
                for entry in entries
            ]
        }

    def _list_templates(
        self, params: dict[str, Any], event: APIGatewayProxyEvent, context: Any
    ) -> dict[str, Any]:
        return {
            "resourceTemplates": [
                {
                    "uriTemplate": PLAYBOOK_URI + "{?endpoint,task_class,q,limit}",
                    "name": "playbooks",
                    "description": "the active playbook entries for an endpoint, a task class or words",
                    "mimeType": "application/json",
                }
            ]
        }

    def _read_resource(
        self, params: dict[str, Any], event: APIGatewayProxyEvent, context: Any
    ) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise rpc.RpcError(rpc.INVALID_PARAMS, "resources/read needs a uri (a string)")
        parts = urlsplit(uri)
        if parts.scheme != "opslake" or parts.netloc != "playbooks":
            raise rpc.RpcError(
                rpc.RESOURCE_NOT_FOUND,
                f"no resource {uri[:200]!r}; resources/list names the resources",
                data={"uri": uri[:200]},
            )
        # opslake://playbooks/<entry_id> is one entry; opslake://playbooks?endpoint=… a selection
        entry_id = unquote(parts.path[1:]) if parts.path not in ("", "/") else None
        query = {"entry_id": entry_id, "limit": "1"} if entry_id else dict(parse_qsl(parts.query))
        # the resource is JSON: the /mcp request's Accept (kept for the tools) must not make it
        # Markdown, which this read could not parse (an entry recorded served, answered "no entry")
        query["format"] = "json"
        tool = BY_NAME["playbooks"]
        rest_event = synthesize(event.raw_event, method=tool.method, resource=tool.route, query=query)
        status, text, payload, headers = rest_answer(self._resolve(tool, rest_event, context))
        if status >= 400:
            body = payload if isinstance(payload, dict) else {}
            message = str(body.get("message") or f"HTTP {status}")
            if status < 500:  # a bad selection (limit=0, …): the route's 400, its message and body
                raise rpc.RpcError(rpc.INVALID_PARAMS, message, data=body or None)
            retry = headers.get("retry-after", "")
            raise rpc.unavailable(message, body, status, int(retry) if retry.isdigit() else None)
        if entry_id is None:
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}
        entries = payload.get("entries") if isinstance(payload, dict) else None
        if not entries:
            raise rpc.RpcError(
                rpc.RESOURCE_NOT_FOUND,
                f"no active playbook entry {entry_id[:200]!r}; resources/list names the active ones",
                data={"uri": uri[:200]},
            )
        return {"contents": [{"uri": uri, "mimeType": "application/json", "text": json.dumps(entries[0])}]}

    # ---- calls that reach no tool ----------------------------------------------------------------
    def _refuse(
        self,
        event: APIGatewayProxyEvent,
        context: Any,
        code: str,
        message: str,
        params: Any = None,
    ) -> None:
        """Record a ``tools/call`` refused before any tool (endpoint ``/mcp``), through the same
        observation middleware as the tools, so it is an op record like any refused call."""
        if self._refusal_app_factory is None:
            return
        if self._refusal_app is None:
            self._refusal_app = self._refusal_app_factory()
            self._refusal_app.route("/mcp", method="POST")(self._raise_refusal)
        self._refusal = McpRefusalError(code, message)
        body = json.dumps({"method": "tools/call", "params": params})
        rest_event = synthesize(event.raw_event, method="POST", resource="/mcp", body=body)
        try:
            self._refusal_app.resolve(rest_event, context)
        finally:
            self._refusal = None

    def _raise_refusal(self) -> Response:
        assert self._refusal is not None
        raise self._refusal


def _mark_client(event: APIGatewayProxyEvent, client: ClientInfo | None) -> None:
    """Put the client's claimed name where the tools' observation reads it: the ``requestContext``
    the dispatched events are copied from (API Gateway builds it; a client cannot write there)."""
    if client is not None:
        event.raw_event.setdefault("requestContext", {})[MCP_CLIENT_MARKER] = client.as_marker()


def _invalid_arguments(message: str, detail: dict[str, Any]) -> dict[str, Any]:
    """The ``isError`` result of a call refused before its tool (arguments its schema rules out)."""
    error = {"error": "mcp_invalid_params", "message": message, "detail": detail}
    return {"content": [{"type": "text", "text": message}], "structuredContent": error, "isError": True}


def _accepted() -> Response:
    return Response(status_code=202, body="")


def method_not_allowed() -> Response:
    """GET (an SSE stream) and DELETE (a session's end) /mcp: opslake keeps no streams or sessions."""
    return json_response(
        405,
        {
            "error": "method_not_allowed",
            "message": "POST JSON-RPC messages to /mcp: it is stateless (no SSE stream; a session holds no state to end)",
        },
        {"Allow": "POST"},
    )
