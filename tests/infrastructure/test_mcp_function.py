"""McpFunction runs every MCP tool's handler in its own process (opslake.tools.mcp.registry): each
tool's route must be served by the function the registry names, whose handler file ships in
McpFunction's package and whose environment McpFunction has too, so a tool called over MCP reads
the same settings as over REST. (Its IAM is checked in test_iam.py, its API key in test_api_auth.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from opslake.tools.mcp.registry import TOOLS, ToolSpec

pytestmark = pytest.mark.infrastructure


def _function_of(tool: ToolSpec) -> str:
    # The naming test_iam.py's union relies on too: module "tables" -> TablesFunction(Role).
    return f"{tool.module.capitalize()}Function"


def _routes(function: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (event["Properties"]["Method"].upper(), event["Properties"]["Path"])
        for event in function.get("Events", {}).values()
        if event["Type"] == "Api"
    }


@pytest.mark.parametrize("tool", TOOLS, ids=[tool.name for tool in TOOLS])
def test_each_tools_route_is_served_by_the_function_whose_handler_mcp_loads(
    functions: dict[str, dict[str, Any]], tool: ToolSpec
) -> None:
    function = functions[_function_of(tool)]
    assert (tool.method, tool.route) in _routes(function)
    assert function["Handler"] == f"{tool.module}.handler"
    # mcp_http.py loads functions/gateway/<module>.py next to itself: the file must be in its package.
    assert function["CodeUri"] == functions["McpFunction"]["CodeUri"]


@pytest.mark.parametrize("tool", TOOLS, ids=[tool.name for tool in TOOLS])
def test_mcp_function_has_each_tools_environment(
    functions: dict[str, dict[str, Any]], tool: ToolSpec
) -> None:
    wanted = functions[_function_of(tool)].get("Environment", {}).get("Variables", {})
    have = functions["McpFunction"].get("Environment", {}).get("Variables", {})
    assert {name: have.get(name) for name in wanted} == wanted


def test_mcp_routes_are_keyed_and_the_function_has_its_log_group(
    functions: dict[str, dict[str, Any]], resources: dict[str, Any]
) -> None:
    function = functions["McpFunction"]
    assert _routes(function) == {("POST", "/mcp"), ("GET", "/mcp"), ("DELETE", "/mcp")}
    assert all(
        e["Properties"].get("Auth", {}).get("ApiKeyRequired", True) for e in function["Events"].values()
    )
    assert function["Handler"] == "mcp_http.handler"
    log_group = resources["McpFunctionLogGroup"]["Properties"]
    assert log_group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${McpFunction}"}
    # A tool call runs inside this function: it needs the longest any tool route is given.
    assert function["Timeout"] >= max(functions[_function_of(tool)]["Timeout"] for tool in TOOLS)
    assert function["MemorySize"] >= max(functions[_function_of(tool)]["MemorySize"] for tool in TOOLS)
