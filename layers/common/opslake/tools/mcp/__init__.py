"""MCP over ``POST /mcp``: every gateway tool as an MCP tool, the playbook entries as resources.

``protocol`` holds the JSON-RPC framing, versions and error table (``modern`` the 2026-07-28 era's
per-request envelope); ``registry`` the tools (one
:class:`ToolSpec` each: add a tool there); ``dispatch`` turns a call into the REST proxy event its
route answers and the answer into a ``CallToolResult``; ``server`` is the transport and methods.
Run time uses plain dicts only: the SDK's ``mcp``/``mcp_types`` are for tests and the CLI.
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "protocol": ("HANDSHAKE_VERSIONS", "LATEST_VERSION", "MODERN_VERSIONS", "RpcError"),
        "modern": ("check_envelope",),
        "registry": ("BY_NAME", "TOOLS", "ToolSpec"),
        "dispatch": ("call_event", "synthesize", "tool_result"),
        "server": ("McpRefusalError", "McpServer", "method_not_allowed"),
    },
)
