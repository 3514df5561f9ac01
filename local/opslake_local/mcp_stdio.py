"""The stdio half of ``opslake mcp``: the official MCP SDK's low-level ``Server`` on its stdio
transport, answering ``initialize`` itself and forwarding ``tools/list``, ``tools/call``,
``resources/list``, ``resources/templates/list`` and ``resources/read`` to the stack
(:class:`~opslake_local.mcp_forward.StackForwarder`).

Results pass through as the stack gave them (``isError``, ``structuredContent``); failures on the way
become MCP errors with the forwarder's message. While it serves, the SDK points fd 1 at stderr, so
nothing but protocol reaches stdout. This module imports the SDK (about a second): only the ``mcp``
command imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from opslake import __version__
from opslake_local.mcp_forward import INTERNAL_ERROR, ForwardError, StackForwarder

log = logging.getLogger("opslake.mcp")

INSTRUCTIONS = (
    "opslake observes AI agents' tool calls in an S3/Parquet lake. Its tools query that lake and the "
    "sample datasets (describe tables before writing SQL); its resources are the playbook entries "
    "learned from past failures."
)

ResultT = TypeVar("ResultT", bound=BaseModel)


async def forward(
    forwarder: StackForwarder, method: str, params: dict[str, Any], model: type[ResultT]
) -> ResultT:
    """The stack's answer to one request as the SDK's result model; an MCPError otherwise."""
    try:
        result = await forwarder.request(method, params)
    except ForwardError as exc:
        log.warning("%s: %s", method, exc.message)
        raise MCPError(exc.code, exc.message, exc.data) from None
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        message = f"the stack's answer to {method} is not a valid MCP result: {exc.errors()[0]['msg']}"
        log.warning("%s", message)
        raise MCPError(INTERNAL_ERROR, message) from None


def _page(params: types.PaginatedRequestParams | None) -> dict[str, Any]:
    return {"cursor": params.cursor} if params is not None and params.cursor else {}


def build_server(forwarder: StackForwarder) -> Server[Any]:
    """The SDK server whose handlers forward to the stack."""

    async def list_tools(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await forward(forwarder, "tools/list", _page(params), types.ListToolsResult)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = {"name": params.name, "arguments": params.arguments or {}}
        return await forward(forwarder, "tools/call", arguments, types.CallToolResult)

    async def list_resources(
        _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await forward(forwarder, "resources/list", _page(params), types.ListResourcesResult)

    async def list_templates(
        _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await forward(
            forwarder, "resources/templates/list", _page(params), types.ListResourceTemplatesResult
        )

    async def read_resource(_ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await forward(forwarder, "resources/read", {"uri": str(params.uri)}, types.ReadResourceResult)

    return Server(
        "opslake",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


class StdinLines:
    """stdin's lines for the SDK's stdio transport, read by a daemon thread and awaited on an
    asyncio queue. The SDK's own reader blocks on stdin in an anyio worker thread, which a
    cancellation waits for and the interpreter joins at exit: Ctrl-C (or an agent host's SIGINT)
    with stdin still open hung ``opslake mcp`` until stdin closed. Awaiting a queue is cancelled at
    once; the thread reads the file descriptor with ``os.read`` (no buffered reader whose lock a
    daemon thread could hold at interpreter shutdown), and does not keep the process alive."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: asyncio.Queue[str | None] | None = None

    def _read(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
        def put(line: bytes | None) -> None:
            text = None if line is None else line.decode("utf-8", errors="replace")
            loop.call_soon_threadsafe(queue.put_nowait, text)

        pending = bytearray()
        try:
            while chunk := os.read(self._fd, 1 << 16):
                searched = len(pending)  # what is pending holds no newline: search only the new bytes
                pending += chunk
                end = pending.find(b"\n", searched)
                while end >= 0:
                    put(bytes(pending[: end + 1]))
                    del pending[: end + 1]
                    end = pending.find(b"\n")
            if pending:
                put(bytes(pending))
            put(None)
        except OSError as exc:  # stdin gone under the thread: treated as EOF
            log.debug("stdin: %s", exc)
            with contextlib.suppress(RuntimeError):
                put(None)
        except RuntimeError:  # the event loop is closed (the server has ended): nobody waits
            pass

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        if self._queue is None:
            self._queue = asyncio.Queue()
            reader = threading.Thread(
                target=self._read, args=(asyncio.get_running_loop(), self._queue), name="stdin", daemon=True
            )
            reader.start()
        line = await self._queue.get()
        if line is None:
            self._queue.put_nowait(None)  # EOF stays EOF
            raise StopAsyncIteration
        return line


async def _serve(forwarder: StackForwarder) -> None:
    server = build_server(forwarder)
    try:
        stdin = cast("anyio.AsyncFile[str]", StdinLines(sys.stdin.fileno()))  # read by iteration only
        async with stdio_server(stdin=stdin) as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await forwarder.aclose()


def serve(forwarder: StackForwarder) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin (or Ctrl-C)."""
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(_serve, forwarder)
