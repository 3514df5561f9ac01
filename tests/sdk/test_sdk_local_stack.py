"""The Python SDK against the local stack over real HTTP: ops land in the lake exactly once across a
503 and the SDK's retry (the stack's queue refuses one send), the buffer bound holds, a decorated
tool runs unchanged when nothing listens, the playbooks ETag round trip against the real
``GET /playbooks``, ``report_followed`` in the lake, and spans through ``opslake_sdk.otel``."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

import opslake_sdk
from opslake import runtime
from opslake.config import load_settings
from opslake.query.embedded import EmbeddedEngine
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack
from tests.integration.conftest import local  # noqa: F401  (one local stack for this module)
from tests.integration.jobs_support import compact_closed_hours

pytestmark = pytest.mark.integration

Local = tuple[LocalStack, httpx.Client, Drainer]


@pytest.fixture(scope="module")
def api_key(local: Local) -> str:  # noqa: F811
    return local[0].create_api_key("sdk-runtime").value


@pytest.fixture
def sdk(local: Local, api_key: str) -> Iterator[opslake_sdk.Opslake]:  # noqa: F811
    """A client of the stack's API (the server's Retry-After of 5 s capped to 0.2 s: a test waits less)."""
    client = opslake_sdk.Opslake(str(local[1].base_url), api_key, agent_id="sdk-agent", max_backoff=0.2)
    yield client
    client.close(timeout=5)


def lake_rows(op_ids: list[str]) -> dict[str, int]:
    """Rows of ``ops`` per op id, as written (before compaction, so a duplicate would show)."""
    listed = ", ".join(f"'{op_id}'" for op_id in op_ids)
    result = EmbeddedEngine.from_settings(load_settings()).run(
        f"SELECT op_id, count(*) FROM ops WHERE op_id IN ({listed}) GROUP BY op_id"
    )
    return {str(op_id): int(n) for op_id, n in result.rows}


def lake_records(op_ids: list[str]) -> list[dict[str, Any]]:
    listed = ", ".join(f"'{op_id}'" for op_id in op_ids)
    return (
        EmbeddedEngine.from_settings(load_settings())
        .run(f"SELECT * FROM ops WHERE op_id IN ({listed})")
        .records()
    )


class FailSqsSends:
    """The stack's next ``times`` SendMessageBatch calls fail (the handler answers 503)."""

    def __init__(self, times: int = 1) -> None:
        self.times, self.injected = times, 0
        self.events = runtime.client("sqs").meta.events  # the client the handlers enqueue with

    def hook(self, **_: Any) -> None:
        if self.injected < self.times:
            self.injected += 1
            raise ClientError(
                {"Error": {"Code": "ServiceUnavailable", "Message": "injected"}}, "SendMessageBatch"
            )

    def __enter__(self) -> FailSqsSends:
        self.events.register("before-call.sqs.SendMessageBatch", self.hook)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.events.unregister("before-call.sqs.SendMessageBatch", self.hook)


def test_ops_land_exactly_once_across_a_503_and_the_sdks_retry(
    local: Local,  # noqa: F811
    api_key: str,
    sdk: opslake_sdk.Opslake,
) -> None:
    _, client, drainer = local
    # The stack's 503 itself, as the SDK will meet it: nothing accepted, retry later.
    with FailSqsSends() as failing:
        answer = client.post("/events", json={"endpoint": "tool:probe", "success": True, "duration_ms": 1},
                             headers={"x-api-key": api_key})  # fmt: skip
    assert failing.injected == 1 and answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "5" and answer.json()["detail"]["accepted"] == []

    @sdk.observe(task_class="staffing_fill")
    def lookup_worker(worker_id: str) -> dict[str, str]:
        return {"worker_id": worker_id, "city": "Austin"}

    with FailSqsSends() as failing:
        results = [lookup_worker(f"W{n:05d}") for n in range(25)]
        assert sdk.flush(timeout=30)
    assert results == [{"worker_id": f"W{n:05d}", "city": "Austin"} for n in range(25)]
    assert failing.injected == 1
    stats = sdk.stats
    assert (stats.requests, stats.retries, stats.accepted, stats.failed, stats.rejected) == (2, 1, 25, 0, 0)

    assert drainer.drain().failed == 0
    records = lake_records_for_endpoint("tool:lookup_worker")
    op_ids = [r["op_id"] for r in records]
    assert len(op_ids) == 25
    assert set(lake_rows(op_ids).values()) == {1}  # each op once, though its batch was sent twice
    first = min(records, key=lambda r: r["input_summary"])
    assert (first["agent_id"], first["reporter_id"], first["source"]) == ("sdk-agent", "sdk-runtime", "sdk")
    assert (first["task_class"], first["success"], first["input_summary"]) == (
        "staffing_fill",
        True,
        "('W00000')",
    )


def lake_records_for_endpoint(endpoint: str) -> list[dict[str, Any]]:
    return (
        EmbeddedEngine.from_settings(load_settings())
        .run(f"SELECT * FROM ops WHERE endpoint = '{endpoint}' AND reporter_id = 'sdk-runtime'")
        .records()
    )


class LosingProxy:
    """A real HTTP proxy in front of the stack that forwards the first ``POST /events`` and then
    drops the connection without an answer: the server has accepted the ops, the client cannot
    know (the ambiguous failure only idempotent op ids make safe). Everything else is forwarded."""

    def __init__(self, upstream: str) -> None:
        self.lost = 0
        self.upstream_statuses: list[int] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                answer = httpx.post(upstream + self.path, content=body, headers=headers, timeout=60)
                proxy.upstream_statuses.append(answer.status_code)
                if proxy.lost == 0:
                    proxy.lost += 1
                    self.close_connection = True  # accepted upstream; the answer never reaches the client
                    return
                self.send_response(answer.status_code)
                for name in ("content-type", "retry-after"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_buffer_bound_holds_and_what_was_queued_lands(local: Local, api_key: str) -> None:  # noqa: F811
    _, client, drainer = local
    ol = opslake_sdk.Opslake(str(client.base_url), api_key, max_queue=5, flush_interval=60)
    try:
        op_ids = [ol.record(endpoint="tool:burst", success=True, duration_ms=1) for _ in range(40)]
        kept = [op_id for op_id in op_ids if op_id]
        assert len(kept) == 5 and (ol.stats.queued, ol.stats.dropped) == (5, 35)
        assert ol.flush(timeout=30) and ol.stats.accepted == 5
    finally:
        ol.close(timeout=5)
    assert drainer.drain().failed == 0
    assert lake_rows(kept) == dict.fromkeys(kept, 1)


def test_the_agents_function_is_unchanged_when_opslake_is_down() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ol = opslake_sdk.Opslake(f"http://127.0.0.1:{port}", "key", max_attempts=2, max_backoff=0.05)
    try:

        @ol.observe()
        def plan(task: str) -> list[str]:
            return [f"step 1 of {task}", "step 2"]

        @ol.observe()
        def flaky(n: int) -> int:
            raise TimeoutError(f"tool {n} timed out")

        assert plan("fill") == ["step 1 of fill", "step 2"]
        with pytest.raises(TimeoutError, match="tool 3 timed out"):
            flaky(3)
        assert ol.flush(timeout=30)
        advice = ol.playbooks(task_class="fill")
        assert advice.stale and advice.entries == () and "Connect" in (advice.error or "")
    finally:
        ol.close(timeout=5)
    stats = ol.stats
    assert (stats.failed, stats.failed_batches, stats.retries, stats.accepted, stats.errors) == (
        2,
        1,
        1,
        0,
        0,
    )


def _entry(entry_id: str, confidence: float) -> dict[str, Any]:
    return {
        "entry_id": entry_id, "trigger": f"before {entry_id}", "action": "describe the table first", "kind": "do",
        "confidence": confidence, "domain": "sql", "status": "active", "endpoint": "/sql", "task_class": "question",
        "evidence_op_ids": ["op-1", "op-2", "op-3"], "created_at": "2026-11-20T10:00:00Z",
        "holdout_share": 0.0,  # outside any holdout experiment: served to every key
    }  # fmt: skip


def test_playbooks_etag_round_trip_and_report_followed(local: Local, sdk: opslake_sdk.Opslake) -> None:  # noqa: F811
    stack, _, drainer = local
    settings = load_settings()
    snapshot = {"generated_at": "2026-11-21T10:00:00Z", "entries": [_entry("pb_a", 0.9), _entry("pb_b", 0.6)]}
    stack.client("s3").put_object(
        Bucket=settings.lake_bucket, Key=settings.playbooks_key, Body=json.dumps(snapshot).encode()
    )

    first = sdk.playbooks(task_class="question", endpoint="/sql")
    assert first.entry_ids == ["pb_a", "pb_b"] and not first.not_modified and first.etag
    assert first.entries[0].evidence_count == 3 and first.entries[0].kind == "do"
    again = sdk.playbooks(task_class="question", endpoint="/sql")
    assert again.not_modified and again.entries == first.entries and again.etag == first.etag
    assert (sdk.stats.playbook_requests, sdk.stats.playbook_not_modified) == (2, 1)

    op_id = sdk.report_followed(again.entry_ids, task_class="question", endpoint="/sql")
    assert op_id and sdk.flush(timeout=30)
    assert drainer.drain().failed == 0
    [followed] = lake_records([op_id])
    assert (followed["endpoint"], followed["event_kind"], followed["success"]) == (
        "playbook:followed",
        "playbook_followed",
        True,
    )
    attributes = dict(followed["attributes"])
    assert (attributes["entry_ids"], attributes["for_endpoint"]) == ("pb_a,pb_b", "/sql")


def test_spans_exported_through_the_otel_helper_land_as_ops(local: Local, api_key: str) -> None:  # noqa: F811
    from opentelemetry.sdk.trace import TracerProvider

    _, client, drainer = local
    provider = opslake_sdk.otel.configure(TracerProvider(), base_url=str(client.base_url), api_key=api_key)
    tracer = provider.get_tracer("sdk-test")
    with tracer.start_as_current_span("execute_tool lookup_worker") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "lookup_worker_otel")
        span.set_attribute("gen_ai.agent.name", "otel-agent")
        trace_id = format(span.get_span_context().trace_id, "032x")
    assert provider.force_flush(30_000)
    provider.shutdown()
    assert drainer.drain().failed == 0
    [record] = lake_records_for_endpoint("tool:lookup_worker_otel")
    assert (record["agent_id"], record["source"], record["trace_id"]) == ("otel-agent", "otlp", trace_id)


# Last in the module: compaction runs with the clock hours ahead, after which the current hour
# reads from its compacted files (ops written later in this hour would not show until the next run).
def test_a_lost_answer_is_retried_and_the_lake_keeps_each_op_once(local: Local, api_key: str) -> None:  # noqa: F811
    stack, client, drainer = local
    proxy = LosingProxy(str(client.base_url).rstrip("/"))
    ol = opslake_sdk.Opslake(proxy.url, api_key, agent_id="sdk-agent", max_backoff=0.2)
    try:
        op_ids = [ol.record(endpoint="tool:lost_answer", success=True, duration_ms=2) for _ in range(7)]
        assert ol.flush(timeout=30)
    finally:
        ol.close(timeout=5)
        proxy.close()
    assert proxy.lost == 1 and proxy.upstream_statuses == [202, 202]  # the server took the batch twice
    stats = ol.stats
    assert (stats.requests, stats.retries, stats.accepted, stats.failed) == (2, 1, 7, 0)
    ids = [op_id for op_id in op_ids if op_id]
    assert drainer.drain().failed == 0
    assert compact_closed_hours(stack).errors == {}
    assert lake_rows(ids) == dict.fromkeys(ids, 1)  # one op per (reporter_id, op_id), however often sent
