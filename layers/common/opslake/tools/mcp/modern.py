"""MCP's 2026-07-28 era on ``POST /mcp``: no handshake; every request carries its envelope (the
protocol version and client capabilities) in ``params._meta`` and mirrors it in headers
(``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` for the name-bearing methods). The SDK
client's default ``mode="auto"`` opens with ``server/discover`` in this era, so serving it saves
every such connection the fallback POST. The methods are the handshake era's (same dispatch, same
records); results add ``resultType`` and, for what a client may cache, ``ttlMs``/``cacheScope``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from opslake.tools.mcp import protocol as rpc

MODERN_VERSIONS = rpc.MODERN_VERSIONS
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
#: The request parameter each name-bearing method mirrors in ``Mcp-Name``.
NAME_BEARING = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}
#: How long a client may keep a result: the tool list and the templates change only with a deploy;
#: playbook entries and reads change with every consolidator run, so they are not cached.
CACHE_TTL_MS = {"tools/list": 3_600_000, "resources/templates/list": 3_600_000}
CACHEABLE = frozenset(
    {"server/discover", "tools/list", "resources/list", "resources/templates/list", "resources/read"}
)
#: HTTP statuses of this era's errors (the SDK server's table; -32603 stays ours, a 500).
HTTP_STATUS = {
    rpc.PARSE_ERROR: 400,
    rpc.INVALID_REQUEST: 400,
    rpc.INVALID_PARAMS: 400,
    rpc.HEADER_MISMATCH: 400,
    rpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
    rpc.METHOD_NOT_FOUND: 404,
}
_BASE64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def error(code: int, message: str, data: Any = None) -> rpc.RpcError:
    return rpc.RpcError(code, message, data=data, http=HTTP_STATUS.get(code, rpc.HTTP_STATUS.get(code, 200)))


def decode_header(value: str | None) -> str | None:
    """A header value as sent (``=?base64?…?=`` carries text that is not a header token); ``None``
    for a malformed one, so that it never matches a body value."""
    if value is None:
        return None
    match = _BASE64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode("ascii") != payload:
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_envelope(method: str, params: dict[str, Any], headers: dict[str, str]) -> str:
    """The request's protocol version, after the era's checks in the SDK's order: the envelope in
    ``params._meta`` (-32602), the headers mirroring it (-32020), a version opslake speaks (-32022)."""
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise error(
            rpc.INVALID_PARAMS,
            f"params._meta must be an object carrying {PROTOCOL_VERSION_META!r} and {CLIENT_CAPABILITIES_META!r}",
        )
    missing = [key for key in (PROTOCOL_VERSION_META, CLIENT_CAPABILITIES_META) if key not in meta]
    if missing:
        raise error(rpc.INVALID_PARAMS, f"params._meta lacks {', '.join(missing)}")
    version = meta[PROTOCOL_VERSION_META]
    if headers.get(rpc.VERSION_HEADER) != version:
        raise error(
            rpc.HEADER_MISMATCH, "the MCP-Protocol-Version header does not match params._meta's version"
        )
    if headers.get(METHOD_HEADER) != method:
        raise error(rpc.HEADER_MISMATCH, "the Mcp-Method header does not match the request's method")
    name_key = NAME_BEARING.get(method)
    named = params.get(name_key) if name_key is not None else None
    if named is not None and decode_header(headers.get(NAME_HEADER)) != named:
        raise error(rpc.HEADER_MISMATCH, f"the Mcp-Name header does not match the request's {name_key}")
    if not isinstance(version, str):
        raise error(rpc.INVALID_PARAMS, "the protocol version in params._meta must be a string")
    if version not in MODERN_VERSIONS:
        raise rpc.unsupported_version(version, http=400)
    return version


def complete(method: str, result: dict[str, Any]) -> dict[str, Any]:
    """A handshake-era result in this era's shape."""
    answer = {**result, "resultType": "complete"}
    if method in CACHEABLE:
        answer.update(ttlMs=CACHE_TTL_MS.get(method, 0), cacheScope="private")
    return answer
