"""Who an MCP client says it is, kept without server state: ``POST /mcp`` runs on Lambda, so no
container remembers an ``initialize``.

In the handshake era the client names itself (``clientInfo``) only in ``initialize``; the answer
issues an ``Mcp-Session-Id`` that carries that name and version, readable, after a random UUID
(``opslake-mcp/<uuid>/<name>/<version>``, the parts percent-encoded), and the client sends it back
on every request (Streamable HTTP requires it once issued). In the 2026-07-28 era every request
carries ``clientInfo`` in ``params._meta``. Either way the name is a claim, like an op's
``agent_id``: the API key stays the identity. A session id opslake did not issue is kept as sent
and names no client.

Readable on purpose: the op record's ids are redacted when they hold a credential's shape, and
a base64 blob may; a UUID and words do not. The joint is ``/``, not ``:``: ``<name>:<version>``
read as an assignment, so a client named ``1Password`` or ``apikey`` had its own session id
redacted. Ids issued with ``:`` before are still read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

#: The response and request header (HTTP headers are case-insensitive; this is the spec's spelling).
SESSION_HEADER = "Mcp-Session-Id"
#: ``params._meta`` key of the client's info in the 2026-07-28 era.
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
ISSUED_PREFIX = "opslake-mcp"
ISSUED_JOINT = "/"
#: Longest name and version kept, encoded: the session id stays within an op id's 200 characters.
MAX_NAME_CHARS, MAX_VERSION_CHARS = 80, 40


@dataclass(frozen=True)
class ClientInfo:
    name: str
    version: str = ""

    def as_marker(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version} if self.version else {"name": self.name}


def _clean(value: Any, limit: int) -> str:
    """Printable text, cut so that its percent-encoding fits ``limit`` characters."""
    if not isinstance(value, str):
        return ""
    # cut to ``limit`` characters first (encoding only lengthens text): trimming a huge name one
    # character at a time, re-encoding it each time, would take a Lambda's timeout on a 1 MB name
    text = "".join(c for c in value[: limit * 4] if c.isprintable()).strip()[:limit].strip()
    while len(quote(text, safe="")) > limit:
        text = text[:-1]
    return text


def client_info(value: Any) -> ClientInfo | None:
    """A ``clientInfo`` object (``initialize`` params or the modern ``_meta``) as a ClientInfo."""
    if not isinstance(value, dict):
        return None
    name = _clean(value.get("name"), MAX_NAME_CHARS)
    return ClientInfo(name, _clean(value.get("version"), MAX_VERSION_CHARS)) if name else None


def issue_session_id(client: ClientInfo | None) -> str:
    """A new session id, carrying the client's name and version when it gave them."""
    parts = [ISSUED_PREFIX, str(uuid.uuid4())]
    if client is not None:
        parts += [quote(client.name, safe=""), quote(client.version, safe="")]
    return ISSUED_JOINT.join(parts)


def client_of_session(session_id: str | None) -> ClientInfo | None:
    """The client a session id opslake issued names; None for any other id."""
    if not session_id:
        return None
    parts = session_id.split(ISSUED_JOINT)
    if len(parts) != 4:
        parts = session_id.split(":")  # issued before the joint was ISSUED_JOINT
    if len(parts) != 4 or parts[0] != ISSUED_PREFIX:
        return None
    try:
        uuid.UUID(parts[1])
    except ValueError:
        return None
    return client_info({"name": unquote(parts[2]), "version": unquote(parts[3])})
