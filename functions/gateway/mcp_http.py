"""POST /mcp: every gateway tool as an MCP tool (Streamable HTTP, stateless, JSON answers).

This resolver is not observed: each ``tools/call`` is answered by the tool's own observed resolver
(its handler module next to this one, imported on the tool's first call), which records it as it
records the REST call, with ``source`` "mcp" (see :mod:`opslake.tools.mcp`). GET and DELETE /mcp
answer 405: there is no SSE stream, and the session ``initialize`` issues is no server state (its
id carries the client's claimed name: :mod:`opslake.tools.mcp.session`), so there is none to end.

Named ``mcp_http``, not ``mcp``: the code directory is on ``sys.path`` wherever the handler runs (Lambda's
``/var/task``, the local stack's process), and a module ``mcp`` there would shadow the MCP SDK's package
(tests/infrastructure/test_handler_names.py).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake._lazy import import_file
from opslake.http.responses import create_resolver
from opslake.tools.app import create_tool_app
from opslake.tools.mcp.server import McpServer, method_not_allowed

HERE = Path(__file__).resolve().parent
_modules: dict[str, ModuleType] = {}
_lock = threading.Lock()


def load_tool_module(name: str) -> ModuleType:
    """``functions/gateway/<name>.py`` (its ``app`` is the tool's observed resolver), imported on first
    use and kept for the container. Loaded by path under a name derived from this module's own, not
    with ``import <name>``: the local stack loads each function's handler under a name of its own, so
    two stacks in one process (tests) or two functions never share a tool module and its settings."""
    with _lock:
        if name not in _modules:
            _modules[name] = import_file(f"{__name__}__{name}", HERE / f"{name}.py")
        return _modules[name]


app = create_resolver()
server = McpServer(load_tool_module, refusal_app=create_tool_app, key_names=runtime.key_names)


@app.post("/mcp")
def post_mcp() -> Response:
    return server.handle(app.current_event, app.lambda_context)


@app.get("/mcp")
def get_mcp() -> Response:
    return method_not_allowed()


@app.delete("/mcp")
def delete_mcp() -> Response:
    return method_not_allowed()


handler = runtime.api_handler(app)
