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

#: Lambda refuses a response payload over 6 MB (API Gateway then answers 502, and the agent learns
#: nothing). A tool result, as it travels (its JSON inside the JSON-RPC body, that body escaped once
#: more as the proxy answer's ``body`` string), must stay below this, with room for the envelope.
MAX_RESULT_BYTES = 6 * 1024 * 1024 - 64 * 1024
#: More bytes than one character of a REST answer can become in the carried result (text and
#: structuredContent, each escaped; a non-ASCII one is a 6-character escape in each): an answer
#: shorter than the budget over this is not measured.
_WORST_GROWTH = 16

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
        # Present and not empty (the server refuses the call otherwise): any other bad value is the
        # route's to refuse, as over REST.
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


def carried_bytes(value: Any) -> int:
    """The bytes ``value`` takes inside Lambda's response: serialized as the answer is, then counted
    once more as the proxy answer's ``body`` string (every quote and backslash gains a backslash)."""
    text = json.dumps(value, separators=(",", ":"), default=str)
    return len(text) + text.count('"') + text.count("\\")


def too_large(name: str, size: int) -> dict[str, Any]:
    """The ``isError`` result of an answer MCP cannot carry back through Lambda."""
    error = {
        "error": "mcp_answer_too_large",
        "message": (
            f"the {name} answer is {size:,} bytes as MCP carries it (its JSON inside the JSON-RPC "
            f"answer), more than the {MAX_RESULT_BYTES:,} bytes a Lambda answer may have; ask for "
            "less: a smaller limit, fewer columns, an aggregate (GROUP BY, count), or a WHERE that pages"
        ),
        "detail": {"answer_bytes": size, "max_answer_bytes": MAX_RESULT_BYTES},
    }
    return {
        "content": [{"type": "text", "text": error["message"]}],
        "structuredContent": error,
        "isError": True,
    }


def tool_result(answer: dict[str, Any], name: str = "tool's") -> dict[str, Any]:
    """A REST answer as a ``CallToolResult``: on success the JSON as text and as
    ``structuredContent`` (a text answer, such as Markdown, as text only); a 4xx/5xx is ``isError``
    with the REST ``message`` as its text and the
    REST error body (plus ``retry_after_s`` from ``Retry-After``) as ``structuredContent``.

    A success too large for Lambda's 6 MB answer that way (the JSON twice, the text escaped twice)
    keeps only the text (``structuredContent`` is optional for a tool without ``outputSchema``);
    one too large even so is ``isError`` ``mcp_answer_too_large``, saying how to ask for less (the
    tool's op record still says what the route answered: the route never saw the limit)."""
    status, text, payload, headers = rest_answer(answer)
    if status >= 400:
        error = payload if isinstance(payload, dict) else {"error": f"http_{status}", "message": text}
        message = error.get("message")
        message = message if isinstance(message, str) and message else f"HTTP {status}"
        if "retry-after" in headers and headers["retry-after"].isdigit():
            error = {**error, "retry_after_s": int(headers["retry-after"])}
        return {"content": [{"type": "text", "text": message}], "structuredContent": error, "isError": True}
    if payload is None and text:  # a text answer (GET /playbooks?format=md): no structure to offer
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
        size = carried_bytes(result)
        return result if size <= MAX_RESULT_BYTES else too_large(name, size)
    structured = payload if isinstance(payload, dict) else {"result": payload}
    content = [{"type": "text", "text": text or json.dumps(structured)}]
    result = {"content": content, "structuredContent": structured, "isError": False}
    if (
        len(content[0]["text"]) * _WORST_GROWTH < MAX_RESULT_BYTES
        or carried_bytes(result) <= MAX_RESULT_BYTES
    ):
        return result
    result = {"content": content, "isError": False}
    size = carried_bytes(result)
    return result if size <= MAX_RESULT_BYTES else too_large(name, size)
