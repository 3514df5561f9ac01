"""MCP's JSON-RPC framing for the Streamable HTTP transport, stateless, JSON answers: the protocol
versions opslake speaks, the error table and the envelopes, as plain dicts.

Plain dicts and not the SDK's ``mcp_types`` models: importing those costs the Lambda's cold start
≈ 150-200 ms (hundreds of pydantic models built at import); the tests validate every answer with
them instead (tests/unit/tools/test_mcp_protocol.py).
"""

from __future__ import annotations

from typing import Any

#: The handshake-era versions (``initialize`` first): a client's is echoed, any other gets the latest.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = HANDSHAKE_VERSIONS[-1]
VERSION_HEADER = "mcp-protocol-version"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: MCP's code for ``resources/read`` of a URI the server does not have.
RESOURCE_NOT_FOUND = -32002
#: MCP's code for a protocol version the server does not speak (``data.supported`` names ours).
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: MCP's code for headers that do not mirror the request body (the 2026-07-28 era).
HEADER_MISMATCH = -32020
#: The 2026-07-28 era (see :mod:`opslake.tools.mcp.modern`): no handshake, an envelope per request.
MODERN_VERSIONS = ("2026-07-28",)

#: The HTTP status of each JSON-RPC error. Transport-level refusals (the POST is not one JSON-RPC
#: request opslake can read, or names a version it does not speak) are 4xx; an error answering a
#: well-formed request rides on 200, like its result would; an unexpected failure is a 500. (The
#: handshake era's statuses; :data:`opslake.tools.mcp.modern.HTTP_STATUS` has the 2026-07-28 era's.)
HTTP_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 200,
    INVALID_PARAMS: 200,
    RESOURCE_NOT_FOUND: 200,
    INTERNAL_ERROR: 500,
}

JsonRpcId = str | int | None


class RpcError(Exception):
    """A JSON-RPC error to answer with: ``code`` from the table above, ``http`` its HTTP status
    unless the table's is overridden (a refused body keeps the REST route's 400/415)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        data: Any = None,
        http: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http = http if http is not None else HTTP_STATUS.get(code, 200)
        #: HTTP headers of the answer (``Retry-After`` when a service opslake needs is unavailable).
        self.headers = headers or {}


def result(id_: JsonRpcId, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def error(id_: JsonRpcId, exc: RpcError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        body["data"] = exc.data
    return {"jsonrpc": "2.0", "id": id_, "error": body}


def unavailable(message: str, body: dict[str, Any], status: int, retry_after_s: int | None) -> RpcError:
    """-32603 for a request a service behind it could not answer (the REST route's 5xx): its
    ``message``, ``data`` the REST error body plus ``retry_after_s``, at the route's HTTP status
    with its ``Retry-After``, so an agent or its client knows to retry and when."""
    data = dict(body)
    headers: dict[str, str] = {}
    if retry_after_s is not None:
        data["retry_after_s"] = retry_after_s
        headers["Retry-After"] = str(retry_after_s)
    return RpcError(INTERNAL_ERROR, message, data=data or None, http=status, headers=headers)


def unsupported_version(requested: Any, http: int | None = None) -> RpcError:
    """-32022 naming every version opslake speaks (a client that knows one of them retries with it;
    a handshake version means ``initialize`` first)."""
    shown = str(requested)[:40]
    supported = [*HANDSHAKE_VERSIONS, *MODERN_VERSIONS]
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"MCP protocol version {shown!r} is not supported; use one of {', '.join(supported)}",
        data={"supported": supported, "requested": shown},
        http=http,
    )


def request_id(message: Any) -> JsonRpcId:
    """The id of a message, when it has a valid one (else ``None``, as JSON-RPC answers then)."""
    if isinstance(message, dict):
        id_ = message.get("id")
        if isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool)):
            return id_
    return None
