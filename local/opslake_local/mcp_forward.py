"""The forwarding half of ``opslake mcp``: each MCP request an agent sends over stdio goes on as one
JSON-RPC POST to the stack's ``/mcp`` (API key, one session id per process), so the stack stays the
only source of tool schemas and its op records say ``source=mcp``.

Failures that are not the stack's own answers (nothing listens, a refused key, a route the deployed
stack lacks, a timeout) become :class:`ForwardError`s whose message says what to do; the stack's
JSON-RPC errors pass through with their code and message. No MCP SDK here (httpx only): the stdio
server in :mod:`opslake_local.mcp_stdio` wraps these errors in the SDK's.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

#: JSON-RPC's implementation-defined server error: the stack could not be asked (or refused to be).
STACK_UNAVAILABLE = -32000
#: JSON-RPC's internal error: the stack answered something that is not JSON-RPC.
INTERNAL_ERROR = -32603
#: The handshake-era protocol the stack's stateless /mcp speaks (no initialize needed per request).
STACK_PROTOCOL_VERSION = "2025-11-25"
#: API Gateway gives up on a function after 29 s; a tool call may take all of it.
DEFAULT_TIMEOUT_S = 40.0
#: API Gateway's own 403 for a path or method it has no route for (a stack deployed before /mcp).
MISSING_ROUTE_MESSAGE = "Missing Authentication Token"
#: API Gateway's own answers (no JSON-RPC body) when the stack is there but the call failed.
GATEWAY_FAILURES = {
    413: "the request is larger than API Gateway (10 MB) or Lambda (6 MB) accepts; send less",
    500: "the stack's function failed; retry, and if it persists read the function's logs",
    502: (
        "the stack's function failed or its answer was over Lambda's 6 MB; retry, ask for less, or "
        "read the function's logs"
    ),
    504: "the call took longer than API Gateway's 29 s; retry, or ask for less",
}
SESSION_HEADER = "x-opslake-session-id"
TRANSPORT_HEADER = "x-opslake-mcp-transport"


@dataclass(frozen=True)
class Endpoint:
    """Where to forward: the stack's ``POST /mcp`` URL and the API key to send."""

    url: str
    api_key: str


class ForwardError(Exception):
    """A JSON-RPC error to answer the agent with: the stack's own, or one that says what went wrong
    on the way to it (code :data:`STACK_UNAVAILABLE`)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def mcp_url(base: str) -> str:
    """The ``/mcp`` URL of a stack given by its API base URL (the ``ApiUrl`` output, with or without
    a trailing slash) or by the ``/mcp`` URL itself."""
    url = base.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {base!r} (give the stack's ApiUrl, e.g. https://…/prod)")
    return url if url.endswith("/mcp") else f"{url}/mcp"


def local_endpoint(state_file: Path, api_key: str | None = None) -> Endpoint:
    """The running local stack's ``/mcp``, read from the state file ``opslake local up`` writes (read
    again for every request, so a restarted stack on another port or with another key is found);
    ``api_key`` overrides the stack's own key (e.g. one made with ``opslake keys create``)."""
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        raise ForwardError(
            STACK_UNAVAILABLE,
            f"no local opslake stack is running (no state file {state_file}); "
            "start it with `opslake local up`",
        ) from None
    except (OSError, ValueError) as exc:
        raise ForwardError(
            STACK_UNAVAILABLE, f"cannot read the local stack's state file {state_file}: {exc}"
        ) from None
    key = api_key or state.get("api_key")
    if not state.get("api_url") or not key:
        raise ForwardError(
            STACK_UNAVAILABLE,
            f"{state_file} names no API URL or key; restart the local stack with `opslake local up`",
        )
    return Endpoint(mcp_url(str(state["api_url"])), str(key))


def _gateway_message(response: httpx.Response) -> str:
    """API Gateway's own ``{"message": …}`` (or the start of whatever the body is)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return response.text[:200]


def read_answer(response: httpx.Response, hint: str) -> dict[str, Any]:
    """The ``result`` of the stack's JSON-RPC answer, or a ForwardError: the stack's JSON-RPC error
    as it is (any HTTP status), else a message for API Gateway's own refusals and for answers that
    are not JSON-RPC. ``hint`` says how to point the command at the right stack."""
    url = str(response.request.url)
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = error.get("code")
        return _raise(
            code if isinstance(code, int) else INTERNAL_ERROR,
            str(error.get("message") or "the stack answered an error without a message"),
            error.get("data"),
        )
    status = response.status_code
    if status == 403:
        message = _gateway_message(response)
        if message == MISSING_ROUTE_MESSAGE:
            return _raise(
                STACK_UNAVAILABLE,
                f"the stack at {url} has no POST /mcp route (deployed before MCP? redeploy it); {hint}",
                {"status": status},
            )
        return _raise(
            STACK_UNAVAILABLE,
            f"the stack at {url} refused the API key (HTTP 403 {message}); "
            "check --api-key / OPSLAKE_API_KEY (`opslake keys list` names the keys)",
            {"status": status},
        )
    if status == 429:
        return _raise(
            STACK_UNAVAILABLE,
            f"the stack at {url} throttled the call (HTTP 429: the usage plan's rate or quota); try again later",
            {"status": status},
        )
    if status in GATEWAY_FAILURES:  # the right stack, failing: checking the URL would not help
        what = f"HTTP {status} {_gateway_message(response)!r}"
        return _raise(
            INTERNAL_ERROR,
            f"the stack at {url} answered {what}: {GATEWAY_FAILURES[status]}",
            {"status": status},
        )
    if status >= 400 or not isinstance(body, dict) or not isinstance(body.get("result"), dict):
        what = f"HTTP {status} {_gateway_message(response)!r}" if status >= 400 else "no JSON-RPC result"
        return _raise(
            INTERNAL_ERROR, f"the stack at {url} answered {what}, not MCP; {hint}", {"status": status}
        )
    result: dict[str, Any] = body["result"]
    return result


def _raise(code: int, message: str, data: Any = None) -> dict[str, Any]:
    raise ForwardError(code, message, data)


class StackForwarder:
    """Sends MCP requests to a stack's ``/mcp`` as JSON-RPC over one pooled httpx client.

    ``resolve`` names the endpoint for each request (it raises ForwardError when there is no stack
    to ask); ``hint`` ends the messages of failures that a different target would fix.
    """

    def __init__(
        self,
        resolve: Callable[[], Endpoint],
        hint: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        session_id: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.resolve = resolve
        self.hint = hint
        self.timeout_s = timeout_s
        self.session_id = session_id or f"mcp-{uuid.uuid4()}"
        self._ids = itertools.count(1)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)), transport=transport
        )

    def headers(self, endpoint: Endpoint) -> dict[str, str]:
        return {
            "x-api-key": endpoint.api_key,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": STACK_PROTOCOL_VERSION,
            SESSION_HEADER: self.session_id,
            TRANSPORT_HEADER: "stdio",
        }

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The stack's result for one JSON-RPC request, or a ForwardError."""
        endpoint = self.resolve()
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": dict(params or {})}
        try:
            response = await self._client.post(endpoint.url, json=message, headers=self.headers(endpoint))
        except httpx.ConnectError as exc:
            raise ForwardError(
                STACK_UNAVAILABLE,
                f"no opslake stack answers at {endpoint.url} ({exc or type(exc).__name__}); {self.hint}",
            ) from exc
        except httpx.TimeoutException as exc:
            raise ForwardError(
                STACK_UNAVAILABLE,
                f"the stack at {endpoint.url} did not answer {method} within {self.timeout_s:g} s "
                f"({type(exc).__name__}); try again, or raise --timeout",
            ) from exc
        except httpx.HTTPError as exc:
            raise ForwardError(
                STACK_UNAVAILABLE, f"the request to {endpoint.url} failed: {exc or type(exc).__name__}"
            ) from exc
        return read_answer(response, self.hint)

    async def aclose(self) -> None:
        await self._client.aclose()
