"""GET /stats and GET /profile/{agent_id}: the handlers driven by REST (v1) events against a fake
query engine (200/400/404/502/503), and end to end on the local stack: ops posted through
POST /events, drained into the lake, then read back through the HTTP API by the embedded engine."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from opslake.query.base import Column, QueryEngine, QueryFailedError, QueryResult, QueryTimeoutError
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack
from tests.conftest import load_event

from ..fakes import FakeEngine

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "OPSLAKE_GLUE_DATABASE": "opslake_test",
    "OPSLAKE_OPS_TABLE": "ops",
    "OPSLAKE_LAKE_BUCKET": "opslake-test-lake",
    "OPSLAKE_ATHENA_WORKGROUP": "opslake-test",
    "OPSLAKE_QUERY_ENGINE": "athena",
}
STATS_COLUMNS = ["kind", "source", "endpoint", "op_kind", "ops", "failures", "p95_duration_ms"]
PROFILE_COLUMNS = [
    "part", "ops", "successes", "p95_duration_ms", "op_id", "ts", "endpoint", "success", "duration_ms",
    "error_type", "error", "op_kind",
]  # fmt: skip


def _result(columns: list[str], rows: list[tuple[Any, ...]]) -> QueryResult:
    return QueryResult([Column(c, "varchar") for c in columns], rows, engine="athena", query_id="q-1")


def _stats_result() -> QueryResult:
    return _result(
        STATS_COLUMNS,
        [
            ("total", None, None, None, 5, 2, 300.0),
            ("source", "event", None, None, 5, 2, 300.0),
            ("endpoint", None, "tool:query_db", None, 3, 2, 300.0),
            ("endpoint", None, "/sql", None, 2, 0, 20.0),
            ("kind", None, None, "tool", 5, 2, 300.0),
        ],
    )


def _profile_result(ops: int = 3) -> QueryResult:
    rows: list[tuple[Any, ...]] = [("summary", ops, 2 if ops else 0, 90.5, *(None,) * 8)]
    if ops:
        rows += [
            ("error", 1, None, None, None, None, None, None, None, "Timeout", "timed out after 30 s", None),
            ("recent", None, None, None, "op-2", datetime(2026, 11, 21, 10, 2), "/sql", False, 90.5, "Timeout", None,
             None),
            ("recent", None, None, None, "op-1", datetime(2026, 11, 21, 10, 1), "/sql", True, 12.0, None, None, None),
            ("kind", ops, 2, 90.5, *(None,) * 7, "tool"),
        ]  # fmt: skip
    return _result(PROFILE_COLUMNS, rows)


def _event(
    name: str, *, query: dict[str, str] | None, path_params: dict[str, str] | None = None
) -> dict[str, Any]:
    event = copy.deepcopy(load_event(name))
    event["queryStringParameters"] = query
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
    if path_params is not None:
        event["pathParameters"] = path_params
        event["path"] = event["requestContext"]["path"] = "/profile/" + path_params["agent_id"]
    return event


@pytest.fixture
def handler_with(
    load_handler: Callable[..., ModuleType], monkeypatch: pytest.MonkeyPatch, lambda_context: Any
) -> Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]:
    """Cold-start a handler module with a fake engine; returns a function invoking it."""

    def make(relative_path: str, engine: QueryEngine) -> Callable[[dict[str, Any]], dict[str, Any]]:
        module = load_handler(relative_path, **ENV)
        monkeypatch.setattr(module, "_engine", lambda: engine)

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = module.handler(event, lambda_context)
            answer["json"] = json.loads(answer["body"])
            headers = dict(answer.get("headers") or {})
            headers.update({k: v[-1] for k, v in (answer.get("multiValueHeaders") or {}).items()})
            answer["headers"] = headers
            return answer

        return invoke

    return make


# ---- GET /stats --------------------------------------------------------------------------------
def test_stats_200_then_served_from_the_cache(handler_with: Callable[..., Any]) -> None:
    engine = FakeEngine(_stats_result())
    invoke = handler_with("functions/observer/stats.py", engine)

    first = invoke(load_event("stats_get.json"))
    assert first["statusCode"] == 200
    body = first["json"]
    assert (body["ops"], body["successes"], body["failures"], body["failure_rate"]) == (5, 3, 2, 0.4)
    assert [e["name"] for e in body["by_endpoint"]] == ["tool:query_db", "/sql"]
    assert body["by_source"] == [
        {"name": "event", "ops": 5, "failures": 2, "failure_rate": 0.4, "p95_duration_ms": 300.0}
    ]
    assert body["window"]["hours"] == 24 and body["cached"] is False
    assert datetime.fromisoformat(body["generated_at"]) <= datetime.now(UTC)
    assert 'FROM "opslake_test"."ops"' in engine.sql[0]

    second = invoke(load_event("stats_get.json"))
    assert second["statusCode"] == 200
    assert second["json"]["cached"] is True
    assert second["json"]["generated_at"] == body["generated_at"]
    assert len(engine.sql) == 1  # the second answer cost no query


@pytest.mark.parametrize("hours", ["0", "169", "abc", "2.5"])
def test_stats_400_for_bad_hours(handler_with: Callable[..., Any], hours: str) -> None:
    engine = FakeEngine()
    answer = handler_with("functions/observer/stats.py", engine)(
        _event("stats_get.json", query={"hours": hours})
    )
    assert answer["statusCode"] == 400
    assert answer["json"]["error"] == "bad_request"
    assert "hours must be a whole number of hours from 1 to 168" in answer["json"]["message"]
    assert engine.sql == []


def test_stats_default_window_is_24_hours(handler_with: Callable[..., Any]) -> None:
    invoke = handler_with("functions/observer/stats.py", FakeEngine(_stats_result()))
    answer = invoke(_event("stats_get.json", query=None))
    assert answer["statusCode"] == 200
    window = answer["json"]["window"]
    start, end = datetime.fromisoformat(window["start"]), datetime.fromisoformat(window["end"])
    assert (window["hours"], end - start) == (24, timedelta(hours=24))


def test_stats_503_with_retry_after_when_the_query_times_out(handler_with: Callable[..., Any]) -> None:
    invoke = handler_with(
        "functions/observer/stats.py", FakeEngine(QueryTimeoutError("slow", query_id="q-7"))
    )
    answer = invoke(load_event("stats_get.json"))
    assert answer["statusCode"] == 503
    assert answer["headers"]["Retry-After"] == "5"
    assert answer["json"]["error"] == "query_unavailable"
    assert answer["json"]["detail"] == {"query_id": "q-7"}


def test_stats_502_when_the_engine_fails_the_query(handler_with: Callable[..., Any]) -> None:
    invoke = handler_with("functions/observer/stats.py", FakeEngine(QueryFailedError("HIVE_CURSOR_ERROR: x")))
    answer = invoke(load_event("stats_get.json"))
    assert answer["statusCode"] == 502
    assert answer["json"]["error"] == "query_failed"
    assert "HIVE_CURSOR_ERROR" not in answer["body"]


# ---- GET /profile/{agent_id} -------------------------------------------------------------------
def test_profile_200(handler_with: Callable[..., Any]) -> None:
    engine = FakeEngine(_profile_result())
    answer = handler_with("functions/observer/agent_profile.py", engine)(load_event("profile_get.json"))
    assert answer["statusCode"] == 200
    body = answer["json"]
    assert (body["agent_id"], body["ops"], body["successes"], body["failures"]) == ("agent-7", 3, 2, 1)
    assert body["success_rate"] == 0.6667
    assert body["p95_duration_ms"] == 90.5
    assert body["top_errors"] == [
        {"error_type": "Timeout", "count": 1, "sample_error": "timed out after 30 s"}
    ]
    assert [op["op_id"] for op in body["recent_ops"]] == ["op-2", "op-1"]
    assert body["recent_ops"][0]["ts"] == "2026-11-21T10:02:00Z"
    assert body["window"]["hours"] == 168
    assert "agent_id = 'agent-7'" in engine.sql[0]


def test_profile_reads_the_decoded_path_parameter_and_escapes_it(handler_with: Callable[..., Any]) -> None:
    engine = FakeEngine(_profile_result())
    event = _event("profile_get.json", query={"hours": "3"}, path_params={"agent_id": "o'brien"})
    answer = handler_with("functions/observer/agent_profile.py", engine)(event)
    assert answer["statusCode"] == 200
    assert answer["json"]["agent_id"] == "o'brien"
    assert "agent_id = 'o''brien'" in engine.sql[0]


def test_profile_404_for_an_agent_without_ops(handler_with: Callable[..., Any]) -> None:
    invoke = handler_with("functions/observer/agent_profile.py", FakeEngine(_profile_result(ops=0)))
    answer = invoke(_event("profile_get.json", query={"hours": "48"}, path_params={"agent_id": "ghost"}))
    assert answer["statusCode"] == 404
    assert answer["json"]["error"] == "not_found"
    assert "no ops were found for agent 'ghost' in the last 48 hours" in answer["json"]["message"]


@pytest.mark.parametrize(
    ("agent_id", "hours"), [(" padded", "1"), ("x" * 201, "1"), ("agent-7", "0"), ("agent-7", "1000")]
)
def test_profile_400_for_a_bad_agent_id_or_window(
    handler_with: Callable[..., Any], agent_id: str, hours: str
) -> None:
    engine = FakeEngine()
    event = _event("profile_get.json", query={"hours": hours}, path_params={"agent_id": agent_id})
    answer = handler_with("functions/observer/agent_profile.py", engine)(event)
    assert answer["statusCode"] == 400
    assert engine.sql == []


def test_profile_503_when_athena_throttles(handler_with: Callable[..., Any]) -> None:
    from opslake.query.base import QueryError

    invoke = handler_with(
        "functions/observer/agent_profile.py", FakeEngine(QueryError("Athena is throttling requests"))
    )
    answer = invoke(load_event("profile_get.json"))
    assert answer["statusCode"] == 503
    assert answer["headers"]["Retry-After"] == "5"


# ---- the request path stays light --------------------------------------------------------------
PROBE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
engine = module._engine()
heavy = sorted(n for n in ("pyarrow", "duckdb", "sqlglot", "moto", "opslake_local") if n in sys.modules)
print(type(engine).__name__, ",".join(heavy))
"""


@pytest.mark.parametrize("handler", ["functions/observer/stats.py", "functions/observer/agent_profile.py"])
def test_handler_and_its_athena_engine_import_nothing_heavy(handler: str) -> None:
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT / "layers/common")}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / handler)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert result.stdout.split() == ["AthenaEngine"], result.stdout


# ---- end to end on the local stack (embedded engine) -------------------------------------------
AGENT = "agent-stats"
OTHER = "o'brien"
MIXED = "support_agent"  # an agent reporting its model calls and runs beside its tool calls (OTLP)


def _op(
    op_id: str, agent: str, endpoint: str, success: bool, duration: float, **extra: Any
) -> dict[str, Any]:
    return {
        "op_id": op_id, "agent_id": agent, "endpoint": endpoint, "success": success, "duration_ms": duration,
        "ts": (datetime.now(UTC) - timedelta(minutes=60 - int(op_id.rsplit("-", 1)[1]))).isoformat(), **extra,
    }  # fmt: skip


POSTED = [
    _op("e2e-01", AGENT, "tool:query_db", True, 10.0),
    _op("e2e-02", AGENT, "tool:query_db", False, 20.0, error_type="UnknownColumn", error="column wrokers 1"),
    _op("e2e-03", AGENT, "tool:query_db", False, 30.0, error_type="UnknownColumn", error="column wrokers 2"),
    _op("e2e-04", AGENT, "/sql", True, 40.0),
    _op("e2e-05", AGENT, "/sql", False, 50.0, error_type="Timeout", error="timed out"),
    _op("e2e-06", AGENT, "/sql", True, 60.0),
    _op("e2e-07", OTHER, "/sql", True, 70.0),
    _op("e2e-08", OTHER, "tool:search", False, 80.0, error_type="Quota", error="quota hit"),
    _op("e2e-09", MIXED, "tool:lookup_order", True, 5.0),
    _op("e2e-10", MIXED, "tool:lookup_order", True, 6.0),
    _op(
        "e2e-11", MIXED, "tool:cancel_order", False, 7.0, error_type="ValueError", error="ValueError: shipped"
    ),
    _op("e2e-12", MIXED, "model:gpt-x", True, 900.0),
    _op("e2e-13", MIXED, "model:gpt-x", True, 800.0),
    _op(
        "e2e-14",
        MIXED,
        "agent:support_agent",
        False,
        2_000.0,
        error_type="GraphRecursionError",
        error="limit",
    ),
]
KIND_OF = {"tool": "tool", "model": "model", "agent": "agent", "/sql": "tool"}


def _kind(op: dict[str, Any]) -> str:
    return KIND_OF[op["endpoint"].split(":")[0]]


@pytest.fixture(scope="module")
def seeded(local: tuple[LocalStack, httpx.Client, Drainer]) -> tuple[LocalStack, httpx.Client]:
    stack, client, drainer = local
    assert stack.api_key is not None
    answer = client.post("/events", json={"ops": POSTED}, headers={"x-api-key": stack.api_key.value})
    assert answer.status_code == 202, answer.text
    assert len(answer.json()["accepted"]) == len(POSTED)
    result = drainer.drain()
    # the drain counts messages, and one request's ops travel packed in one message (issue 13)
    assert (result.failed, result.written) == (0, 1)
    return stack, client


def test_stats_over_the_local_lake_match_what_was_posted(seeded: tuple[LocalStack, httpx.Client]) -> None:
    stack, client = seeded
    assert stack.api_key is not None
    key = {"x-api-key": stack.api_key.value}
    assert client.get("/stats", params={"hours": "1"}).status_code == 403  # the key is required

    answer = client.get("/stats", params={"hours": "1"}, headers=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["engine"] == "embedded" and body["cached"] is False
    tools = [op for op in POSTED if _kind(op) == "tool"]  # the headline rates are the tool calls'
    failures = sum(1 for op in tools if not op["success"])
    assert (body["ops"], body["failures"], body["successes"]) == (
        len(POSTED),
        failures,
        len(tools) - failures,
    )
    assert body["failure_rate"] == round(failures / len(tools), 4)
    by_kind = {k["name"]: (k["ops"], k["failures"]) for k in body["by_kind"]}
    assert by_kind == {"tool": (len(tools), failures), "model": (2, 0), "agent": (1, 1)}
    assert body["by_source"][0]["name"] == "event" and body["by_source"][0]["ops"] == len(POSTED)
    by_endpoint = {e["name"]: (e["ops"], e["failures"]) for e in body["by_endpoint"]}
    assert by_endpoint == {
        "tool:query_db": (3, 2), "/sql": (4, 1), "tool:search": (1, 1), "tool:lookup_order": (2, 0),
        "tool:cancel_order": (1, 1), "model:gpt-x": (2, 0), "agent:support_agent": (1, 1),
    }  # fmt: skip
    durations = [op["duration_ms"] for op in tools]
    assert min(durations) <= body["p95_duration_ms"] <= max(durations)

    again = client.get("/stats", params={"hours": "1"}, headers=key).json()
    assert again["cached"] is True and again["ops"] == len(POSTED)


def test_profile_over_the_local_lake_matches_what_was_posted(seeded: tuple[LocalStack, httpx.Client]) -> None:
    stack, client = seeded
    assert stack.api_key is not None
    answer = client.get(
        f"/profile/{AGENT}", params={"hours": "2"}, headers={"x-api-key": stack.api_key.value}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    mine = [op for op in POSTED if op["agent_id"] == AGENT]
    assert (body["agent_id"], body["ops"], body["successes"], body["failures"]) == (AGENT, 6, 3, 3)
    assert body["success_rate"] == 0.5
    assert 10.0 <= body["p95_duration_ms"] <= 60.0
    assert body["top_errors"] == [
        {"error_type": "UnknownColumn", "count": 2, "sample_error": "column wrokers 2"},  # the latest sample
        {"error_type": "Timeout", "count": 1, "sample_error": "timed out"},
    ]
    assert [op["op_id"] for op in body["recent_ops"]] == [op["op_id"] for op in reversed(mine)]
    assert body["recent_ops"][0] == {
        "op_id": "e2e-06", "ts": body["recent_ops"][0]["ts"], "endpoint": "/sql", "success": True,
        "duration_ms": 60.0, "error_type": None, "reporter_id": stack.api_key.name,
    }  # fmt: skip
    # the agent_id is a claim: the answer names the API key behind each op, and all of them (issue 12)
    assert (body["reporter_count"], body["reporters"]) == (1, [{"reporter_id": stack.api_key.name, "ops": 6}])


def test_profile_success_rate_counts_tool_calls_only(seeded: tuple[LocalStack, httpx.Client]) -> None:
    """3 tool calls (1 failed), 2 model calls and a failed agent run: the tool success rate is 2/3."""
    stack, client = seeded
    assert stack.api_key is not None
    answer = client.get(
        f"/profile/{MIXED}", params={"hours": "2"}, headers={"x-api-key": stack.api_key.value}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["ops"], body["successes"], body["failures"], body["success_rate"]) == (6, 2, 1, 0.6667)
    assert body["p95_duration_ms"] <= 7.0  # the model calls and the run are not in it
    by_kind = {k["name"]: (k["ops"], k["failures"]) for k in body["by_kind"]}
    assert by_kind == {"tool": (3, 1), "model": (2, 0), "agent": (1, 1)}
    # every failure is still listed, whatever its kind
    assert {e["error_type"] for e in body["top_errors"]} == {"ValueError", "GraphRecursionError"}


def test_profile_of_an_agent_whose_id_needs_escaping(seeded: tuple[LocalStack, httpx.Client]) -> None:
    stack, client = seeded
    assert stack.api_key is not None
    answer = client.get("/profile/o'brien", headers={"x-api-key": stack.api_key.value})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["ops"], answer.json()["failures"]) == (2, 1)


def test_profile_of_an_unknown_agent_is_404(seeded: tuple[LocalStack, httpx.Client]) -> None:
    stack, client = seeded
    assert stack.api_key is not None
    answer = client.get("/profile/nobody", params={"hours": "3"}, headers={"x-api-key": stack.api_key.value})
    assert answer.status_code == 404
    assert answer.json()["message"].startswith("no ops were found for agent 'nobody' in the last 3 hours")
