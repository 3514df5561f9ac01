"""POST /mcp driven by the official MCP Python SDK client (Streamable HTTP) against the local stack:
connect in the SDK's default ``auto`` mode (``server/discover``: the 2026-07-28 era) and in ``legacy``
mode (``initialize``: the handshake era), list the tools, call each tool once succeeding and once
failing, read a playbook entry as a resource; then the lake: every MCP call is one op record with the same
``endpoint``, ``success`` and ``error_type`` as the same call over REST, ``source`` "mcp" against
"gateway". A wrong API key is API Gateway's 403.

One stack, one drain: the MCP calls and the REST calls carry their own ``x-opslake-session-id``, so
the lake query picks each side's records.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.types import Implementation
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from opslake.models.tools import PlaybooksQuery, SqlRequest
from opslake.tools.mcp.registry import BY_NAME, TOOLS
from opslake.tools.mcp.session import ClientInfo, client_of_session
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack
from tests.fake_llm import FakeLlm
from tests.integration.conftest import local_stack

pytestmark = pytest.mark.integration

Local = tuple[LocalStack, httpx.Client, Drainer]
MCP_SESSION = "mcp-client-test"
REST_SESSION = "rest-client-test"


def _entry(entry_id: str, trigger: str, status: str = "active", **extra: Any) -> dict[str, Any]:
    return {
        "entry_id": entry_id, "trigger": trigger, "action": "filter workers on state first", "kind": "do",
        "confidence": 0.8, "domain": "staffing", "scope": "project", "status": status, "endpoint": "/sql",
        "evidence_op_ids": [f"op-{i}" for i in range(4)], "created_at": "2026-11-20T10:00:00Z",
        "holdout_share": 0.0, **extra,  # outside any holdout experiment: every key reads it
    }  # fmt: skip


SNAPSHOT = {
    "generated_at": "2026-11-21T10:00:00Z",
    "entries": [
        _entry("pb-state", "before querying workers by place"),
        _entry("pb-dt", "before querying ops"),
        _entry("pb-old", "guess the city", status="retired", retired_at="2026-11-21T09:00:00Z"),
    ],
}

#: (tool, arguments, succeeds): each tool once succeeding and once failing (the registry's every tool:
#: a test below checks). ``tables`` and ``model`` take no arguments (``additionalProperties: false``):
#: one sent is refused by the MCP server before the tool (:data:`REFUSED_BY_MCP`, a record at /mcp;
#: their REST routes ignore a query string, so there is no REST call to compare with).
CALLS: list[tuple[str, dict[str, Any], bool]] = [
    ("sql", {"sql": "SELECT count(*) AS n FROM workers WHERE state = 'MI'", "limit": 5}, True),
    ("sql", {"sql": "DROP TABLE workers"}, False),
    ("match", {"role": "welder", "city": "Detroit", "need": "tig welding", "count": 3}, True),
    ("match", {"role": "welder", "need": "tig welding"}, False),  # no city or state
    ("search", {"q": "tig welder detroit", "limit": 3}, True),
    ("search", {"q": "   "}, False),
    ("ask", {"question": "how many welders are in Detroit?", "tables": ["workers"]}, True),
    ("ask", {"question": ""}, False),
    ("log", {"operation": "query workers", "approach": "filter on state first", "result": "lesson"}, True),
    ("log", {"operation": "query workers", "approach": "x", "result": "maybe"}, False),
    ("tables", {}, True),
    ("tables", {"ignored": 1}, False),
    ("table", {"name": "workers"}, True),
    ("table", {"name": "secrets"}, False),
    ("worker", {"id": "W00001"}, True),
    ("worker", {"id": "W1"}, False),
    ("playbooks", {"endpoint": "/sql", "limit": 5}, True),
    ("playbooks", {"limit": 99}, False),
    ("model", {}, True),
    ("model", {"ignored": True}, False),
]
#: The calls refused before any tool: ``isError`` ``mcp_invalid_params`` naming the argument.
REFUSED_BY_MCP = {("tables", "ignored"), ("model", "ignored")}


@pytest.fixture(scope="module")
def local() -> Iterator[Local]:
    """conftest's local stack with a model for the ask tool (without one /ask is a 503 by design): a
    fake that answers every question "the catalog cannot say" (one model call, a 200)."""
    with FakeLlm() as llm:
        llm.default = FakeLlm.answer({"answerable": False, "sql": "", "reason": "the catalog cannot say"})
        with local_stack(OPSLAKE_LLM_BASE_URL=llm.base_url, OPSLAKE_LLM_MODEL=llm.model) as parts:
            yield parts


@pytest.fixture(scope="module")
def api(local: Local) -> tuple[str, str, Local]:
    stack, client, _ = local
    assert stack.api_key is not None
    stack.client("s3").put_object(
        Bucket=stack.bucket, Key="playbooks/current.json", Body=json.dumps(SNAPSHOT).encode()
    )
    return f"{client.base_url}".rstrip("/") + "/mcp", stack.api_key.value, local


def _client(url: str, key: str, mode: str, session: str = MCP_SESSION) -> Client:
    headers = {"x-api-key": key, "x-opslake-session-id": session}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=mode)  # type: ignore[arg-type]


def _rest(client: httpx.Client, key: str, tool: str, arguments: dict[str, Any]) -> httpx.Response:
    """The same call over REST, as an agent without MCP would make it."""
    spec = BY_NAME[tool]
    headers = {"x-api-key": key, "x-opslake-session-id": REST_SESSION}
    path = spec.route
    for name in spec.path_parameters:
        path = path.replace("{" + name + "}", str(arguments[name]))
    if spec.arguments_as == "body":
        return client.post(path, json=arguments, headers=headers)
    params = {k: str(v) for k, v in arguments.items()} if spec.arguments_as == "query" else arguments
    return client.request(
        spec.method, path, params=None if spec.arguments_as == "path" else params, headers=headers
    )


def test_the_sdk_client_calls_every_tool_and_the_lake_records_them_as_rest_calls(
    api: tuple[str, str, Local],
) -> None:
    url, key, (_, client, drainer) = api
    results: list[Any] = []
    outcome: dict[str, Any] = {}

    async def session() -> None:
        async with _client(url, key, "auto") as mcp:
            outcome["version"] = mcp.session.protocol_version
            outcome["server"] = mcp.session.server_info
            listed = await mcp.list_tools()
            outcome["tools"] = {tool.name: tool for tool in listed.tools}
            for name, arguments, _ in CALLS:
                results.append(await mcp.call_tool(name, arguments))
            outcome["resources"] = await mcp.list_resources()
            outcome["read"] = await mcp.read_resource("opslake://playbooks/pb-state")
            try:
                await mcp.call_tool("nope", {})
            except Exception as exc:  # the SDK raises MCPError for a JSON-RPC error
                outcome["unknown"] = exc

    anyio.run(session)

    # auto mode opens with server/discover: opslake serves the 2026-07-28 era (no handshake)
    assert outcome["version"] == LATEST_MODERN_VERSION
    assert outcome["server"].name == "opslake"
    tools = outcome["tools"]
    assert list(tools) == [tool.name for tool in TOOLS]
    assert {name for name, _, _ in CALLS} == set(tools)
    assert tools["sql"].input_schema == SqlRequest.model_json_schema()
    assert tools["playbooks"].input_schema == PlaybooksQuery.model_json_schema()

    # every call: a success is the REST answer; a failure is isError with the REST message
    for (name, arguments, succeeds), result in zip(CALLS, results, strict=True):
        if (name, next(iter(arguments), "")) in REFUSED_BY_MCP:
            assert result.is_error is True and "'ignored'" in result.content[0].text, result
            assert result.structured_content["error"] == "mcp_invalid_params"
            continue
        rest = _rest(client, key, name, arguments)
        assert (rest.status_code < 400) is succeeds, (name, arguments, rest.text)
        assert result.is_error is (not succeeds), (name, arguments, result)
        if succeeds:
            assert result.structured_content is not None and set(result.structured_content) == set(
                rest.json()
            )
        else:
            assert result.content[0].text == rest.json()["message"], name
            assert result.structured_content == rest.json()

    # playbook entries as resources: the active ones listed, one read (a GET /playbooks)
    uris = sorted(str(r.uri) for r in outcome["resources"].resources)
    assert uris == ["opslake://playbooks/pb-dt", "opslake://playbooks/pb-state"]
    (content,) = outcome["read"].contents
    assert json.loads(content.text)["action"] == "filter workers on state first"
    assert _rest_read(client, key).status_code == 200  # the same read over REST
    assert "unknown tool: nope" in str(outcome["unknown"])

    # the lake: one record per call, the same endpoint/success/error_type as REST, source mcp
    assert drainer.drain().failed == 0
    lake = client.post(
        "/sql",
        json={
            "sql": "SELECT session_id, source, endpoint, success, error_type, attributes FROM ops "
            f"WHERE session_id IN ('{MCP_SESSION}', '{REST_SESSION}') AND source IN ('mcp', 'gateway')",
            "limit": 1000,
        },
        headers={"x-api-key": key},
    )
    assert lake.status_code == 200, lake.text
    rows = lake.json()["rows"]
    mcp_rows = [r for r in rows if r[0] == MCP_SESSION]
    rest_rows = [r for r in rows if r[0] == REST_SESSION]
    assert {r[1] for r in mcp_rows} == {"mcp"} and {r[1] for r in rest_rows} == {"gateway"}
    shape = Counter((r[2], r[3], r[4]) for r in mcp_rows)
    unknown = ("/mcp", False, "mcp_unknown_tool")
    assert shape.pop(unknown) == 1  # the call that reached no tool: one record at /mcp
    assert shape.pop(("/mcp", False, "mcp_invalid_params")) == len(REFUSED_BY_MCP)  # arguments refused
    assert shape == Counter((r[2], r[3], r[4]) for r in rest_rows)
    # + the resource read; list and initialize leave none
    assert sum(shape.values()) == len(CALLS) - len(REFUSED_BY_MCP) + 1
    read = [r for r in mcp_rows if r[2] == "/playbooks" and dict(r[5]).get("entry_ids") == "pb-state"]
    assert len(read) == 1  # the reader measurement sees who read which entry


def _rest_read(client: httpx.Client, key: str) -> httpx.Response:
    headers = {"x-api-key": key, "x-opslake-session-id": REST_SESSION}
    return client.get("/playbooks", params={"entry_id": "pb-state", "limit": "1"}, headers=headers)


def test_legacy_mode_speaks_the_handshake_era(api: tuple[str, str, Local]) -> None:
    url, key, _ = api
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with _client(url, key, "legacy", session="mcp-legacy") as mcp:
            seen["version"] = mcp.session.protocol_version
            seen["result"] = await mcp.call_tool("worker", {"id": "W00002"})

    anyio.run(session)
    assert seen["version"] == LATEST_HANDSHAKE_VERSION
    assert seen["result"].is_error is False
    assert seen["result"].structured_content["worker"]["worker_id"] == "W00002"


def test_an_sdk_clients_calls_carry_its_mcp_session_and_name(api: tuple[str, str, Local]) -> None:
    """Two agents sharing a key, with no x-opslake-session-id: each handshake gets a session id
    carrying the client's name, the SDK sends it back (and its GET stream and DELETE are answered
    405, which it takes in stride), and each call's record carries both."""
    url, key, (_, client, drainer) = api

    async def session(name: str) -> None:
        transport = streamable_http_client(
            url, http_client=create_mcp_http_client(headers={"x-api-key": key})
        )
        agent = Client(transport, mode="legacy", client_info=Implementation(name=name, version="0.3.1"))  # type: ignore[arg-type]
        async with agent as mcp:
            await mcp.call_tool("worker", {"id": "W00002"})

    for name in ("shop-agent", "billing-agent"):
        anyio.run(session, name)
    assert drainer.drain().failed == 0
    lake = client.post(
        "/sql",
        json={
            "sql": "SELECT session_id, element_at(attributes, 'mcp.client.name'), "
            "element_at(attributes, 'mcp.client.version') FROM ops WHERE source = 'mcp' "
            "AND element_at(attributes, 'mcp.client.name') IN ('shop-agent', 'billing-agent')",
            "limit": 10,
        },
        headers={"x-api-key": key},
    )
    assert lake.status_code == 200, lake.text
    rows = sorted((tuple(r) for r in lake.json()["rows"]), key=lambda r: r[1])
    assert [(r[1], r[2]) for r in rows] == [("billing-agent", "0.3.1"), ("shop-agent", "0.3.1")]
    assert len({r[0] for r in rows}) == 2 and all(r[0].startswith("opslake-mcp/") for r in rows)
    assert all(client_of_session(r[0]) == ClientInfo(r[1], r[2]) for r in rows)  # the id the SDK sent back


def test_get_and_delete_are_405_and_a_wrong_key_is_403(api: tuple[str, str, Local]) -> None:
    url, key, (_, client, _) = api
    for method in ("GET", "DELETE"):
        answer = client.request(method, "/mcp", headers={"x-api-key": key, "accept": "text/event-stream"})
        assert (answer.status_code, answer.headers["allow"]) == (405, "POST"), answer.text
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert client.post("/mcp", json=ping, headers={"x-api-key": "not-the-key"}).status_code == 403
    assert client.post("/mcp", json=ping).status_code == 403

    async def session() -> None:
        async with _client(url, "not-the-key", "legacy") as mcp:
            await mcp.list_tools()

    with pytest.raises(Exception):  # noqa: B017  (the SDK's error type for an HTTP 403 varies by mode)
        anyio.run(session)


def test_a_tool_whose_service_fails_is_an_error_result_and_its_record_is_not_silent(
    api: tuple[str, str, Local],
) -> None:
    """``log`` while SQS refuses its records (the queue's MaximumMessageSize lowered below the
    record's size: every send fails, on the real handlers): over MCP the agent gets ``isError`` with
    POST /log's 503 message and body plus ``retry_after_s`` (its ``Retry-After``), as the REST call
    does; neither side's records reach the lake (the middleware logs each whole and counts
    ObservationsLost: tests/unit/tools/test_mcp_protocol.py asserts that part in process)."""
    url, key, (stack, client, drainer) = api
    sqs = stack.client("sqs")
    queue_url = stack.queue_url("OpsQueue")
    saved = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["MaximumMessageSize"])["Attributes"]
    entry = {"operation": "query workers", "approach": "while SQS is down " + "x" * 1500, "result": "failure"}
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with _client(url, key, "auto", session="mcp-sqs-down") as mcp:
            seen["result"] = await mcp.call_tool("log", entry)

    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"MaximumMessageSize": "1024"})
    try:
        anyio.run(session)
        rest = client.post(
            "/log", json=entry, headers={"x-api-key": key, "x-opslake-session-id": "rest-sqs-down"}
        )
    finally:
        sqs.set_queue_attributes(QueueUrl=queue_url, Attributes=saved)
    assert rest.status_code == 503, rest.text
    result = seen["result"]
    assert result.is_error is True
    assert result.content[0].text == rest.json()["message"]
    assert result.structured_content == {**rest.json(), "retry_after_s": int(rest.headers["retry-after"])}

    assert drainer.drain().failed == 0
    lake = client.post(
        "/sql",
        json={"sql": "SELECT count(*) FROM ops WHERE session_id IN ('mcp-sqs-down', 'rest-sqs-down')"},
        headers={"x-api-key": key},
    )
    assert lake.status_code == 200, lake.text
    assert lake.json()["rows"] == [[0]]  # lost, not half-written: logged and counted instead
