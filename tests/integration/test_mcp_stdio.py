"""``opslake mcp`` driven by the official MCP SDK's stdio client (``mcp.Client`` over
``StdioServerParameters``, modes auto and legacy) against the local stack's ``POST /mcp``: the stack's
tools listed, a call that succeeds and one that fails (``isError`` with the REST route's message), a
playbook entry read as a resource, the op records with ``source=mcp`` and one session id per process,
and clear MCP errors when no stack answers or the key is refused."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from opslake_local.drain import Drainer
from opslake_local.mcp_forward import STACK_UNAVAILABLE
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration

Local = tuple[LocalStack, httpx.Client, Drainer]
OPSLAKE = str(Path(sys.executable).with_name("opslake"))
MODES = ["auto", "legacy"]
ENTRY_ID = "pb-stdio-welding"
SNAPSHOT = {
    "generated_at": "2026-11-21T10:00:00Z",
    "entries": [
        {
            "entry_id": ENTRY_ID, "trigger": "stainless pipe jobs", "action": "ask /match for tig welding",
            "kind": "do", "confidence": 0.8, "domain": "staffing", "scope": "project", "status": "active",
            "endpoint": "/match", "evidence_op_ids": [f"op-{i}" for i in range(4)],
            "created_at": "2026-11-20T10:00:00Z", "holdout_share": 0.0,  # served to every key
        }
    ],
}  # fmt: skip
BAD_SQL = "DROP TABLE ops"


@pytest.fixture(scope="module")
def stack(local: Local) -> Iterator[tuple[str, str, Local]]:
    """(API base URL, API key, the local fixture) with one active playbook entry in the snapshot."""
    local_stack, client, _ = local
    assert local_stack.api_key is not None
    local_stack.client("s3").put_object(
        Bucket=local_stack.bucket, Key="playbooks/current.json", Body=json.dumps(SNAPSHOT).encode()
    )
    yield str(client.base_url).rstrip("/"), local_stack.api_key.value, local


@asynccontextmanager
async def connected(args: list[str], mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's stdio client connected to ``opslake <args>`` (a fresh process)."""
    async with Client(StdioServerParameters(command=OPSLAKE, args=args), mode=mode) as client:
        yield client


def _mcp_records(client: httpx.Client, key: str) -> list[list[Any]]:
    answer = client.post(
        "/sql",
        json={
            "sql": "SELECT session_id, endpoint, error_type, success, source FROM ops WHERE source = 'mcp'",
            "limit": 1000,
        },
        headers={"x-api-key": key},
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["rows"])


@pytest.mark.parametrize("mode", MODES)
def test_tools_are_the_stacks_and_calls_pass_through_as_the_stack_answers(
    stack: tuple[str, str, Local], mode: str
) -> None:
    url, key, (_, client, _) = stack
    rest_error = client.post("/sql", json={"sql": BAD_SQL}, headers={"x-api-key": key})
    assert rest_error.status_code == 400, rest_error.text

    async def session() -> tuple[Any, Any, Any, Any]:
        async with connected(["mcp", "--url", url, "--api-key", key], mode) as mcp:
            stack_tools = httpx.post(
                f"{url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={"x-api-key": key, "mcp-protocol-version": "2025-11-25"},
            ).json()["result"]["tools"]
            return (
                stack_tools,
                await mcp.list_tools(),
                await mcp.call_tool("sql", {"sql": "SELECT count(*) AS n FROM ops"}),
                await mcp.call_tool("sql", {"sql": BAD_SQL}),
            )

    stack_tools, listed, ok, failed = anyio.run(session)
    assert {"sql", "match", "search", "tables", "playbooks"} <= {t.name for t in listed.tools}
    # the stack is the only source of the schemas: what stdio lists is what /mcp lists
    assert {t.name: t.input_schema for t in listed.tools} == {
        t["name"]: t["inputSchema"] for t in stack_tools
    }
    assert ok.is_error is False
    assert ok.structured_content is not None and ok.structured_content["rows"][0][0] >= 0
    assert failed.is_error is True
    assert failed.content[0].text == rest_error.json()["message"]  # the REST route's words
    assert failed.structured_content == rest_error.json()


@pytest.mark.parametrize("mode", MODES)
def test_a_playbook_entry_is_a_resource(stack: tuple[str, str, Local], mode: str) -> None:
    url, key, _ = stack

    async def session() -> tuple[Any, Any, Any]:
        async with connected(["mcp", "--url", url, "--api-key", key], mode) as mcp:
            listed = await mcp.list_resources()
            uri = next(r.uri for r in listed.resources if str(r.uri).endswith(ENTRY_ID))
            return listed, await mcp.read_resource(uri), await mcp.list_resource_templates()

    listed, read, templates = anyio.run(session)
    assert any(t.uri_template.startswith("opslake://playbooks") for t in templates.resource_templates)
    assert f"opslake://playbooks/{ENTRY_ID}" in {str(r.uri) for r in listed.resources}
    entry = json.loads(read.contents[0].text)
    assert entry["entry_id"] == ENTRY_ID and entry["action"] == "ask /match for tig welding"


def test_tool_calls_are_op_records_with_source_mcp_and_one_session_per_process(
    stack: tuple[str, str, Local], tmp_path: Path
) -> None:
    url, key, (_, client, drainer) = stack
    drainer.drain()
    before = {row[0] for row in _mcp_records(client, key)}
    state = tmp_path / "local.json"  # --local finds the stack through the state file `local up` writes
    state.write_text(json.dumps({"api_url": url, "api_key": key}))

    async def session() -> None:
        async with connected(["--state", str(state), "mcp", "--local"]) as mcp:
            assert (await mcp.call_tool("sql", {"sql": "SELECT 1 AS n FROM ops LIMIT 1"})).is_error is False
            assert (await mcp.call_tool("sql", {"sql": BAD_SQL})).is_error is True

    anyio.run(session)
    rest = client.post("/sql", json={"sql": BAD_SQL}, headers={"x-api-key": key})
    assert rest.status_code == 400
    drainer.drain()
    new = [row for row in _mcp_records(client, key) if row[0] not in before]
    assert len({row[0] for row in new}) == 1  # one x-opslake-session-id for the whole process
    assert sorted((row[1], row[2] or "", row[3]) for row in new) == [
        ("/sql", "", True),
        ("/sql", "sql_rejected", False),
    ]
    gateway = client.post(
        "/sql",
        json={
            "sql": "SELECT endpoint, error_type FROM ops WHERE source = 'gateway' AND error_type = 'sql_rejected'"
        },
        headers={"x-api-key": key},
    ).json()["rows"]
    assert ["/sql", "sql_rejected"] in gateway  # the REST call's record: same endpoint and error_type


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("mode", MODES)
def test_no_stack_answering_is_a_clear_mcp_error(mode: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"

    async def session(args: list[str]) -> MCPError:
        async with connected(args, mode) as mcp:
            with pytest.raises(MCPError) as raised:
                await mcp.list_tools()
            return raised.value

    down = anyio.run(session, ["mcp", "--url", url, "--api-key", "k"])
    assert down.code == STACK_UNAVAILABLE
    assert down.message.startswith(f"no opslake stack answers at {url}/mcp") and "check --url" in down.message
    missing = anyio.run(session, ["--state", str(tmp_path / "none.json"), "mcp", "--local"])
    assert "no local opslake stack is running" in missing.message and "opslake local up" in missing.message


def test_a_wrong_key_is_a_clear_mcp_error(stack: tuple[str, str, Local]) -> None:
    url, _, _ = stack

    async def session() -> tuple[MCPError, MCPError]:
        async with connected(["mcp", "--url", url, "--api-key", "not-a-key-of-this-stack"]) as mcp:
            with pytest.raises(MCPError) as listing:
                await mcp.list_tools()
            with pytest.raises(MCPError) as calling:
                await mcp.call_tool("sql", {"sql": "SELECT 1"})
            return listing.value, calling.value

    for error in anyio.run(session):
        assert error.code == STACK_UNAVAILABLE
        assert "refused the API key" in error.message and "--api-key" in error.message
