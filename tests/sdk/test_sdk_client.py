"""The Python SDK (sdk/python, ``opslake_sdk``) against an in-memory API (``httpx.MockTransport``):
what a decorated call reports, batching bounds, the /events retry contract (same op ids after a
503, 429 or network error; no retry on other 4xx), the bounded buffer, never raising into the
agent's code, flush/close/atexit, the playbooks ETag cache and ``report_followed``."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

import opslake_sdk
from opslake_sdk import ops as sdk_ops
from opslake_sdk.ops import MAX_OPS_PER_REQUEST, MAX_RECORD_BYTES, MAX_REQUEST_BYTES, TRUNCATION_MARK
from opslake_sdk.retry import RetryPolicy, parse_retry_after
from opslake_sdk.worker import Pipeline
from tests.unit.conftest import no_sockets  # noqa: F401  (autouse: these tests open no sockets)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
Answer = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def accept_all(request: httpx.Request) -> httpx.Response:
    ops = json.loads(request.content)["ops"]
    return httpx.Response(202, json={"accepted": [op["op_id"] for op in ops], "rejected": []})


class FakeApi:
    """POST /events answers from a script (then 202 for everything); GET /playbooks from ``playbooks``."""

    def __init__(self, *answers: Answer) -> None:
        self.script = list(answers)
        self.requests: list[httpx.Request] = []
        self.playbooks: Callable[[httpx.Request], httpx.Response] | None = None
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            answer = self.script.pop(0) if request.url.path.endswith("/events") and self.script else None
        if request.url.path.endswith("/playbooks"):
            assert self.playbooks is not None
            return self.playbooks(request)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        return (answer or accept_all)(request)

    def batches(self) -> list[list[dict[str, Any]]]:
        return [json.loads(r.content)["ops"] for r in self.requests if r.url.path.endswith("/events")]

    def ops(self) -> list[dict[str, Any]]:
        return [op for batch in self.batches() for op in batch]


Factory = Callable[..., tuple[opslake_sdk.Opslake, FakeApi]]


@pytest.fixture
def make() -> Iterator[Factory]:
    """A client on a fake API (tiny backoffs: the tests assert what is sent, not when)."""
    clients: list[opslake_sdk.Opslake] = []

    def build(*answers: Answer, **options: Any) -> tuple[opslake_sdk.Opslake, FakeApi]:
        api = FakeApi(*answers)
        settings: dict[str, Any] = {
            "agent_id": "agent-7",
            "backoff_base": 0.001,
            "max_backoff": 0.01,
            **options,
        }
        client = opslake_sdk.Opslake(
            "http://opslake.test/prod/", "key-1", transport=httpx.MockTransport(api), **settings
        )
        clients.append(client)
        return client, api

    yield build
    for client in clients:
        client.close(timeout=2)


# ---- what a call reports ------------------------------------------------------------------------


def test_a_decorated_call_becomes_one_op_and_its_result_is_returned_unchanged(make: Factory) -> None:
    ol, api = make()
    result = {"rows": [1, 2, 3]}

    @ol.observe()
    def query_db(sql: str, *, limit: int = 10) -> dict[str, Any]:
        return result

    assert query_db("SELECT 1", limit=5) is result
    assert query_db.__name__ == "query_db"
    assert ol.flush(timeout=5)
    [request] = [r for r in api.requests if r.url.path.endswith("/events")]
    assert str(request.url) == "http://opslake.test/prod/events"
    assert request.headers["x-api-key"] == "key-1" and request.headers["content-type"] == "application/json"
    [op] = api.ops()
    assert ULID.match(op.pop("op_id"))
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", op.pop("ts"))
    assert op.pop("duration_ms") >= 0
    assert op == {
        "endpoint": "tool:query_db",
        "success": True,
        "agent_id": "agent-7",
        "source": "sdk",
        "input_summary": "('SELECT 1', limit=5)",
        "output_summary": "{'rows': [1, 2, 3]}",
    }
    stats = ol.stats
    assert (stats.queued, stats.sent, stats.accepted, stats.pending, stats.requests) == (1, 1, 1, 0, 1)


def test_a_method_is_summarized_without_self(make: Factory) -> None:
    ol, api = make()

    class Tools:
        @ol.observe("tool:lookup")
        def lookup(self, worker_id: str) -> str:
            return f"worker {worker_id}"

    assert Tools().lookup("W1") == "worker W1"
    assert ol.flush(timeout=5)
    assert api.ops()[0]["input_summary"] == "('W1')"


class QuotaExceeded(Exception):
    pass


def test_the_agents_exception_is_reraised_unchanged_and_recorded(make: Factory) -> None:
    ol, api = make()
    raised = QuotaExceeded("quota of 100 calls exceeded")

    @ol.observe("tool:search", task_class="staffing_fill", attributes={"region": "eu"})
    def search(q: str) -> None:
        raise raised

    with pytest.raises(QuotaExceeded) as caught:
        search("welders")
    assert caught.value is raised
    assert caught.traceback[-1].name == "search"  # the agent's own frame is where it came from
    assert ol.flush(timeout=5)
    [op] = api.ops()
    assert op["success"] is False and op["endpoint"] == "tool:search"
    assert (op["error_type"], op["error"]) == ("QuotaExceeded", "quota of 100 calls exceeded")
    assert op["task_class"] == "staffing_fill" and op["attributes"] == {"region": "eu"}
    assert "output_summary" not in op


def test_async_functions_are_observed_and_pass_results_and_exceptions_through(make: Factory) -> None:
    ol, api = make()

    @ol.observe
    async def fetch_page(url: str) -> str:
        await asyncio.sleep(0)
        if url.endswith("404"):
            raise LookupError(url)
        return "<html>"

    async def agent() -> tuple[str, BaseException | None]:
        page = await fetch_page("https://example.com/")
        try:
            await fetch_page("https://example.com/404")
        except LookupError as exc:
            return page, exc
        return page, None

    page, exc = asyncio.run(agent())
    assert page == "<html>" and isinstance(exc, LookupError)
    assert ol.flush(timeout=5)
    ok, failed = api.ops()
    assert (ok["endpoint"], ok["success"], ok["output_summary"]) == ("tool:fetch_page", True, "<html>")
    assert (failed["success"], failed["error_type"]) == (False, "LookupError")


def test_the_context_manager_times_a_block_and_never_swallows_its_exception(make: Factory) -> None:
    ol, api = make()
    with ol.context(session_id="run-42", task_class="fill"), ol.op("tool:fill", input={"order": 7}) as op:
        op.output = "3 workers placed"
        op.attributes["placed"] = 3
    with pytest.raises(KeyError), ol.op("tool:lookup"):
        raise KeyError("W00042")
    with ol.op("tool:match") as op:
        op.fail("no worker matched", error_type="NoMatch")

    async def in_async() -> None:
        async with ol.op("tool:async_block") as block:
            block.output = "done"

    asyncio.run(in_async())
    assert ol.flush(timeout=5)
    fill, lookup, match, block = api.ops()
    assert fill["output_summary"] == "3 workers placed" and fill["input_summary"] == "{'order': 7}"
    assert (fill["session_id"], fill["task_class"], fill["attributes"]) == ("run-42", "fill", {"placed": 3})
    assert (lookup["success"], lookup["error_type"], lookup["error"]) == (False, "KeyError", "'W00042'")
    assert "session_id" not in lookup  # the context ended with its block
    assert (match["success"], match["error_type"], match["error"]) == (False, "NoMatch", "no worker matched")
    assert block["output_summary"] == "done"


def test_op_ids_are_ulids_as_the_server_makes_them() -> None:
    ms, random_bits = 1_763_800_000_123, 0x1234_5678_9ABC_DEF0_1357
    value = (ms << 80) | random_bits
    # the server's new_ulid, five bits at a time
    expected = "".join(
        "0123456789ABCDEFGHJKMNPQRSTVWXYZ"[(value >> (5 * i)) & 31] for i in reversed(range(26))
    )
    assert sdk_ops.encode_ulid(value) == expected
    ids = {sdk_ops.new_op_id() for _ in range(10_000)}
    assert len(ids) == 10_000 and all(ULID.match(op_id) for op_id in ids)


def test_texts_ids_and_attributes_are_cut_to_the_servers_limits() -> None:
    op = sdk_ops.build_op(
        endpoint="  tool:\nsearch  ",
        success=False,
        duration_ms=float("nan"),
        error="e" * 10_000,
        error_type="Bad\nType",
        input_summary="i" * 5_000,
        session_id="x" * 500,
        attributes={**{f"k{i}": i for i in range(80)}, "bad key!": "v"},
    )
    assert op["endpoint"] == "tool: search" and op["error_type"] == "Bad Type"
    assert len(op["error"]) == 4_000 and op["error"].endswith(TRUNCATION_MARK)
    assert len(op["input_summary"]) == 2_000 and op["input_summary"].endswith(TRUNCATION_MARK)
    assert len(op["session_id"]) == 200 and op["duration_ms"] == 0.0
    assert len(op["attributes"]) == 50
    assert sdk_ops.clean_attributes({"bad key!": [1], "n": float("inf")}) == {"bad_key_": "[1]", "n": "inf"}
    wide = sdk_ops.build_op(
        endpoint="tool:x", success=True, duration_ms=1, attributes={f"k{i}": "語" * 1_000 for i in range(50)}
    )
    assert len(sdk_ops.fit_record(wide)) < MAX_RECORD_BYTES  # 150 KB of attributes would be refused
    when = datetime(2026, 11, 22, 10, 15, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert (
        sdk_ops.build_op(endpoint="e", success=True, duration_ms=1, ts=when)["ts"]
        == "2026-11-22T08:15:00.123Z"
    )


# ---- batching -----------------------------------------------------------------------------------


def test_batches_hold_at_most_500_ops(make: Factory) -> None:
    ol, api = make()
    op_ids = [ol.record(endpoint="tool:tick", success=True, duration_ms=1) for _ in range(1_203)]
    assert ol.flush(timeout=10)
    assert [len(batch) for batch in api.batches()] == [500, 500, 203]
    assert [op["op_id"] for op in api.ops()] == op_ids  # each op once, in order
    assert ol.stats.accepted == 1_203


def test_batches_stay_under_one_mib(make: Factory) -> None:
    ol, api = make()
    big = {f"a{i}": "x" * 900 for i in range(50)}  # ~47 KB an op: ~22 fit in 1 MiB
    for _ in range(60):
        ol.record(endpoint="tool:big", success=True, duration_ms=1, attributes=big)
    assert ol.flush(timeout=10)
    bodies = [r.content for r in api.requests]
    assert len(bodies) >= 3 and all(len(body) <= MAX_REQUEST_BYTES for body in bodies)
    assert all(len(json.loads(body)["ops"]) <= MAX_OPS_PER_REQUEST for body in bodies)
    assert len(api.ops()) == 60 and ol.stats.accepted == 60


# ---- the retry contract -------------------------------------------------------------------------


def _ids(batch: list[dict[str, Any]]) -> list[str]:
    return [op["op_id"] for op in batch]


def test_a_503_is_retried_after_retry_after_with_the_same_op_ids(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    def sleep(self: Pipeline, seconds: float) -> bool:  # record the wait instead of waiting
        waits.append(seconds)
        return True

    monkeypatch.setattr(Pipeline, "_sleep", sleep)
    unavailable = httpx.Response(
        503,
        headers={"Retry-After": "2"},
        json={"message": "the ops could not be persisted; nothing was accepted", "detail": {"accepted": []}},
    )
    ol, api = make(unavailable, max_backoff=30)
    for n in range(3):
        ol.record(endpoint=f"tool:t{n}", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    first, second = api.batches()
    assert _ids(first) == _ids(second) and len(first) == 3
    assert first == second  # the very same ops, ts included
    assert waits == [2.0]  # the server's Retry-After
    stats = ol.stats
    assert (stats.requests, stats.retries, stats.accepted, stats.failed, stats.failed_batches) == (
        2,
        1,
        3,
        0,
        0,
    )


def test_retry_after_is_read_and_capped() -> None:
    policy = RetryPolicy(max_backoff_s=30)
    assert policy.delay(1, 7.0) == 7.0
    assert policy.delay(1, 3_600.0) == 30  # a server asking for an hour does not hold the ops that long
    assert 0.25 <= RetryPolicy(base_s=0.5).delay(1) <= 0.5 and RetryPolicy(max_backoff_s=4).delay(10) <= 4
    assert parse_retry_after("5") == 5.0 and parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert (parse_retry_after("Wed, 21 Oct 2099 07:28:00 GMT") or 0) > 1e6
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


@pytest.mark.parametrize(
    "first",
    [
        httpx.Response(429, json={"message": "Too Many Requests"}),
        httpx.Response(502, text="Bad Gateway"),
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
    ],
    ids=["429", "502", "connect-error", "read-timeout"],
)
def test_throttling_server_errors_and_network_errors_are_retried_with_the_same_op_ids(
    make: Factory, first: Answer
) -> None:
    ol, api = make(first, first)
    for _ in range(4):
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    batches = api.batches()
    assert len(batches) == 3 and _ids(batches[0]) == _ids(batches[1]) == _ids(batches[2])
    assert (ol.stats.retries, ol.stats.accepted) == (2, 4)


def test_a_400_is_not_retried_and_its_ops_count_as_rejected(make: Factory) -> None:
    refused = httpx.Response(
        400, json={"message": "no op was accepted: 2 invalid", "detail": {"rejected": []}}
    )
    ol, api = make(refused)
    ol.record(endpoint="tool:a", success=True, duration_ms=1)
    ol.record(endpoint="tool:b", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    assert len(api.batches()) == 1
    stats = ol.stats
    assert (stats.rejected, stats.accepted, stats.retries, stats.failed_batches, stats.pending) == (
        2,
        0,
        0,
        1,
        0,
    )


def test_ops_a_202_lists_as_rejected_are_counted(make: Factory) -> None:
    def partly(request: httpx.Request) -> httpx.Response:
        ops = json.loads(request.content)["ops"]
        rejected = [{"index": 1, "message": "ts: 30 h in the future", "errors": []}]
        return httpx.Response(
            202,
            json={
                "accepted": [ops[0]["op_id"], ops[2]["op_id"]],
                "rejected": rejected,
                "redacted_ids": [{"index": 2, "fields": ["session_id"]}],
            },
        )

    ol, _ = make(partly)
    for _ in range(3):
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    stats = ol.stats
    assert (stats.sent, stats.accepted, stats.rejected, stats.redacted, stats.retries) == (3, 2, 1, 1, 0)


def test_a_batch_is_given_up_after_max_attempts_and_counted(make: Factory) -> None:
    down = httpx.Response(503, headers={"Retry-After": "0"})
    ol, api = make(*[down] * 10, max_attempts=3)
    ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    assert len(api.batches()) == 3
    stats = ol.stats
    assert (stats.failed, stats.failed_batches, stats.retries, stats.accepted, stats.pending) == (
        1,
        1,
        2,
        0,
        0,
    )


# ---- never raises, never blocks -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(202, text="<html>not json</html>"),
        httpx.Response(200, json=["a", "list"]),
        httpx.Response(503, headers={"Retry-After": "soon"}, text="\x00\xff garbage"),
        httpx.Response(302, headers={"location": "http://elsewhere"}),
        httpx.RemoteProtocolError("server sent garbage"),
        RuntimeError("a transport with a bug"),
    ],
    ids=["202-html", "200-list", "503-garbage", "302", "protocol-error", "transport-bug"],
)
def test_garbage_answers_never_reach_the_agent(make: Factory, answer: Answer) -> None:
    ol, _ = make(answer)

    @ol.observe()
    def tool(x: int) -> int:
        return x * 2

    assert [tool(n) for n in range(5)] == [0, 2, 4, 6, 8]
    ol.flush(timeout=5)
    stats = ol.stats
    assert stats.queued == 5 and stats.pending == 0
    assert stats.accepted + stats.rejected + stats.failed == 5


def test_sdk_failures_are_counted_not_raised(make: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    ol, _ = make()

    class Unprintable:
        def __repr__(self) -> str:
            raise ValueError("no repr for you")

    @ol.observe(summarize_result=lambda result: 1 / 0)
    def tool(arg: Any) -> str:
        return "ok"

    assert tool(Unprintable()) == "ok"  # a broken repr and a broken summarizer cost nothing
    monkeypatch.setattr("opslake_sdk.client.build_op", lambda **_: 1 / 0)
    assert tool(1) == "ok"
    assert ol.record(endpoint="tool:x", success=True, duration_ms=1) is None
    assert ol.report_followed(["pb_1"]) is None
    ol.flush(timeout=5)
    assert ol.stats.errors >= 3
    assert ol.stats.accepted == 1  # the first call still reported


def test_the_buffer_is_bounded_and_counts_what_it_drops(make: Factory) -> None:
    gate = threading.Event()

    def held(request: httpx.Request) -> httpx.Response:
        gate.wait(10)  # the server hangs: the first batch is in flight, the rest waits in the buffer
        return accept_all(request)

    ol, api = make(held, max_queue=10, max_batch_ops=1)

    @ol.observe()
    def tool(n: int) -> int:
        return n

    assert [tool(n) for n in range(30)] == list(range(30))  # no call waited for the hung server
    stats = ol.stats
    assert stats.queued + stats.dropped == 30 and 10 <= stats.queued <= 11 and stats.dropped >= 19
    gate.set()
    assert ol.flush(timeout=10)
    assert ol.stats.accepted == ol.stats.queued == len(api.ops())


def test_an_unconfigured_client_sends_nothing_and_the_agent_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPSLAKE_URL", "OPSLAKE_API_KEY", "OPSLAKE_AGENT_ID"):
        monkeypatch.delenv(name, raising=False)
    ol = opslake_sdk.Opslake()
    try:

        @ol.observe()
        def tool() -> str:
            return "ran"

        assert not ol.enabled and tool() == "ran"
        assert ol.flush(timeout=1)
        assert (ol.stats.dropped, ol.stats.queued) == (1, 0)
        assert ol.playbooks(task_class="x").stale
    finally:
        ol.close()


def test_a_url_without_scheme_disables_the_client_instead_of_failing_later() -> None:
    ol = opslake_sdk.Opslake("api.example.com/prod", "key")
    try:
        assert not ol.enabled and ol.record(endpoint="tool:t", success=True, duration_ms=1) is None
        assert ol.stats.dropped == 1
    finally:
        ol.close()


def test_configuration_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSLAKE_URL", "https://api.example.com/prod/")
    monkeypatch.setenv("OPSLAKE_API_KEY", "k" * 40)
    monkeypatch.setenv("OPSLAKE_AGENT_ID", "agent-env")
    api = FakeApi()
    ol = opslake_sdk.Opslake(transport=httpx.MockTransport(api))
    try:
        assert (ol.url, ol.agent_id, ol.enabled) == ("https://api.example.com/prod", "agent-env", True)
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
        assert ol.flush(timeout=5)
        assert str(api.requests[0].url) == "https://api.example.com/prod/events"
        assert api.requests[0].headers["x-api-key"] == "k" * 40
        assert api.ops()[0]["agent_id"] == "agent-env"
    finally:
        ol.close()


# ---- flush, close, exit ---------------------------------------------------------------------------


def test_close_sends_what_is_queued_then_drops_later_ops(make: Factory) -> None:
    ol, api = make(flush_interval=60)  # nothing would go out on its own for a minute

    @ol.observe()
    def tool() -> int:
        return 1

    tool()
    tool()
    assert ol.close(timeout=5)
    assert len(api.ops()) == 2
    assert tool() == 1  # still runs after close; its op is counted, not sent
    assert (ol.stats.accepted, ol.stats.dropped) == (2, 1)
    assert ol.close(timeout=1)  # twice is fine


def test_close_gives_up_in_time_when_opslake_keeps_failing(make: Factory) -> None:
    down = httpx.Response(503, headers={"Retry-After": "60"})
    ol, _ = make(*[down] * 100, max_backoff=30, flush_interval=60)
    for _ in range(5):
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.close(timeout=0.5)  # a 60 s Retry-After does not fit: the batch is given up at once
    stats = ol.stats
    assert (stats.failed, stats.failed_batches, stats.pending, stats.accepted) == (5, 1, 0, 0)


def test_flush_timeout_returns_false_while_the_server_is_down(make: Factory) -> None:
    ol, _ = make(*[httpx.ConnectError("down")] * 1000, max_backoff=0.05, max_attempts=1000)
    ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=0.3) is False
    assert ol.stats.pending == 1 and ol.stats.retries >= 1


def test_ops_queued_before_exit_are_sent_by_atexit(tmp_path: Path) -> None:
    received = tmp_path / "received.jsonl"
    script = textwrap.dedent(
        f"""
        import json, httpx, opslake_sdk

        def server(request):
            with open({str(received)!r}, "a") as out:
                out.write(request.content.decode() + "\\n")
            ops = json.loads(request.content)["ops"]
            return httpx.Response(202, json={{"accepted": [o["op_id"] for o in ops], "rejected": []}})

        ol = opslake_sdk.Opslake("http://opslake.test", "key", transport=httpx.MockTransport(server),
                                 flush_interval=3600)

        @ol.observe()
        def tool(n):
            return n

        for n in range(3):
            tool(n)
        print(ol.stats.accepted)  # nothing sent yet: the interval is an hour; exit sends it
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    [line] = received.read_text().splitlines()
    assert [op["input_summary"] for op in json.loads(line)["ops"]] == ["(0)", "(1)", "(2)"]


def test_the_base_package_does_not_import_opentelemetry() -> None:
    code = "import sys, opslake_sdk; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---- the read side --------------------------------------------------------------------------------

ENTRY = {
    "entry_id": "pb_1",
    "trigger": "before writing SQL on workers",
    "action": "describe the table first",
    "kind": "do",
    "confidence": 0.9,
    "domain": "sql",
    "scope": "project",
    "endpoint": "/sql",
    "task_class": "question",
    "status": "active",
    "created_at": "2026-11-20T10:00:00Z",
    "evidence_count": 4,
    "evidence_op_ids": ["op-1", "op-2"],
    "brand_new_field": {"added": "later"},
}


def playbooks_server(api: FakeApi, answers: dict[str, Any]) -> list[httpx.Request]:
    """GET /playbooks as the gateway serves it: an ETag of the body, 304 to a matching If-None-Match."""
    seen: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.dumps(answers[request.url.params.get("task_class", "")])
        etag = f'"{abs(hash(body))}"'
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"ETag": etag})
        return httpx.Response(200, content=body, headers={"ETag": etag, "content-type": "application/json"})

    api.playbooks = serve
    return seen


def test_an_entry_names_every_field_the_server_serves() -> None:
    """Issue 16: the contrast and holdout experiment fields are read into named attributes (none is
    left in ``extra``); before/after publication is no longer served and reads None."""
    from opslake.models.playbooks import PlaybookEntry as ServerEntry

    served = ServerEntry(
        entry_id="pb_0123456789abcdef", trigger="SQL question over workers", kind="do", confidence=0.8,
        action="Use the column hourly_rate of workers", instead_of="SELECT rate FROM workers",
        fix_kind="column", domain="sql", endpoint="/sql", status="active", source="contrast",
        created_at="2026-11-20T10:00:00Z", experiment_stage="graduated", holdout_share=0.05,
        helpful_count=2, harmful_count=1, treatment_rate=0.075, holdout_rate=0.237, effect=0.162,
        effect_low=0.009, effect_high=0.31, evidence_op_ids=["op-1"],
    ).served()  # fmt: skip
    entry = opslake_sdk.PlaybookEntry.from_json(json.loads(json.dumps(served)))
    assert entry is not None and entry.extra == {}
    assert (entry.instead_of, entry.fix_kind, entry.experiment_stage) == (
        "SELECT rate FROM workers",
        "column",
        "graduated",
    )
    assert (entry.helpful_count, entry.harmful_count) == (2, 1)
    assert (entry.treatment_rate, entry.holdout_rate) == (0.075, 0.237)
    assert (entry.effect, entry.effect_low, entry.effect_high) == (0.162, 0.009, 0.31)
    assert entry.failure_rate_before is None and entry.failure_rate_after is None
    # a measured-nothing entry: the experiment's numbers are None, never 0
    bare = opslake_sdk.PlaybookEntry.from_json(ENTRY)
    assert bare is not None and bare.effect is None and bare.helpful_count is None


def test_playbooks_are_cached_per_query_by_etag(make: Factory) -> None:
    ol, api = make()
    answers = {
        "question": {"entries": [ENTRY, {"entry_id": "broken"}], "generated_at": "2026-11-21T10:00:00Z"},
        "fill": {"entries": [], "generated_at": "2026-11-21T10:00:00Z"},
    }
    seen = playbooks_server(api, answers)

    first = ol.playbooks(task_class="question", endpoint="/sql", limit=5)
    assert not first.not_modified and first.entry_ids == ["pb_1"]  # the entry without trigger is skipped
    entry = next(iter(first))
    assert (entry.kind, entry.confidence, entry.evidence_op_ids) == ("do", 0.9, ("op-1", "op-2"))
    assert entry.extra == {"brand_new_field": {"added": "later"}}
    assert dict(seen[0].url.params) == {"task_class": "question", "endpoint": "/sql", "limit": "5"}
    assert "if-none-match" not in seen[0].headers

    again = ol.playbooks(task_class="question", endpoint="/sql", limit=5)
    assert seen[1].headers["if-none-match"] == first.etag
    assert again.not_modified and again.entries == first.entries

    other = ol.playbooks(task_class="fill")  # another query: its own cache entry
    assert "if-none-match" not in seen[2].headers and len(other) == 0

    answers["question"] = {"entries": [{**ENTRY, "entry_id": "pb_2"}], "generated_at": "2026-11-22T10:00:00Z"}
    changed = ol.playbooks(task_class="question", endpoint="/sql", limit=5)
    assert not changed.not_modified and changed.entry_ids == ["pb_2"]
    stats = ol.stats
    assert (stats.playbook_requests, stats.playbook_not_modified, stats.playbook_errors) == (4, 1, 0)


def test_async_agents_read_playbooks_without_blocking_the_loop(make: Factory) -> None:
    ol, api = make()
    seen = playbooks_server(api, {"question": {"entries": [ENTRY], "generated_at": None}})

    async def agent() -> tuple[list[str], bool]:
        with ol.context(session_id="run-9"):
            first = await ol.aplaybooks(task_class="question")
            again = await ol.aplaybooks(task_class="question")
        return first.entry_ids, again.not_modified

    assert asyncio.run(agent()) == (["pb_1"], True)
    assert seen[0].headers["x-opslake-session-id"] == "run-9"  # the caller's context went along
    assert seen[0].headers["x-opslake-task-class"] == "question"


def test_playbooks_when_opslake_cannot_be_read(make: Factory) -> None:
    ol, api = make()
    answers: dict[str, Any] = {"question": {"entries": [ENTRY], "generated_at": None}}
    playbooks_server(api, answers)
    fresh = ol.playbooks(task_class="question")

    api.playbooks = lambda request: httpx.Response(503, headers={"Retry-After": "5"})
    stale = ol.playbooks(task_class="question")
    assert stale.stale and stale.entry_ids == fresh.entry_ids and "503" in (stale.error or "")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("down")

    api.playbooks = unreachable
    assert ol.playbooks(task_class="never-asked").entries == ()  # nothing cached: empty, no exception
    api.playbooks = lambda request: httpx.Response(200, text="<html>")
    assert ol.playbooks(task_class="question").stale
    assert ol.stats.playbook_errors == 3


def test_report_followed_sends_one_op_the_consolidator_can_read(make: Factory) -> None:
    ol, api = make()
    with ol.context(session_id="run-42"):
        op_id = ol.report_followed(["pb_1", "pb_2", "pb_1", ""], task_class="question", endpoint="/sql")
    assert ol.report_followed([]) is None
    assert ol.flush(timeout=5)
    [op] = api.ops()
    assert op.pop("op_id") == op_id and op.pop("ts")
    assert op == {
        "endpoint": "playbook:followed",
        "event_kind": "playbook_followed",
        "success": True,
        "duration_ms": 0.0,
        "agent_id": "agent-7",
        "session_id": "run-42",
        "task_class": "question",
        "source": "sdk",
        "attributes": {"entry_ids": "pb_1,pb_2", "for_endpoint": "/sql"},
    }


# ---- OpenTelemetry --------------------------------------------------------------------------------


def test_the_otel_helper_points_an_exporter_and_a_batch_processor_at_opslake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    made: list[dict[str, Any]] = []
    real = opslake_sdk.otel.OTLPSpanExporter

    def recording(**kwargs: Any) -> Any:
        made.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(opslake_sdk.otel, "OTLPSpanExporter", recording)
    opslake_sdk.otel.exporter("https://api.example.com/prod/", "key-1")
    assert made[0]["endpoint"] == "https://api.example.com/prod/v1/traces"
    assert made[0]["headers"] == {"x-api-key": "key-1"} and made[0]["compression"] is Compression.Gzip

    class Provider:
        def __init__(self) -> None:
            self.processors: list[Any] = []

        def add_span_processor(self, processor: Any) -> None:
            self.processors.append(processor)

    provider = Provider()
    monkeypatch.setenv("OPSLAKE_URL", "https://api.example.com")
    monkeypatch.setenv("OPSLAKE_API_KEY", "key-2")
    assert opslake_sdk.otel.configure(provider) is provider
    [processor] = provider.processors
    assert isinstance(processor, BatchSpanProcessor)
    assert made[1]["headers"] == {"x-api-key": "key-2"}
    processor.shutdown()
    monkeypatch.delenv("OPSLAKE_URL")
    with pytest.raises(ValueError, match="OPSLAKE_URL"):
        opslake_sdk.otel.exporter()
