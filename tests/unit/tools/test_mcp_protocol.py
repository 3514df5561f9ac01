"""POST /mcp's protocol, checked against the official SDK's wire models (``mcp_types``, the pydantic
models the SDK itself parses with): the answers, the error table, the transport's 202/400/405, and
the dispatch of a tool call to the tool's own observed resolver (one op record, the REST one but for
``source``). The tools' input schemas are the REST routes' own models (the issue's equality test).

The tool modules here are small observed resolvers validating with the real models and raising the
real domain errors; tests/integration/test_mcp_client.py drives the real handlers with the SDK client.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any
from urllib.parse import quote

import boto3
import mcp_types as t
import pytest
from botocore.stub import Stubber
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from opslake.errors import (
    BadRequestError,
    NotFoundError,
    QueueError,
    ServiceUnavailableError,
    SqlRejectedError,
)
from opslake.http.bodies import parse_body, parse_query, request_body
from opslake.http.identity import KeyNameResolver
from opslake.http.responses import create_resolver
from opslake.ingest.observe import TRANSPORT_MARKER, Observer, observe, source_of, summarize
from opslake.models import QueuedOp
from opslake.models.playbooks import PlaybookSnapshot
from opslake.models.tools import LogRequest, NoArgs, PlaybooksQuery, SqlRequest, TableArgs, WorkerArgs
from opslake.tools.datasets import WORKER_ID, TableCatalog, validate_worker_id
from opslake.tools.mcp import protocol as rpc
from opslake.tools.mcp.dispatch import synthesize, tool_result
from opslake.tools.mcp.registry import BY_NAME, TOOLS, ToolSpec
from opslake.tools.mcp.server import McpServer
from opslake.tools.mcp.session import ClientInfo, client_of_session
from opslake.tools.snapshots import SnapshotUnavailableError

from ...conftest import api_event
from ...fakes import MemoryQueue

ROOT = Path(__file__).resolve().parents[3]
#: Every gateway tool an agent can call over MCP (helper B's /ask adds "ask").
EXPECTED_TOOLS = {"sql", "match", "search", "ask", "log", "tables", "table", "worker", "playbooks", "model"}
V = LATEST_HANDSHAKE_VERSION
SNAPSHOT = {
    "generated_at": "2026-11-21T10:00:00Z",
    "entries": [
        {
            "entry_id": f"pb-{i}", "trigger": f"before querying {table}", "action": "filter on dt first",
            "kind": "do", "confidence": 0.5 + i / 10, "domain": "sql", "scope": "project", "status": status,
            "endpoint": "/sql", "evidence_op_ids": [f"op-{j}" for j in range(4)], "holdout_share": 0.0,
            "created_at": "2026-11-20T10:00:00Z", **({"retired_at": "2026-11-21T09:00:00Z"} if status == "retired" else {}),
        }
        for i, (table, status) in enumerate((("workers", "active"), ("placements", "active"), ("ops", "retired")))
    ],
}  # fmt: skip


def _wire(model: type[BaseModel], value: dict[str, Any]) -> Any:
    """``value`` parsed by the SDK's model, and nothing in it the model does not know (its
    models ignore unknown keys: a dump of the parse must give the same JSON back)."""
    parsed = model.model_validate(value)
    assert parsed.model_dump(by_alias=True, mode="json", exclude_unset=True) == value
    return parsed


# ---- a tool world: observed resolvers shaped like functions/gateway's, on a memory queue --------------
class World:
    """Tool modules (``app`` = an observed resolver), a queue for their records, and the server."""

    def __init__(self) -> None:
        self.queue = MemoryQueue()
        self.loaded: list[str] = []
        self.snapshot: PlaybookSnapshot | None = PlaybookSnapshot.model_validate(SNAPSHOT)
        self.modules = {
            "sql": self._sql(),
            "worker": self._worker(),
            "playbooks": self._playbooks(),
            "tables": self._tables(),
            "log": self._log(),
        }
        #: set to make the playbook snapshot unreadable (S3 down), as the real route's cache raises
        self.snapshot_fails = False
        self.server = McpServer(self.load, refusal_app=self.observed, key_names=self.key_names)

    @staticmethod
    def key_names() -> KeyNameResolver:
        return KeyNameResolver(lambda key_id: "agent-7")

    def observed(self) -> Any:
        return observe(create_resolver(), Observer(lambda: self.queue, self.key_names))

    def load(self, name: str) -> ModuleType:
        self.loaded.append(name)
        module = self.modules.get(name)
        if module is None:
            raise RuntimeError(f"secret internal detail: no module {name}")
        return module

    def _sql(self) -> Any:
        app = self.observed()

        @app.post("/sql")
        def sql() -> dict[str, Any]:
            body = parse_body(SqlRequest, request_body(app.current_event))
            if body.sql.lower().startswith("drop"):
                raise SqlRejectedError("DROP statements are not allowed; only one read-only query")
            if body.sql == "busy":
                raise ServiceUnavailableError("the engine is busy; retry", retry_after_s=7)
            if body.sql.startswith("big "):  # "big <rows>": short strings, the JSON's worst case for size
                rows = [[f"w{i:05d}", "ca", "ok"] for i in range(int(body.sql.split()[1]))]
                summarize(app, f"{len(rows)} rows")
                return {"columns": [{"name": c, "type": "varchar"} for c in "abc"], "rows": rows}
            summarize(app, "1 rows")
            return {"columns": [{"name": "n", "type": "bigint"}], "rows": [[1]], "row_count": 1}

        return SimpleNamespace(app=app)

    def _worker(self) -> Any:
        app = self.observed()

        @app.get("/worker/<worker_id>")
        def worker(worker_id: str) -> dict[str, Any]:
            found = validate_worker_id((app.current_event.path_parameters or {}).get("id", worker_id))
            summarize(app, f"worker {found}")
            return {"worker": {"worker_id": found}}

        return SimpleNamespace(app=app)

    def _tables(self) -> Any:
        app = self.observed()
        # the real catalog on a stubbed Glue client: a test queues Glue's answers (or its errors)
        self.glue = boto3.client(
            "glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.glue_stub = Stubber(self.glue)
        self.glue_stub.activate()

        @app.get("/tables")
        def tables() -> dict[str, Any]:
            if self.glue_stub._queue:  # a test queued Glue's answer: the real catalog reads it
                listed = TableCatalog(self.glue, "lake", ["workers"]).tables()
                summarize(app, f"{len(listed)} tables")
                return {"tables": [info.model_dump() for info in listed.values()]}
            summarize(app, "1 tables")
            return {"tables": [{"name": "workers"}]}

        @app.get("/tables/<name>")
        def table(name: str) -> dict[str, Any]:
            if name != "workers":
                raise NotFoundError(f"no table {name!r}; available tables: workers")
            summarize(app, "table workers")
            return {"name": "workers"}

        return SimpleNamespace(app=app)

    def _playbooks(self) -> Any:
        app = self.observed()
        world = self

        @app.get("/playbooks")
        def playbooks() -> dict[str, Any]:
            query = parse_query(PlaybooksQuery, app.current_event.query_string_parameters)
            if world.snapshot_fails:  # the route's answer when its snapshot cannot be read
                raise ServiceUnavailableError(
                    "playbooks cannot be read right now; retry shortly", retry_after_s=5
                )
            assert world.snapshot is not None
            entries = world.snapshot.select(q=query.q, limit=len(world.snapshot.entries))
            if query.entry_id:
                entries = [e for e in entries if e.entry_id == query.entry_id]
            entries = entries[: query.limit]
            summarize(app, f"{len(entries)} entries", entry_ids=",".join(e.entry_id for e in entries))
            return {"entries": [e.served() for e in entries], "generated_at": "2026-11-21T10:00:00Z"}

        def get() -> PlaybookSnapshot | None:
            if world.snapshot_fails:
                raise SnapshotUnavailableError("s3://lake/playbooks/current.json could not be read: SlowDown")
            return world.snapshot

        return SimpleNamespace(app=app, snapshot=SimpleNamespace(get=get))

    def _log(self) -> Any:
        """POST /log's failure path: the agent's record goes to the same queue, and when it refuses the
        route answers 503 with Retry-After (functions/gateway/log.py)."""
        app = self.observed()

        @app.post("/log")
        def log() -> Any:
            body = parse_body(LogRequest, request_body(app.current_event))
            try:
                self.queue.send([json.dumps({"operation": body.operation})])
            except QueueError as exc:
                raise ServiceUnavailableError(
                    "the log entry was not recorded (the ops queue is unavailable); retry with the same op_id",
                    retry_after_s=5,
                ) from exc
            summarize(app, f"logged {body.result}")
            return {"op_id": "op-1"}

        return SimpleNamespace(app=app)

    def records(self) -> list[QueuedOp]:
        return [QueuedOp.model_validate_json(m) for m in self.queue.messages]

    # -- calls --
    def post(
        self, message: Any, *, headers: dict[str, str] | None = None, raw: str | None = None
    ) -> tuple[int, Any, dict[str, Any]]:
        event = api_event("POST", "/mcp", raw if raw is not None else json.dumps(message), key_id="key-123")
        event["headers"] = {"Content-Type": "application/json", **(headers or {})}
        event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
        app = create_resolver()

        @app.post("/mcp")
        def mcp() -> Any:
            return self.server.handle(app.current_event, None)

        answer = app.resolve(event, None)
        body = json.loads(answer["body"]) if answer.get("body") else None
        headers_out = {k.lower(): v[-1] for k, v in (answer.get("multiValueHeaders") or {}).items()}
        return answer["statusCode"], body, headers_out

    def request(self, method: str, params: Any = None, *, id_: Any = 1, **kw: Any) -> tuple[int, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            message["params"] = params
        status, body, _ = self.post(message, headers={"mcp-protocol-version": V, **kw.pop("headers", {})})
        return status, body

    def call(self, name: str, arguments: Any) -> dict[str, Any]:
        status, body = self.request("tools/call", {"name": name, "arguments": arguments})
        assert status == 200, body
        _wire(t.JSONRPCResponse, body)
        result: dict[str, Any] = body["result"]
        _wire(t.CallToolResult, result)
        return result

    def rest(self, tool: str, method: str, path: str, *, body: str | None = None, **event_parts: Any) -> Any:
        event = api_event(method, path, body, key_id="key-123")
        event.update(event_parts)
        if "pathParameters" in event_parts:
            event["resource"] = BY_NAME[tool].route
            event["requestContext"]["resourcePath"] = BY_NAME[tool].route
        return self.modules[tool].app.resolve(event, None)


@pytest.fixture
def world() -> World:
    return World()


# ---- the schemas: one source of truth ------------------------------------------------------------
def test_the_registry_offers_every_gateway_tool_once() -> None:
    assert {tool.name for tool in TOOLS} == EXPECTED_TOOLS
    assert len(TOOLS) == len(BY_NAME)
    routes = {(tool.method, tool.route) for tool in TOOLS}
    assert len(routes) == len(TOOLS)
    template = (ROOT / "template.yaml").read_text()
    for tool in TOOLS:
        assert (ROOT / "functions" / "gateway" / f"{tool.module}.py").is_file(), tool
        assert f"Path: {tool.route}\n" in template, f"{tool.route} is not a template route"


@pytest.mark.parametrize("tool", TOOLS, ids=[tool.name for tool in TOOLS])
def test_each_input_schema_is_the_rest_models_schema_without_refs(tool: ToolSpec) -> None:
    module, _, name = tool.input_model.partition(":")
    model = getattr(importlib.import_module(module), name)
    listed = tool.listed()
    assert listed["inputSchema"] == model.model_json_schema()
    assert "$ref" not in json.dumps(listed["inputSchema"]) and "$defs" not in listed["inputSchema"]
    assert listed["inputSchema"]["type"] == "object"
    _wire(t.Tool, listed)
    assert "outputSchema" not in listed  # the client would check structuredContent against it


def test_the_rest_routes_validate_with_the_registry_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler modules use the very classes the schemas come from (no second copy)."""
    gateway = _load_gateway(monkeypatch)
    assert gateway["sql"].SqlRequest is SqlRequest
    from opslake.models.tools import LogRequest

    assert gateway["log"].LogRequest is LogRequest
    assert gateway["playbooks"].PlaybooksQuery is PlaybooksQuery
    for tool in TOOLS:
        assert hasattr(gateway[tool.module], "app"), tool.module


@pytest.mark.parametrize("value", ["W00042", "W00001", "W1", "w00042", "W000421", "W00042\n", "", "X00042"])
def test_the_worker_tools_schema_agrees_with_the_routes_check(value: str) -> None:
    assert WorkerArgs.model_json_schema()["properties"]["id"]["pattern"] == WORKER_ID.pattern
    try:
        WorkerArgs(id=value)
        model_ok = True
    except ValidationError:
        model_ok = False
    try:
        validate_worker_id(value)
        route_ok = True
    except BadRequestError:
        route_ok = False
    assert model_ok == route_ok


def test_the_table_tools_schema_takes_any_name_the_route_answers() -> None:
    TableArgs(name="workers")
    with pytest.raises(ValidationError):
        TableArgs(name="")  # API Gateway never routes an empty path segment either


# ---- the handshake ------------------------------------------------------------------------------
@pytest.mark.parametrize("asked", [*HANDSHAKE_PROTOCOL_VERSIONS, "1999-01-01", "2026-07-28"])
def test_initialize_echoes_a_known_version_and_offers_tools_and_resources(world: World, asked: str) -> None:
    params = {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
    status, body, headers = world.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    assert status == 200 and headers["content-type"] == "application/json"
    # no state kept: the session id the answer issues carries the client's claimed name itself
    assert client_of_session(headers["mcp-session-id"]) == ClientInfo("test", "1")
    result = _wire(t.InitializeResult, body["result"])
    assert result.protocol_version == (asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else V)
    assert result.capabilities.tools is not None and result.capabilities.resources is not None
    assert result.server_info.name == "opslake"
    assert world.loaded == [] and world.queue.messages == []  # no tool module, no record


def test_ping_and_tools_list(world: World) -> None:
    status, body = world.request("ping")
    assert (status, body["result"]) == (200, {})
    status, body = world.request("tools/list")
    listed = _wire(t.ListToolsResult, body["result"])
    assert [tool.name for tool in listed.tools] == [tool.name for tool in TOOLS]
    assert world.loaded == [] and world.queue.messages == []  # schemas need no handler module


@pytest.mark.parametrize(
    ("message", "raw", "status", "code"),
    [
        (None, "{", 400, rpc.PARSE_ERROR),
        (None, "", 400, rpc.PARSE_ERROR),
        (None, "[" * 100 + "]" * 100, 400, rpc.PARSE_ERROR),  # deeper than bodies.MAX_JSON_DEPTH
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], None, 400, rpc.INVALID_REQUEST),
        ({"id": 1, "method": "ping"}, None, 400, rpc.INVALID_REQUEST),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, None, 400, rpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, None, 400, rpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1}, None, 400, rpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, 400, rpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None, 400, rpc.INVALID_REQUEST),
        ("ping", None, 400, rpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}, None, 200, rpc.METHOD_NOT_FOUND),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, None, 200, rpc.INVALID_PARAMS),
    ],
)
def test_the_error_table(world: World, message: Any, raw: str | None, status: int, code: int) -> None:
    got, body, headers = world.post(message, raw=raw, headers={"mcp-protocol-version": V})
    assert (got, body["error"]["code"]) == (status, code), body
    assert headers["content-type"] == "application/json"  # so the SDK client reads the error
    _wire(t.JSONRPCError, body)
    assert body["error"]["message"]
    expected_id = message.get("id") if isinstance(message, dict) else None
    assert body["id"] == (expected_id if code in (rpc.METHOD_NOT_FOUND, rpc.INVALID_PARAMS) else body["id"])


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "sql", "arguments": {"sql": "x"}}},
        {"jsonrpc": "2.0", "id": 5, "result": {}},  # a response: opslake sends no requests
        {"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "no"}},
    ],
)
def test_notifications_and_responses_are_accepted_with_202_and_no_body(world: World, message: Any) -> None:
    status, body, _ = world.post(message, headers={"mcp-protocol-version": V})
    assert (status, body) == (202, None)
    assert world.queue.messages == []  # a notification is not a call: nothing ran


def test_a_version_opslake_does_not_speak_is_a_400_naming_the_ones_it_does(world: World) -> None:
    """-32022 with data.supported = every version opslake speaks: a client that knows one retries."""
    for version in ("2027-01-01", "x"):
        status, body, _ = world.post(
            {"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers={"mcp-protocol-version": version}
        )
        assert status == 400
        error = _wire(t.JSONRPCError, body)
        assert error.id == 3 and error.error.code == t.UNSUPPORTED_PROTOCOL_VERSION
        assert body["error"]["data"] == {
            "supported": [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS],
            "requested": version,
        }


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Encoding": "gzip"}, 415),
    ],
)
def test_a_body_the_rest_routes_refuse_is_refused_the_same_way(
    world: World, headers: dict[str, str], status: int
) -> None:
    got, body, _ = world.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
    assert got == status
    assert body["error"]["code"] == rpc.INVALID_REQUEST
    assert body["error"]["data"]["error"] == "unsupported_media_type"


def test_get_and_delete_answer_405_allow_post(monkeypatch: pytest.MonkeyPatch) -> None:
    gateway = _load_gateway(monkeypatch)
    for method in ("GET", "DELETE"):
        answer = gateway["mcp"].app.resolve(api_event(method, "/mcp", None), None)
        assert answer["statusCode"] == 405
        assert answer["multiValueHeaders"]["Allow"] == ["POST"]
        assert "stateless" in json.loads(answer["body"])["message"]


def test_an_unexpected_failure_is_a_32603_without_internals(world: World) -> None:
    world.modules.pop("sql")  # the loader raises with internal detail
    status, body = world.request("tools/call", {"name": "sql", "arguments": {"sql": "SELECT 1"}}, id_="r-1")
    assert status == 500
    error = _wire(t.JSONRPCError, body)
    assert error.id == "r-1" and error.error.code == t.INTERNAL_ERROR
    assert "secret" not in json.dumps(body) and "Traceback" not in json.dumps(body)
    assert "failed unexpectedly" in body["error"]["message"]


# ---- tools/call: the REST call, with its op record ------------------------------------------------
def _same_but_source(rest: QueuedOp, mcp: QueuedOp) -> None:
    assert (rest.source, mcp.source) == ("gateway", "mcp")
    for field in (
        "endpoint",
        "success",
        "error_type",
        "error",
        "input_summary",
        "output_summary",
        "attributes",
    ):
        assert getattr(rest, field) == getattr(mcp, field), field
    assert rest.reporter_id == mcp.reporter_id == "agent-7"


@pytest.mark.parametrize(
    ("arguments", "ok"),
    [
        ({"sql": "SELECT 1", "limit": 5}, True),
        ({"sql": "DROP TABLE workers"}, False),
        ({"sql": ""}, False),
        ({"sql": "SELECT 1", "bogus": 1}, False),
        ({}, False),
        ({"sql": "busy"}, False),
    ],
)
def test_a_body_tool_call_is_the_rest_call_with_its_record(
    world: World, arguments: dict[str, Any], ok: bool
) -> None:
    rest = world.rest("sql", "POST", "/sql", body=json.dumps(arguments))
    result = world.call("sql", arguments)
    rest_body = json.loads(rest["body"])
    assert result["isError"] is (not ok)
    if ok:
        assert result["structuredContent"] == rest_body
        assert json.loads(result["content"][0]["text"]) == rest_body
    else:
        assert result["content"] == [{"type": "text", "text": rest_body["message"]}]  # the REST message
        assert {k: v for k, v in result["structuredContent"].items() if k != "retry_after_s"} == rest_body
    if arguments.get("sql") == "busy":
        assert result["structuredContent"]["retry_after_s"] == 7  # Retry-After, which MCP cannot carry
    rest_record, mcp_record = world.records()
    _same_but_source(rest_record, mcp_record)


@pytest.mark.parametrize("arguments", [{"id": "W00042"}, {"id": "W1"}, {"id": 42}, {"id": "W00042", "x": 1}])
def test_a_path_tool_call_is_the_rest_call_with_its_record(world: World, arguments: dict[str, Any]) -> None:
    value = arguments.get("id", "")
    value = value if isinstance(value, str) else json.dumps(value)
    rest = world.rest("worker", "GET", f"/worker/{value}", pathParameters={"id": value})
    result = world.call("worker", arguments)
    assert result["isError"] is (rest["statusCode"] >= 400)
    expected = json.loads(rest["body"])
    assert result["structuredContent"] == expected
    rest_record, mcp_record = world.records()
    _same_but_source(rest_record, mcp_record)
    assert mcp_record.endpoint == "/worker/{id}"


@pytest.mark.parametrize(
    "arguments", [{"q": "workers", "limit": 1}, {"limit": 0}, {"limit": "x"}, {"nope": 1}]
)
def test_a_query_tool_call_is_the_rest_call_with_its_record(world: World, arguments: dict[str, Any]) -> None:
    query = {k: v if isinstance(v, str) else json.dumps(v) for k, v in arguments.items()}
    rest = world.rest("playbooks", "GET", "/playbooks", queryStringParameters=query)
    result = world.call("playbooks", arguments)
    assert result["isError"] is (rest["statusCode"] >= 400)
    assert result["structuredContent"] == json.loads(rest["body"])
    rest_record, mcp_record = world.records()
    _same_but_source(rest_record, mcp_record)


def test_a_call_carries_the_agents_identity_and_headers_but_not_the_envelopes(world: World) -> None:
    outer = api_event("POST", "/mcp", '{"jsonrpc":"2.0"}', key_id="key-9")
    outer["headers"] = {
        "Content-Type": "application/json", "mcp-protocol-version": V, "x-opslake-session-id": "s-1",
        "If-None-Match": "*", "Content-Length": "17",
    }  # fmt: skip
    outer["multiValueHeaders"] = {k: [v] for k, v in outer["headers"].items()}
    event = synthesize(outer, method="GET", resource="/worker/{id}", path_parameters={"id": "W 1/2"})
    assert event["requestContext"][TRANSPORT_MARKER] == "mcp"
    assert event["requestContext"]["identity"]["apiKeyId"] == "key-9"
    assert event["requestContext"]["requestId"] == outer["requestContext"]["requestId"]
    assert event["requestContext"]["resourcePath"] == event["resource"] == "/worker/{id}"
    assert event["path"] == "/worker/W%201%2F2" and event["pathParameters"] == {"id": "W 1/2"}
    assert event["headers"] == {"x-opslake-session-id": "s-1"} and event["body"] is None
    assert outer["requestContext"].get(TRANSPORT_MARKER) is None  # the /mcp event is left alone


def test_a_client_cannot_claim_the_mcp_source(world: World) -> None:
    """The marker lives in requestContext, which API Gateway builds: a header, a query parameter or
    a body field saying "mcp" leaves a REST call's source "gateway"."""
    forged = {TRANSPORT_MARKER: "mcp", "x-opslake-transport": "mcp", "source": "mcp"}
    event = api_event("POST", "/sql", json.dumps({"sql": "SELECT 1", "source": "mcp"}), key_id="key-123")
    event["headers"] = {**(event.get("headers") or {}), **forged}
    event["queryStringParameters"] = forged
    world.modules["sql"].app.resolve(event, None)
    (record,) = world.records()
    assert record.source == "gateway"
    assert source_of(event) == "gateway"
    assert source_of({"requestContext": {TRANSPORT_MARKER: "mcp"}}) == "mcp"
    assert source_of({"requestContext": {TRANSPORT_MARKER: "MCP"}}) == "gateway"


@pytest.mark.parametrize(
    ("params", "error_type"),
    [
        ({"name": "nope", "arguments": {}}, "mcp_unknown_tool"),
        ({"name": 7}, "mcp_unknown_tool"),
        ({"arguments": {}}, "mcp_unknown_tool"),
        ({"name": "sql", "arguments": ["SELECT 1"]}, "mcp_invalid_params"),
        ("sql", "mcp_invalid_params"),
    ],
)
def test_a_call_that_reaches_no_tool_is_a_32602_and_an_mcp_record(
    world: World, params: Any, error_type: str
) -> None:
    status, body = world.request("tools/call", params, id_=9)
    assert status == 200
    error = _wire(t.JSONRPCError, body)
    assert error.id == 9 and error.error.code == t.INVALID_PARAMS
    if error_type == "mcp_unknown_tool":
        assert "sql, match" in error.error.message  # names the tools
    (record,) = world.records()
    assert (record.endpoint, record.source, record.success, record.error_type) == (
        "/mcp",
        "mcp",
        False,
        error_type,
    )
    assert record.error == error.error.message
    assert json.dumps(params, separators=(",", ":")) in record.input_summary  # what the agent sent
    assert world.loaded == []


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("worker", {}),
        ("worker", {"id": ""}),
        ("worker", {"id": None}),
        ("table", {}),
        ("table", {"name": ""}),
    ],
)
def test_a_path_tool_call_without_its_parameter_is_an_error_not_another_route(
    world: World, name: str, arguments: dict[str, Any]
) -> None:
    """An empty path parameter made the path ``/tables/``, which the resolver answered as ``GET
    /tables`` (the table list, recorded as a successful ``/tables/{name}``), or ``/worker/``, a 404
    "no such route". No REST call is like it (API Gateway has no route for ``/worker/``): it is a
    call that reaches no tool, recorded as such, and a tool error the model can correct."""
    result = world.call(name, arguments)
    parameter = BY_NAME[name].path_parameters[0]
    assert result["isError"] is True
    assert f"{parameter!r}" in result["content"][0]["text"] and name in result["content"][0]["text"]
    assert result["structuredContent"]["error"] == "mcp_invalid_params"
    (record,) = world.records()
    assert (record.endpoint, record.source, record.error_type) == ("/mcp", "mcp", "mcp_invalid_params")
    assert record.error == result["content"][0]["text"]
    assert world.loaded == []


def _lambda_response_bytes(world: World, sql: str) -> tuple[int, Any]:
    """The size of the /mcp answer to a ``sql`` call as Lambda carries it (the proxy answer's JSON,
    whose ``body`` is the JSON-RPC text once more escaped), and the JSON-RPC body."""
    event = api_event("POST", "/mcp", json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sql", "arguments": {"sql": sql}}}
    ), key_id="key-123")  # fmt: skip
    event["headers"] = {"Content-Type": "application/json", "mcp-protocol-version": V}
    app = create_resolver()

    @app.post("/mcp")
    def mcp() -> Any:
        return world.server.handle(app.current_event, None)

    answer = app.resolve(event, None)
    return len(json.dumps(answer)), json.loads(answer["body"])


#: Lambda refuses a response payload over 6 MB (API Gateway then answers the agent 502).
LAMBDA_RESPONSE_MAX = 6 * 1024 * 1024


def test_a_large_answer_the_rest_route_sends_fits_lambdas_limit_as_text_alone(world: World) -> None:
    """A REST answer well inside /sql's own 5 MB budget doubled (text and structuredContent, the
    text escaped twice) past Lambda's 6 MB: the agent got API Gateway's 502 for a query REST answers."""
    rest = world.rest("sql", "POST", "/sql", body=json.dumps({"sql": "big 100000"}))
    assert 2_000_000 < len(rest["body"]) < 2_500_000  # within the REST budget (sql.MAX_ANSWER_BYTES)
    size, body = _lambda_response_bytes(world, "big 100000")
    assert size <= LAMBDA_RESPONSE_MAX
    result = _wire(t.CallToolResult, body["result"])
    assert result.is_error is False and result.structured_content is None  # optional without outputSchema
    assert json.loads(body["result"]["content"][0]["text"]) == json.loads(rest["body"])


def test_an_answer_too_large_for_mcp_is_an_error_saying_how_to_ask_for_less(world: World) -> None:
    from opslake.tools.sql import MAX_ANSWER_BYTES, answer_bytes

    rest = world.rest("sql", "POST", "/sql", body=json.dumps({"sql": "big 180000"}))
    assert answer_bytes(json.loads(rest["body"])) <= MAX_ANSWER_BYTES  # REST sends it
    size, body = _lambda_response_bytes(world, "big 180000")
    assert size <= LAMBDA_RESPONSE_MAX
    result = _wire(t.CallToolResult, body["result"])
    assert result.is_error is True
    assert body["result"]["structuredContent"]["error"] == "mcp_answer_too_large"
    assert "limit" in body["result"]["content"][0]["text"]
    assert body["result"]["content"][0]["text"] == body["result"]["structuredContent"]["message"]


def test_a_small_answer_keeps_text_and_structured_content(world: World) -> None:
    _, body = _lambda_response_bytes(world, "big 10")
    assert body["result"]["structuredContent"]["rows"][9] == ["w00009", "ca", "ok"]
    assert json.loads(body["result"]["content"][0]["text"]) == body["result"]["structuredContent"]


# ---- playbook entries as resources -----------------------------------------------------------------
def test_resources_list_names_each_active_entry_without_a_record(world: World) -> None:
    status, body = world.request("resources/list")
    listed = _wire(t.ListResourcesResult, body["result"])
    assert [str(r.uri) for r in listed.resources] == ["opslake://playbooks/pb-1", "opslake://playbooks/pb-0"]
    assert all(r.mime_type == "application/json" for r in listed.resources)
    assert "filter on dt first" not in json.dumps(body)  # the advice is read (and recorded), not listed
    assert world.queue.messages == []
    world.snapshot = None
    status, body = world.request("resources/list")
    assert body["result"] == {"resources": []}
    status, body = world.request("resources/templates/list")
    assert status == 200
    _wire(t.ListResourceTemplatesResult, body["result"])


def test_resources_list_leaves_out_the_entries_the_callers_key_is_held_out_from(world: World) -> None:
    """Holdout arms (issue 16) by the key's resolved name, the name its records carry ("agent-7"),
    not its id: a held-out entry must not be listed (nor read: GET /playbooks withholds it)."""
    from opslake.models.playbooks import arm_of

    base = SNAPSHOT["entries"][0]
    entries = [{**base, "entry_id": f"pb_{i:016x}", "holdout_share": 0.5} for i in range(20)]
    world.snapshot = PlaybookSnapshot.model_validate({**SNAPSHOT, "entries": entries})
    _, body = world.request("resources/list")
    listed = [r["name"] for r in body["result"]["resources"]]
    ranked = world.snapshot.select(limit=20)
    assert listed == [e.entry_id for e in ranked if arm_of("agent-7", e) == "treatment"]
    assert listed != [e.entry_id for e in ranked if arm_of("key-123", e) == "treatment"]
    assert 0 < len(listed) < 20 and world.queue.messages == []


def test_resources_read_is_a_playbooks_call_recording_the_entry_read(world: World) -> None:
    status, body = world.request("resources/read", {"uri": "opslake://playbooks/pb-1"})
    read = _wire(t.ReadResourceResult, body["result"])
    (content,) = read.contents
    entry = json.loads(content.text)
    assert entry["entry_id"] == "pb-1" and entry["action"] == "filter on dt first"
    (record,) = world.records()
    assert (record.endpoint, record.source) == ("/playbooks", "mcp")
    assert record.attributes is not None and record.attributes["entry_ids"] == "pb-1"
    status, body = world.request("resources/read", {"uri": "opslake://playbooks?q=workers"})
    assert status == 200
    read = _wire(t.ReadResourceResult, body["result"])
    assert [e["entry_id"] for e in json.loads(read.contents[0].text)["entries"]] == ["pb-0"]


@pytest.mark.parametrize(
    ("uri", "code"),
    [
        ("opslake://playbooks/pb-2", rpc.RESOURCE_NOT_FOUND),  # retired
        ("opslake://playbooks/nope", rpc.RESOURCE_NOT_FOUND),
        ("file:///etc/passwd", rpc.RESOURCE_NOT_FOUND),
        (7, rpc.INVALID_PARAMS),
    ],
)
def test_resources_read_of_what_is_not_there(world: World, uri: Any, code: int) -> None:
    status, body = world.request("resources/read", {"uri": uri})
    assert status == 200
    assert _wire(t.JSONRPCError, body).error.code == code


# ---- fault paths: a service behind a tool fails ----------------------------------------------------
def _captured(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[dict[str, Any]]]:
    """The metrics and error lines the observation middleware emits (names; records of the lost)."""
    from opslake.ingest import observe as observation

    counted: list[str] = []
    lost: list[dict[str, Any]] = []
    monkeypatch.setattr(observation.metrics, "add_metric", lambda name, **kw: counted.append(name))
    monkeypatch.setattr(
        observation.logger, "error", lambda message, **kw: lost.append({"message": message, **kw})
    )
    return counted, lost


@pytest.mark.parametrize("fault", ["glue throttling", "s3 snapshot", "sqs refuses the log"])
def test_a_failing_service_is_an_error_result_with_the_rest_body_never_silent(
    world: World, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Glue throttling past the client's retries (GET /tables: 503 Retry-After), the playbook snapshot
    unreadable (GET /playbooks: 503 Retry-After), SQS refusing (POST /log: 503 Retry-After): over MCP
    the call is ``isError`` with the REST message and body (plus ``retry_after_s``), and its op record
    is the REST one but for ``source``; when SQS itself refuses, both records are logged and counted
    as lost, as over REST."""
    counted, lost = _captured(monkeypatch)
    log = {"operation": "query workers", "approach": "filter on state", "result": "success"}
    if fault == "glue throttling":
        for _ in range(2):  # the REST call, then the MCP call
            world.glue_stub.add_client_error("get_table", "ThrottlingException", "Rate exceeded")
        rest, result = world.rest("tables", "GET", "/tables"), world.call("tables", {})
    elif fault == "s3 snapshot":
        world.snapshot_fails = True
        rest, result = world.rest("playbooks", "GET", "/playbooks"), world.call("playbooks", {})
    else:
        world.queue.fail = True
        rest, result = world.rest("log", "POST", "/log", body=json.dumps(log)), world.call("log", log)
    rest_body = json.loads(rest["body"])
    assert rest["statusCode"] >= 500
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": rest_body["message"]}]
    retry = rest["multiValueHeaders"].get("Retry-After")
    expected = {**rest_body, "retry_after_s": int(retry[0])} if retry else rest_body
    assert result["structuredContent"] == expected
    assert rest["statusCode"] == 503 and "retry_after_s" in expected  # transient: says when to retry
    if fault == "sqs refuses the log":
        assert world.records() == []  # the queue is down: neither record is silently dropped
        assert counted.count("ObservationsLost") == 2
        records = [line["op_record"] for line in lost if line["message"] == "op record not enqueued"]
        assert [r["source"] for r in records] == ["gateway", "mcp"]  # logged whole, recoverable
        assert {(r["endpoint"], r["success"], r["error_type"]) for r in records} == {
            ("/log", False, "service_unavailable")
        }
    else:
        rest_record, mcp_record = world.records()
        _same_but_source(rest_record, mcp_record)
        assert mcp_record.success is False and mcp_record.error_type == rest_body["error"]
        assert "ObservationsLost" not in counted


def test_resources_when_the_playbook_snapshot_cannot_be_read(world: World) -> None:
    """resources/list and resources/read while S3 fails: a JSON-RPC -32603 with GET /playbooks'
    message, the REST error body and ``retry_after_s`` in ``data``, at the route's 503 with its
    ``Retry-After`` (the SDK client surfaces a JSON-RPC error body at any status)."""
    world.snapshot_fails = True
    rest = world.rest("playbooks", "GET", "/playbooks")
    expected = {**json.loads(rest["body"]), "retry_after_s": int(rest["multiValueHeaders"]["Retry-After"][0])}
    world.queue.messages.clear()
    for method, params in (("resources/list", None), ("resources/read", {"uri": "opslake://playbooks/pb-1"})):
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": 4, "method": method}
        if params is not None:
            message["params"] = params
        status, body, headers = world.post(message, headers={"mcp-protocol-version": V})
        error = _wire(t.JSONRPCError, body)
        assert (status, headers.get("retry-after")) == (503, "5"), method
        assert error.error.code == t.INTERNAL_ERROR
        assert error.error.message == expected["message"]
        assert error.error.data == expected, method
    (record,) = world.records()  # the read is a GET /playbooks call, recorded; the list is not
    assert (record.endpoint, record.source, record.success) == ("/playbooks", "mcp", False)


@pytest.mark.parametrize("name", ["tables", "model"])
def test_a_tool_without_arguments_refuses_one_naming_it_as_its_schema_says(world: World, name: str) -> None:
    """tables and model advertise ``additionalProperties: false``; an argument sent to them is an
    ``isError`` naming it (recorded at /mcp as ``mcp_invalid_params``, the tool never runs), as the
    REST body routes refuse an unknown field."""
    schema = next(tool for tool in world.request("tools/list")[1]["result"]["tools"] if tool["name"] == name)
    assert schema["inputSchema"]["additionalProperties"] is False
    with pytest.raises(ValidationError):
        NoArgs.model_validate({"ignored": 1})
    result = world.call(name, {"ignored": 1, "also": True})
    assert result["isError"] is True
    assert "'also', 'ignored'" in result["content"][0]["text"]
    assert result["structuredContent"]["error"] == "mcp_invalid_params"
    assert result["structuredContent"]["detail"] == {"unknown_arguments": ["also", "ignored"]}
    assert name not in world.loaded
    (record,) = world.records()
    assert (record.endpoint, record.source, record.error_type) == ("/mcp", "mcp", "mcp_invalid_params")
    if name == "tables":  # no arguments, or an empty object: the tool runs
        assert world.call("tables", {})["isError"] is False
        assert world.call("tables", None)["isError"] is False


# ---- helpers ------------------------------------------------------------------------------------------
def _load_gateway(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """functions/gateway/mcp_http.py and, through its loader, every tool module (nothing connects:
    clients are built on first use)."""
    from opslake.config import get_settings

    for name, value in {
        "OPSLAKE_LAKE_BUCKET": "unit-lake",
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/unit-ops",
        "POWERTOOLS_METRICS_NAMESPACE": "opslake",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    path = ROOT / "functions" / "gateway" / "mcp_http.py"
    name = f"unit_mcp_handler_{datetime.now(UTC).timestamp():.0f}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    loaded = {tool.module: module.load_tool_module(tool.module) for tool in TOOLS}
    get_settings.cache_clear()
    return {"mcp": module, **loaded}


# ---- the 2026-07-28 era: an envelope per request, mirrored in headers -----------------------------
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}


def _modern(
    world: World, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    body = {**(params or {}), "_meta": ENVELOPE}
    sent = {"mcp-protocol-version": MODERN, "mcp-method": method}
    name = {"tools/call": "name", "resources/read": "uri"}.get(method)
    if name is not None:
        sent["mcp-name"] = str(body.get(name))
    status, answer, _ = world.post(
        {"jsonrpc": "2.0", "id": 11, "method": method, "params": body}, headers={**sent, **(headers or {})}
    )
    return status, answer


def test_modern_discover_lists_the_version_capabilities_and_server(world: World) -> None:
    from mcp_types import _v2026_07_28 as m

    status, body = _modern(world, "server/discover")
    assert status == 200
    result = _wire(m.DiscoverResult, body["result"])
    assert result.supported_versions == [MODERN] and result.result_type == "complete"
    assert result.capabilities.tools is not None and result.capabilities.resources is not None
    assert body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "opslake"
    status, body = _modern(world, "initialize")
    assert (status, body["error"]["code"]) == (404, t.METHOD_NOT_FOUND)  # no handshake in this era


def test_modern_tools_and_resources_are_the_same_calls_and_records(world: World) -> None:
    from mcp_types import _v2026_07_28 as m

    status, body = _modern(world, "tools/list")
    listed = _wire(m.ListToolsResult, body["result"])
    assert [tool.name for tool in listed.tools] == [tool.name for tool in TOOLS]
    assert listed.ttl_ms > 0  # the tool list changes only with a deploy
    status, body = _modern(world, "tools/call", {"name": "sql", "arguments": {"sql": "DROP TABLE x"}})
    result = _wire(m.CallToolResult, body["result"])
    assert result.is_error and result.result_type == "complete"
    status, body = _modern(world, "resources/list")
    assert len(_wire(m.ListResourcesResult, body["result"]).resources) == 2
    status, body = _modern(world, "resources/read", {"uri": "opslake://playbooks/pb-0"})
    _wire(m.ReadResourceResult, body["result"])
    status, body = _modern(world, "ping")
    _wire(m.EmptyResult, body["result"])
    sql, read = world.records()
    assert (sql.endpoint, sql.source, sql.error_type) == ("/sql", "mcp", "sql_rejected")
    assert (read.endpoint, read.source) == ("/playbooks", "mcp")
    status, body = _modern(world, "tools/call", {"name": "nope", "arguments": {}})
    assert (status, body["error"]["code"]) == (400, t.INVALID_PARAMS)


@pytest.mark.parametrize(
    ("method", "params", "headers", "status", "code"),
    [
        ("tools/list", None, {"mcp-method": "tools/call"}, 400, t.HEADER_MISMATCH),
        ("tools/call", {"name": "sql", "arguments": {}}, {"mcp-name": "match"}, 400, t.HEADER_MISMATCH),
        ("tools/call", {"name": "sql", "arguments": {}}, {"mcp-name": "=?base64?c3Fs?="}, 200, None),
        (
            "tools/call",
            {"name": "sql", "arguments": {}},
            {"mcp-name": "=?base64?c3F?="},
            400,
            t.HEADER_MISMATCH,
        ),
        (
            "resources/read",
            {"uri": "opslake://playbooks/pb-0"},
            {"mcp-name": "opslake://x"},
            400,
            t.HEADER_MISMATCH,
        ),
        ("prompts/list", None, {}, 404, t.METHOD_NOT_FOUND),
    ],
)
def test_modern_headers_must_mirror_the_body(
    world: World, method: str, params: Any, headers: dict[str, str], status: int, code: int | None
) -> None:
    got, body = _modern(world, method, params, headers=headers)
    assert got == status, body
    if code is None:
        _wire(t.JSONRPCResponse, body)
    else:
        assert _wire(t.JSONRPCError, body).error.code == code


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({}, t.INVALID_PARAMS),  # no envelope
        ({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}, t.INVALID_PARAMS),  # no capabilities
        (
            {"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}},
            t.HEADER_MISMATCH,  # the header says 2026-07-28
        ),
    ],
)
def test_modern_requests_carry_their_envelope(world: World, params: dict[str, Any], code: int) -> None:
    message = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": params}
    status, body, _ = world.post(
        message, headers={"mcp-protocol-version": MODERN, "mcp-method": "tools/list"}
    )
    assert status == 400
    assert _wire(t.JSONRPCError, body).error.code == code


def test_header_names_are_case_insensitive(world: World) -> None:
    message = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    status, body, _ = world.post(
        message, headers={"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    )
    assert status == 200, body
    status, body, _ = world.post(
        {"jsonrpc": "2.0", "id": 6, "method": "ping"}, headers={"MCP-PROTOCOL-VERSION": "1999-01-01"}
    )
    assert (status, body["error"]["code"]) == (400, t.UNSUPPORTED_PROTOCOL_VERSION)


def test_a_text_answer_is_text_only_without_a_made_up_structure() -> None:
    """``playbooks`` with ``format: "md"`` answers Markdown, not JSON: the result is that text, with no
    ``structuredContent`` (it said ``{"result": null}``); a JSON answer keeps its object."""
    markdown = "## /sql\n\n- **Do** describe the table first\n"
    answer = {
        "statusCode": 200,
        "body": markdown,
        "headers": {"Content-Type": "text/markdown; charset=utf-8"},
    }
    result = tool_result(answer, "playbooks")
    assert result == {"content": [{"type": "text", "text": markdown}], "isError": False}
    _wire(t.CallToolResult, result)
    json_answer = {"statusCode": 200, "body": '{"entries": []}'}
    assert tool_result(json_answer)["structuredContent"] == {"entries": []}
    assert tool_result({"statusCode": 200, "body": "[1, 2]"})["structuredContent"] == {"result": [1, 2]}


# ---- the MCP session and the client's name on the records -----------------------------------------
def _initialize(world: World, client: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    params = {"protocolVersion": V, "capabilities": {}, "clientInfo": client}
    status, _, answer_headers = world.post(
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, headers=headers
    )
    assert status == 200
    return answer_headers


def test_a_handshake_clients_calls_carry_its_session_and_claimed_name(world: World) -> None:
    session = _initialize(world, {"name": "claude-code", "version": "2.1.0"})["mcp-session-id"]
    assert session.startswith("opslake-mcp/")
    world.request(
        "tools/call",
        {"name": "sql", "arguments": {"sql": "DROP TABLE x"}},
        headers={"Mcp-Session-Id": session},
    )
    world.request("tools/call", {"name": "nope", "arguments": {}}, headers={"Mcp-Session-Id": session})
    tool_call, refused = world.records()
    for record in (tool_call, refused):  # a call refused before any tool is recorded the same way
        assert record.session_id == session  # as issued, and as the client sends it back
        assert (record.attributes["mcp.client.name"], record.attributes["mcp.client.version"]) == (
            "claude-code", "2.1.0",
        )  # fmt: skip
        assert record.reporter_id == "agent-7"  # the key is the identity; the name only a claim


@pytest.mark.parametrize(
    "name", ["1Password", "apikey", "pwd", "token", "auth", "secret-agent", "credentials-helper"]
)
def test_a_client_whose_name_reads_like_a_secret_keeps_the_session_id_it_was_issued(
    world: World, name: str
) -> None:
    session = _initialize(world, {"name": name, "version": "8.10.0"})["mcp-session-id"]
    world.request("tools/call", {"name": "tables", "arguments": {}}, headers={"Mcp-Session-Id": session})
    (record,) = world.records()
    assert record.session_id == session  # not redacted-<hash>: '<name>:<version>' read as an assignment
    assert record.attributes["mcp.client.name"] == name


def test_a_huge_client_name_is_cut_to_the_limit_at_once() -> None:
    from opslake.tools.mcp.session import MAX_NAME_CHARS, client_info

    for huge in ("é" * 1_000_000, "a" * 1_000_000, "  " + "\u200bb" * 500_000):
        info = client_info({"name": huge, "version": "1" * 1_000_000})
        assert info is not None and 0 < len(quote(info.name, safe="")) <= MAX_NAME_CHARS
        assert info.name.strip() == info.name and info.name in huge.replace("\u200b", "")


def test_a_session_id_issued_with_the_old_joint_still_names_its_client() -> None:
    from opslake.tools.mcp.session import client_of_session

    old = "opslake-mcp:1868a90c-6b24-4d4e-a1b4-6e3c4a3c0f51:cursor:1.2"
    info = client_of_session(old)
    assert info is not None and (info.name, info.version) == ("cursor", "1.2")


def test_two_clients_sharing_a_key_are_told_apart(world: World) -> None:
    sessions = [
        _initialize(world, {"name": name, "version": "1"})["mcp-session-id"] for name in ("cursor", "cline")
    ]
    for session in sessions:
        world.request("tools/call", {"name": "tables", "arguments": {}}, headers={"Mcp-Session-Id": session})
    records = world.records()
    assert [r.session_id for r in records] == sessions
    assert [r.attributes["mcp.client.name"] for r in records] == ["cursor", "cline"]


def test_a_session_id_opslake_did_not_issue_is_kept_as_sent_and_names_no_client(world: World) -> None:
    for sent in ("1868a90c-6b24-4d4e-a1b4-6e3c4a3c0f51", "opslake-mcp:not-a-uuid:forged:1"):
        assert "mcp-session-id" not in _initialize(
            world, {"name": "x"}, {"Mcp-Session-Id": sent}
        )  # none issued
        world.request("tools/call", {"name": "tables", "arguments": {}}, headers={"Mcp-Session-Id": sent})
    records = world.records()
    assert [r.session_id for r in records] == [
        "1868a90c-6b24-4d4e-a1b4-6e3c4a3c0f51", "opslake-mcp:not-a-uuid:forged:1",
    ]  # fmt: skip
    assert not any("mcp.client.name" in r.attributes for r in records)


def test_the_agents_own_session_header_wins_over_the_mcp_session(world: World) -> None:
    session = _initialize(world, {"name": "cursor", "version": "1"})["mcp-session-id"]
    headers = {"Mcp-Session-Id": session, "x-opslake-session-id": "task-17"}
    world.request("tools/call", {"name": "tables", "arguments": {}}, headers=headers)
    (record,) = world.records()
    assert record.session_id == "task-17" and record.attributes["mcp.client.name"] == "cursor"


def test_a_rest_call_does_not_read_the_mcp_session_header(world: World) -> None:
    world.rest("tables", "GET", "/tables", headers={"Mcp-Session-Id": "s-rest"})
    (record,) = world.records()
    assert record.source == "gateway" and record.session_id is None


@pytest.mark.parametrize(
    "client",
    [
        {"name": "evil\x00\n" + "n" * 5_000, "version": "v" * 1_000},
        {"name": 7},
        "cursor",
        {"version": "1"},
        None,
    ],
)
def test_a_strange_client_info_never_costs_the_record(world: World, client: Any) -> None:
    session = _initialize(world, client)["mcp-session-id"]
    assert len(session) <= 200  # an op's id limit: the record keeps it
    world.request("tools/call", {"name": "tables", "arguments": {}}, headers={"Mcp-Session-Id": session})
    (record,) = world.records()
    assert record.session_id == session
    name = record.attributes.get("mcp.client.name")
    assert name is None or (name.startswith("evil") and name.isprintable() and len(name) <= 80)


def test_a_modern_clients_calls_carry_the_client_info_of_each_request(world: World) -> None:
    _modern(world, "tools/call", {"name": "tables", "arguments": {}})
    (record,) = world.records()
    assert (record.attributes["mcp.client.name"], record.attributes["mcp.client.version"]) == ("test", "1")
    assert record.session_id is None  # this era has no session
