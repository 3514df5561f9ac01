"""A ``tools/call`` as the REST call it stands for: the proxy event API Gateway would have sent for
it (built from the ``POST /mcp`` event, so identity, request id and the agent's ``x-opslake-*``
headers carry over), and the route's answer as an MCP ``CallToolResult``.

The event's ``requestContext`` is marked (:data:`opslake.ingest.observe.TRANSPORT_MARKER`): the
tool's observation middleware then records the call with ``source`` "mcp", and otherwise exactly as
the REST call (same ``endpoint``, ``error_type``, summaries).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any
from urllib.parse import quote

from opslake.ingest.observe import MCP_TRANSPORT, TRANSPORT_MARKER
from opslake.tools.mcp.registry import ToolSpec

#: Headers of the MCP envelope that do not describe the tool's request (its length and encoding,
#: the MCP version, a cache validator the agent never sent for the tool).
_DROPPED_HEADERS = frozenset(
    {"content-length", "content-type", "content-encoding", "if-none-match", "mcp-protocol-version"}
)


def synthesize(
    outer: dict[str, Any],
    *,
    method: str,
    resource: str,
    body: str | None = None,
    path_parameters: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The REST proxy event of one call to ``resource`` (a deep copy of ``outer``, the /mcp event)."""
    event = copy.deepcopy(outer)
    path = resource
    for name, value in (path_parameters or {}).items():
        path = path.replace("{" + name + "}", quote(value, safe="", errors="surrogatepass"))
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() not in _DROPPED_HEADERS}
    multi = {
        k: v for k, v in (event.get("multiValueHeaders") or {}).items() if k.lower() not in _DROPPED_HEADERS
    }
    if body is not None:
        headers["Content-Type"] = "application/json"
        multi["Content-Type"] = ["application/json"]
    event.update(
        resource=resource,
        path=path,
        httpMethod=method,
        headers=headers,
        multiValueHeaders=multi,
        body=body,
        isBase64Encoded=False,
        pathParameters=dict(path_parameters) if path_parameters else None,
        queryStringParameters=dict(query) if query else None,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
    )
    context = event.setdefault("requestContext", {})
    stage = context.get("stage")
    context.update(resourcePath=resource, httpMethod=method, path=f"/{stage}{path}" if stage else path)
    context[TRANSPORT_MARKER] = MCP_TRANSPORT
    return event


def as_text(value: Any) -> str:
    """A query or path value as the text a URL would carry (JSON for anything but a string)."""
    return value if isinstance(value, str) else json.dumps(value)


def call_event(outer: dict[str, Any], tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """The REST proxy event of ``tool`` called with ``arguments`` (validated by the route itself,
    so that a bad argument gets the REST route's 400 and its op record)."""
    if tool.arguments_as == "body":
        return synthesize(outer, method=tool.method, resource=tool.route, body=json.dumps(arguments))
    if tool.arguments_as == "path":
        # A missing parameter is empty: the route refuses it as it refuses any other bad value.
        values = {name: as_text(arguments.get(name, "")) for name in tool.path_parameters}
        return synthesize(outer, method=tool.method, resource=tool.route, path_parameters=values)
    if tool.arguments_as == "query":
        query = {k: as_text(v) for k, v in arguments.items() if v is not None}
        return synthesize(outer, method=tool.method, resource=tool.route, query=query)
    return synthesize(outer, method=tool.method, resource=tool.route)


def rest_answer(answer: dict[str, Any]) -> tuple[int, str, Any, dict[str, str]]:
    """(status, body text, parsed JSON or None, headers) of a resolver's proxy answer."""
    status = int(answer.get("statusCode") or 500)
    text = answer.get("body") or ""
    if answer.get("isBase64Encoded"):
        text = base64.b64decode(text).decode("utf-8", "replace")
    try:
        payload = json.loads(text) if text else None
    except ValueError:
        payload = None
    headers: dict[str, str] = {}
    for name, values in (answer.get("multiValueHeaders") or {}).items():
        if values:
            headers[name.lower()] = str(values[-1])
    for name, value in (answer.get("headers") or {}).items():
        headers[name.lower()] = str(value)
    return status, text, payload, headers


def tool_result(answer: dict[str, Any]) -> dict[str, Any]:
    """A REST answer as a ``CallToolResult``: on success the JSON as text and as
    ``structuredContent``; a 4xx/5xx is ``isError`` with the REST ``message`` as its text and the
    REST error body (plus ``retry_after_s`` from ``Retry-After``) as ``structuredContent``."""
    status, text, payload, headers = rest_answer(answer)
    if status >= 400:
        error = payload if isinstance(payload, dict) else {"error": f"http_{status}", "message": text}
        message = error.get("message")
        message = message if isinstance(message, str) and message else f"HTTP {status}"
        if "retry-after" in headers and headers["retry-after"].isdigit():
            error = {**error, "retry_after_s": int(headers["retry-after"])}
        return {"content": [{"type": "text", "text": message}], "structuredContent": error, "isError": True}
    structured = payload if isinstance(payload, dict) else {"result": payload}
    return {
        "content": [{"type": "text", "text": text or json.dumps(structured)}],
        "structuredContent": structured,
        "isError": False,
    }
