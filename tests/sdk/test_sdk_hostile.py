# ruff: noqa: F811  (the ``make`` fixture is imported from test_sdk_client and named as a parameter)
"""The Python SDK (``opslake_sdk``) under what real agent code and real networks do to it: generator
and async-generator tools, class- and static methods, callables that return coroutines, arguments
and results that are huge or cannot be printed, forks, many threads at once, a playbooks server
that trickles or floods, a 413, reserved claims; the SDK never raises into the agent, never loses
count of an op, and never sends what the server would refuse for a reason it could have fixed."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import string
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import opslake_sdk
from opslake_sdk import ops as sdk_ops
from opslake_sdk.retry import RetryPolicy, is_retryable, parse_retry_after
from tests.sdk.test_sdk_client import ENTRY, Factory, FakeApi, accept_all, make  # noqa: F401  (make: the fixture)
from tests.unit.conftest import no_sockets  # noqa: F401  (autouse: these tests open no sockets)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


# ---- tools that are not plain functions ---------------------------------------------------------


def test_a_generator_tool_stays_a_generator_and_its_op_covers_the_iteration(make: Factory) -> None:
    ol, api = make()

    @ol.observe()
    def stream_rows(n: int) -> Iterator[int]:
        yield from range(n)
        if n == 2:
            raise ValueError("the cursor died")

    # Frameworks tell streaming tools by inspect: the decorator must not hide what the tool is.
    assert inspect.isgeneratorfunction(stream_rows)
    assert list(stream_rows(3)) == [0, 1, 2]
    rows = stream_rows(2)
    assert next(rows) == 0 and next(rows) == 1
    with pytest.raises(ValueError, match="the cursor died"):
        next(rows)
    early = stream_rows(100)
    assert next(early) == 0
    early.close()  # the consumer stopped early: not a failure of the tool
    assert ol.flush(timeout=5)
    ok, failed, stopped = api.ops()
    assert (ok["endpoint"], ok["success"], ok["input_summary"]) == ("tool:stream_rows", True, "(3)")
    assert ok["output_summary"] == "<generator: 3 items>"
    assert (failed["success"], failed["error_type"], failed["error"]) == (
        False,
        "ValueError",
        "the cursor died",
    )
    assert stopped["success"] is True and stopped["output_summary"] == "<generator: 1 items, closed early>"


def test_an_async_generator_tool_stays_one_and_its_op_covers_the_iteration(make: Factory) -> None:
    ol, api = make()

    @ol.observe("tool:tokens")
    async def tokens(text: str) -> AsyncIterator[str]:
        for word in text.split():
            await asyncio.sleep(0)
            yield word
        if text.startswith("bad"):
            raise RuntimeError("stream broke")

    assert inspect.isasyncgenfunction(tokens)

    async def agent() -> list[str]:
        words = [word async for word in tokens("a b c")]
        with pytest.raises(RuntimeError):
            async for _ in tokens("bad x"):
                pass
        return words

    assert asyncio.run(agent()) == ["a", "b", "c"]
    assert ol.flush(timeout=5)
    ok, failed = api.ops()
    assert (ok["success"], ok["output_summary"]) == (True, "<async generator: 3 items>")
    assert (failed["success"], failed["error_type"]) == (False, "RuntimeError")


def test_classmethods_and_staticmethods_can_be_observed_in_either_order(make: Factory) -> None:
    ol, api = make()

    class Tools:
        @ol.observe()
        @classmethod
        def by_class(cls, x: int) -> str:
            return f"{cls.__name__}:{x}"

        @ol.observe
        @staticmethod
        def plain(x: int) -> int:
            return x + 1

        @classmethod
        @ol.observe("tool:inner")
        def inner(cls, x: int) -> int:
            return x * 2

        @ol.observe  # bare, above a classmethod (which is not callable itself)
        @classmethod
        def bare(cls, x: int) -> int:
            return x * 3

    assert Tools.by_class(1) == "Tools:1" and Tools().by_class(2) == "Tools:2"
    assert Tools.plain(1) == 2 and Tools().plain(2) == 3
    assert Tools.inner(4) == 8
    assert Tools.bare(5) == 15
    assert ol.flush(timeout=5)
    endpoints = [(op["endpoint"], op["input_summary"]) for op in api.ops()]
    assert endpoints == [
        ("tool:by_class", "(1)"),
        ("tool:by_class", "(2)"),
        ("tool:plain", "(1)"),
        ("tool:plain", "(2)"),
        ("tool:inner", "(4)"),
        ("tool:bare", "(5)"),
    ]


def test_a_sync_callable_returning_a_coroutine_is_timed_until_it_is_awaited(make: Factory) -> None:
    ol, api = make()

    async def _impl(x: int) -> int:
        await asyncio.sleep(0)
        if x < 0:
            raise ValueError("negative")
        return x * 10

    def tool(x: int) -> Any:  # what a framework's own wrapper of an async tool often looks like
        return _impl(x)

    observed = ol.observe("tool:wrapped")(tool)

    async def agent() -> int:
        with pytest.raises(ValueError):
            await observed(-1)
        return int(await observed(2))

    assert asyncio.run(agent()) == 20
    assert ol.flush(timeout=5)
    failed, ok = api.ops()
    assert (failed["success"], failed["error_type"]) == (False, "ValueError")
    assert (ok["success"], ok["output_summary"]) == (True, "20")


# ---- arguments, results and exceptions that fight back -------------------------------------------


class Recursive:
    def __repr__(self) -> str:
        return repr(self)


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def test_huge_unprintable_and_recursive_values_cost_nothing_and_keep_the_op(make: Factory) -> None:
    ol, api = make()
    blob = b"\x00" * 20_000_000

    @ol.observe()
    def tool(*args: Any) -> Any:
        return args[0]

    tracemalloc.start()
    try:
        assert tool(blob) is blob
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # a bounded summary, not a 80 MB repr of 20 MB of bytes
    huge = 10**5000  # repr() of it raises ValueError (int max str digits)
    assert tool(huge) == huge
    assert tool(Recursive()) is not None
    assert (
        ol.record(endpoint="tool:attr", success=True, duration_ms=1, attributes={"n": huge, "m": 7})
        is not None
    )
    assert ol.flush(timeout=5)
    by_bytes, by_int, by_recursive, by_attribute = api.ops()
    assert len(by_bytes["input_summary"]) <= 2_000 and by_bytes["input_summary"].startswith("(b'\\x00")
    assert len(by_int["input_summary"]) <= 2_000 and by_recursive["success"] is True
    assert by_attribute["attributes"]["m"] == 7 and isinstance(by_attribute["attributes"]["n"], str)
    assert ol.stats.accepted == 4 and ol.stats.failed == 0


def test_an_exception_that_cannot_be_printed_still_makes_its_op(make: Factory) -> None:
    ol, api = make()

    @ol.observe()
    def tool() -> None:
        raise BadStr()

    with pytest.raises(BadStr):
        tool()
    assert ol.flush(timeout=5)
    [op] = api.ops()
    assert (op["success"], op["error_type"], op["error"]) == (False, "BadStr", "BadStr")


def test_a_broken_summarizer_costs_the_summary_not_the_op(make: Factory) -> None:
    ol, api = make()

    @ol.observe(summarize_args=lambda *args: 1 / 0)
    def tool(x: int) -> int:
        return x

    assert tool(5) == 5
    assert ol.flush(timeout=5)
    [op] = api.ops()
    assert op["endpoint"] == "tool:tool" and "input_summary" not in op and op["output_summary"] == "5"
    assert ol.stats.errors == 1


# ---- what the server would refuse -----------------------------------------------------------------


def test_reserved_claims_are_never_sent(make: Factory) -> None:
    ol, api = make(source=" LLM ")
    ol.record(endpoint="tool:a", success=True, duration_ms=1, event_kind="Log")
    with ol.op("tool:b", event_kind="log"):
        pass
    ol.record(endpoint="tool:c", success=True, duration_ms=1, event_kind="catalog")
    assert ol.flush(timeout=5)
    a, b, c = api.ops()
    assert {op.get("source") for op in (a, b, c)} == {"sdk"}
    assert "event_kind" not in a and "event_kind" not in b and c["event_kind"] == "catalog"


def test_a_413_splits_the_batch_and_keeps_the_op_ids(make: Factory) -> None:
    too_large = httpx.Response(413, json={"message": "the request body is too large"})
    ol, api = make(too_large, too_large)
    op_ids = [ol.record(endpoint="tool:t", success=True, duration_ms=1) for _ in range(4)]
    assert ol.flush(timeout=5)
    sizes = [len(batch) for batch in api.batches()]
    assert sizes == [4, 2, 1, 1, 2]
    delivered = [op["op_id"] for batch in api.batches()[2:] for op in batch]
    assert delivered == op_ids  # each op once, in order, under the id it was first sent with
    stats = ol.stats
    assert (stats.accepted, stats.rejected, stats.failed, stats.pending) == (4, 0, 0, 0)


def test_a_single_op_refused_as_too_large_is_rejected_not_retried(make: Factory) -> None:
    ol, api = make(*[httpx.Response(413, json={"message": "too large"})] * 5)
    ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    assert len(api.batches()) == 1
    assert (ol.stats.rejected, ol.stats.accepted) == (1, 0)


def test_retry_after_values_that_are_odd() -> None:
    policy = RetryPolicy(max_backoff_s=30)
    for value, expected in [("1e309", 30), ("inf", 30), ("-5", 0), ("nan", None), ("  7 ", 7)]:
        parsed = parse_retry_after(value)
        assert (parsed is None and expected is None) or policy.delay(1, parsed) == expected, value


# ---- the buffer, threads, processes -------------------------------------------------------------


def test_the_buffer_is_bounded_in_bytes_too(make: Factory) -> None:
    gate = threading.Event()

    def held(request: httpx.Request) -> httpx.Response:
        gate.wait(10)
        return accept_all(request)

    ol, _ = make(held, max_queue=10_000, max_queue_bytes=1_000_000, max_batch_ops=1)
    wide = {f"k{i}": "語" * 1_000 for i in range(50)}  # ~50,000 characters an op
    for _ in range(200):
        ol.record(endpoint="tool:wide", success=True, duration_ms=1, attributes=wide)
    stats = ol.stats
    assert stats.queued + stats.dropped == 200 and stats.queued <= 25 and stats.dropped >= 175
    gate.set()
    assert ol.flush(timeout=10) and ol.stats.accepted == ol.stats.queued


def test_many_threads_at_once_every_op_counted_once(make: Factory) -> None:
    ol, api = make(max_queue=200_000, flush_interval=0.05)

    @ol.observe()
    def tool(n: int) -> int:
        return n

    threads, calls = 32, 1_000  # 32 x 5,000 was run once by hand (11 s here): same result
    barrier = threading.Barrier(threads)
    results: list[int] = []

    def work() -> None:
        barrier.wait()
        results.append(sum(tool(n) for n in range(calls)))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert results == [sum(range(calls))] * threads
    assert ol.flush(timeout=60)
    stats = ol.stats
    assert (stats.queued, stats.accepted, stats.dropped, stats.pending) == (
        threads * calls,
        threads * calls,
        0,
        0,
    )
    op_ids = [op["op_id"] for op in api.ops()]
    assert len(op_ids) == len(set(op_ids)) == threads * calls


def _run(script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


FORK_SCRIPT = """
import json, os, signal, sys, threading, time, httpx, opslake_sdk

def server(request):
    if request.url.path.endswith("/playbooks"):
        return httpx.Response(200, json={"entries": [], "generated_at": None}, headers={"etag": '"e"'})
    ops = json.loads(request.content)["ops"]
    print(json.dumps({"pid": os.getpid(), "endpoints": [o["endpoint"] for o in ops]}), flush=True)
    return httpx.Response(202, json={"accepted": [o["op_id"] for o in ops], "rejected": []})

ol = opslake_sdk.Opslake("http://opslake.test", "key", transport=httpx.MockTransport(server),
                         flush_interval=0.01)
ol.record(endpoint="tool:parent", success=True, duration_ms=1)
assert ol.flush(timeout=5)
ol.playbooks(task_class="x")  # the reader client exists, with its pool and lock

# Another thread holds every lock of the client at the moment of the fork (a worker mid-send,
# a playbooks read, a tool call): the child inherits them held, by a thread it does not have.
held, release = threading.Event(), threading.Event()
def hold():
    with ol._pipeline._cond, ol._reader_lock, ol._playbook_cache._lock:
        held.set()
        release.wait()
holder = threading.Thread(target=hold)
holder.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(15)  # a deadlocked child must not outlive the test
    stats = ol.stats
    ol.record(endpoint="tool:child", success=True, duration_ms=1)
    advice = ol.playbooks(task_class="x")
    ok = ol.flush(timeout=5)
    print(json.dumps({"child": True, "queued": ol.stats.queued, "flushed": ok, "stale": advice.stale,
                      "queued_before": stats.queued}), flush=True)
    ol.close(timeout=2)
    os._exit(0)
release.set()
holder.join()
for _ in range(300):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    status = "deadlocked"
print(json.dumps({"child_status": status}), flush=True)
ol.close(timeout=2)
"""


def test_a_forked_child_neither_deadlocks_nor_loses_its_ops() -> None:
    done = _run(FORK_SCRIPT, timeout=40)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    child = next(line for line in lines if line.get("child"))
    assert child == {"child": True, "queued": 1, "flushed": True, "stale": False, "queued_before": 0}
    sent = [line for line in lines if "endpoints" in line]
    parent_pid = sent[0]["pid"]
    assert [line["endpoints"] for line in sent if line["pid"] == parent_pid] == [["tool:parent"]]
    assert [line["endpoints"] for line in sent if line["pid"] != parent_pid] == [["tool:child"]]
    assert {"child_status": 0} in lines


def test_exit_with_a_hung_network_finishes_within_exit_timeout() -> None:
    script = """
    import threading, time, httpx, opslake_sdk

    def hung(request):
        threading.Event().wait(60)  # accepts and never answers
        return httpx.Response(202)

    ol = opslake_sdk.Opslake("http://opslake.test", "key", transport=httpx.MockTransport(hung),
                             exit_timeout=0.5, flush_interval=0)
    for n in range(3):
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
    time.sleep(0.1)
    print("exiting", flush=True)
    """
    done = _run(script, timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting"


# ---- reading playbooks from a server that misbehaves ----------------------------------------------


class Trickle(httpx.SyncByteStream):
    """A body that comes a few bytes at a time, slowly, for a long time (or forever)."""

    def __init__(self, chunks: int, delay: float, chunk: bytes = b" ") -> None:
        self.chunks, self.delay, self.chunk, self.read = chunks, delay, chunk, 0

    def __iter__(self) -> Iterator[bytes]:
        for _ in range(self.chunks):
            time.sleep(self.delay)
            self.read += 1
            yield self.chunk


def test_a_playbooks_read_is_bounded_in_time_when_the_server_trickles(make: Factory) -> None:
    ol, api = make(read_timeout=0.2)
    body = Trickle(chunks=200, delay=0.02)
    api.playbooks = lambda request: httpx.Response(200, stream=body, headers={"etag": '"1"'})
    advice = ol.playbooks(task_class="question")
    assert advice.stale and advice.entries == () and body.read < 200
    assert ol.stats.playbook_errors == 1


def test_a_playbooks_read_is_bounded_in_size(make: Factory) -> None:
    ol, api = make()
    body = Trickle(chunks=10_000, delay=0, chunk=b" " * 65_536)  # 655 MB of whitespace
    api.playbooks = lambda request: httpx.Response(200, stream=body, headers={"etag": '"1"'})
    advice = ol.playbooks(task_class="question")
    assert advice.stale and "large" in (advice.error or "") and body.read < 1_000


def test_a_304_without_a_cached_answer_is_stale_not_an_error(make: Factory) -> None:
    ol, api = make()
    api.playbooks = lambda request: httpx.Response(304, headers={"etag": '"1"'})
    advice = ol.playbooks(task_class="question")
    assert advice.stale and advice.entries == () and not advice.not_modified


def test_aplaybooks_never_raises_even_without_an_executor(make: Factory) -> None:
    ol, api = make()
    api.playbooks = lambda request: httpx.Response(200, json={"entries": [ENTRY]}, headers={"etag": '"1"'})

    async def agent() -> opslake_sdk.Playbooks:
        loop = asyncio.get_running_loop()
        await loop.shutdown_default_executor()  # e.g. during the loop's teardown
        return await ol.aplaybooks(task_class="question")

    advice = asyncio.run(agent())
    assert advice.entry_ids == ["pb_1"] or advice.stale


def test_report_followed_takes_an_answer_its_entries_or_one_id(make: Factory) -> None:
    ol, api = make()
    api.playbooks = lambda request: httpx.Response(
        200, json={"entries": [ENTRY, {**ENTRY, "entry_id": "pb_2"}]}, headers={"etag": '"1"'}
    )
    advice = ol.playbooks(task_class="question")
    ol.report_followed(advice)
    ol.report_followed(list(advice))
    ol.report_followed("pb_1")
    assert ol.flush(timeout=5)
    assert [op["attributes"]["entry_ids"] for op in api.ops()] == ["pb_1,pb_2", "pb_1,pb_2", "pb_1"]


def test_the_package_version_is_the_distributions() -> None:
    text = (ROOT / "sdk/python/pyproject.toml").read_text()
    assert f'version = "{opslake_sdk.__version__}"' in text


_ = sdk_ops  # the module under test, for debugging sessions


def test_close_from_a_signal_handler_that_interrupted_a_tool_call(make: Factory) -> None:
    ol, api = make(flush_interval=60)
    for _ in range(3):
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
    # A signal handler runs on the main thread, possibly while a tool call there holds the
    # buffer's (reentrant) lock in put(); close() from it must still let the sender finish.
    with ol._pipeline._cond:
        assert ol.close(timeout=2)
    assert len(api.ops()) == 3 and ol.stats.accepted == 3


def test_an_http_client_given_to_the_sdk_stays_open_after_close() -> None:
    api = FakeApi()
    given = httpx.Client(base_url="http://opslake.test", transport=httpx.MockTransport(api))
    ol = opslake_sdk.Opslake(http_client=given)
    ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.close(timeout=5) and len(api.ops()) == 1
    assert not given.is_closed  # the caller's to close
    given.close()


MULTIPROCESSING_SCRIPT = """
import json, os, sys, multiprocessing, httpx, opslake_sdk

def server(request):
    ops = json.loads(request.content)["ops"]
    line = json.dumps({"pid": os.getpid(), "inputs": [o["input_summary"] for o in ops]}) + "\\n"
    os.write(1, line.encode())  # one write: the processes share the pipe
    return httpx.Response(202, json={"accepted": [o["op_id"] for o in ops], "rejected": []})

ol = opslake_sdk.Opslake("http://opslake.test", "key", transport=httpx.MockTransport(server))

@ol.observe()
def tool(n):
    return n * 2

if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    child = context.Process(target=tool, args=(1,))
    child.start()
    child.join(20)
    pool = context.Pool(2)
    assert pool.map(tool, range(2, 8)) == [n * 2 for n in range(2, 8)]
    pool.close()
    pool.join()
    tool(0)
"""


def test_multiprocessing_children_send_their_ops_as_they_exit() -> None:
    done = _run(MULTIPROCESSING_SCRIPT, timeout=40)
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line) for line in done.stdout.splitlines()]
    inputs = sorted(summary for line in sent for summary in line["inputs"])
    assert inputs == sorted(f"({n})" for n in range(8))  # the parent's op and every child's
    assert len({line["pid"] for line in sent}) >= 3


def test_whatever_the_agent_passes_the_server_accepts_the_op() -> None:
    """Random hostile values through build_op and fit_record, validated by the server's own
    ``validate_op``: nothing the SDK sends is refused for something it could have cut."""
    from datetime import UTC, datetime

    from opslake.ingest.events import validate_op

    rng = random.Random(14)
    alphabet = string.printable + "語é\u2028\u0085\x00\x01\x1f\ud800 \t\n🙂"

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 199, 200, 201, 900, 5000])))

    for _ in range(100):
        values: list[Any] = [text(), 10**30, 1.5, float("nan"), True, None, [1, 2], b"\xff" * 3000]
        op = sdk_ops.build_op(
            endpoint=text(),
            success=rng.random() < 0.5,
            duration_ms=rng.choice([0, -1, 1e300, float("inf"), 3.3]),
            op_id=text() or None,
            agent_id=text(),
            session_id=text(),
            task_class=text(),
            trace_id=text(),
            source=rng.choice(["llm", " LLM ", text()]),
            event_kind=rng.choice(["log", " Log", text()]),
            error=text(),
            error_type=text(),
            input_summary=text(),
            output_summary=text(),
            attributes={
                "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 50, 200]))): rng.choice(values)
                for _ in range(rng.choice([0, 5, 60]))
            },
        )
        raw = json.loads(sdk_ops.fit_record(op))
        validate_op(raw, reporter_id="r" * 200, received_at=datetime.now(UTC))  # raises if refused


def test_observing_does_not_touch_the_agents_seeded_random_sequence(make: Factory) -> None:
    ol, api = make()

    @ol.observe()
    def tool() -> float:
        return random.random()

    random.seed(42)
    unobserved = [random.random() for _ in range(3)]
    random.seed(42)
    observed = [tool() for _ in range(3)]
    assert observed == unobserved  # an eval run seeded for reproducibility stays reproducible
    random.seed(42)
    again = [tool() for _ in range(3)]
    assert ol.flush(timeout=5)
    op_ids = [op["op_id"] for op in api.ops()]
    assert again == unobserved and len(set(op_ids)) == 6  # and the op ids are not the seed's


def test_long_ids_stay_distinct_and_stable(make: Factory) -> None:
    ol, api = make()
    base = "run/" + "x" * 300
    for suffix in ("a", "b", "a"):
        ol.record(
            endpoint="tool:t", success=True, duration_ms=1, op_id=base + suffix, session_id=base + suffix
        )
    assert ol.flush(timeout=5)
    a, b, a_again = api.ops()
    assert len(a["op_id"]) <= 200 and a["op_id"].startswith("run/xxx")
    assert a["op_id"] != b["op_id"] and a["op_id"] == a_again["op_id"]  # distinct ops stay distinct
    assert a["session_id"] != b["session_id"] and a["session_id"] == a_again["session_id"]
    assert ol.stats.accepted == 3


def test_without_the_otel_extra_the_package_imports_whole() -> None:
    script = """
    import sys
    sys.modules["opentelemetry"] = None  # as if the extra were not installed
    from opslake_sdk import *
    import opslake_sdk
    print(hasattr(opslake_sdk, "otel"), Opslake.__name__)
    try:
        import opslake_sdk.otel
    except ImportError as exc:
        print("opslake-sdk[otel]" in str(exc))
    """
    done = _run(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "Opslake", "True"]


def test_a_call_with_a_million_arguments_prints_a_few(make: Factory) -> None:
    ol, api = make()

    @ol.observe()
    def tool(*rows: Any, **named: Any) -> int:
        return len(rows) + len(named)

    rows = [object() for _ in range(200_000)]
    named = {f"k{i}": i for i in range(200_000)}
    calls: list[str] = []
    real = sdk_ops.safe_repr

    def counting(value: Any) -> str:
        calls.append("")
        return real(value)

    sdk_ops.safe_repr = counting
    try:
        assert tool(*rows) == 200_000 and tool(**named) == 200_000
    finally:
        sdk_ops.safe_repr = real
    assert len(calls) <= 110  # 50 arguments a call (and its result), not one repr per argument
    assert ol.flush(timeout=5)
    by_rows, by_named = (op["input_summary"] for op in api.ops())
    assert by_rows.endswith("… 199950 more)") and by_named.endswith("… 199950 more)")


def test_the_sdk_never_logs_while_holding_the_lock_tool_calls_wait_on(make: Factory) -> None:
    refused = httpx.Response(400, json={"message": "no op was accepted"})
    gate = threading.Event()

    def held(request: httpx.Request) -> httpx.Response:
        gate.wait(10)
        return refused

    ol, _ = make(held, max_queue=2, max_batch_ops=1)
    holding: list[bool] = []

    class Probe(logging.Handler):  # a handler that is slow (a network log shipper) would hold them
        def emit(self, record: logging.LogRecord) -> None:
            holding.append(ol._pipeline._cond._is_owned())  # type: ignore[attr-defined]

    probe = Probe(logging.WARNING)
    logger = logging.getLogger("opslake_sdk")
    logger.addHandler(probe)
    try:
        for _ in range(6):  # the first is in flight, two wait, the rest are dropped (a warning)
            ol.record(endpoint="tool:t", success=True, duration_ms=1)
        gate.set()
        assert ol.flush(timeout=5)  # three refused batches: an error each
    finally:
        logger.removeHandler(probe)
    assert len(holding) >= 2 and not any(holding)


def test_a_trickling_answer_to_a_batch_is_given_up_and_the_batch_resent(make: Factory) -> None:
    body = Trickle(chunks=200, delay=0.02)
    ol, api = make(httpx.Response(202, stream=body), request_timeout=0.2)
    ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=10)
    assert body.read < 200  # the sender did not sit through the whole trickle
    first, second = api.batches()
    assert first == second and (ol.stats.retries, ol.stats.accepted) == (1, 1)


def test_a_2xx_that_is_not_opslakes_answer_is_not_counted_as_accepted(make: Factory) -> None:
    page = httpx.Response(200, text="<!doctype html><title>Docs</title>")  # a wrong OPSLAKE_URL
    ol, _ = make(*[page] * 10, max_attempts=3)
    ol.record(endpoint="tool:t", success=True, duration_ms=1)
    assert ol.flush(timeout=5)
    stats = ol.stats
    assert (stats.accepted, stats.failed, stats.failed_batches, stats.requests) == (0, 1, 1, 3)


@pytest.mark.parametrize(
    "url", ["https://api.example.com/prod/events", " https://api.example.com/prod/v1/traces/ "]
)
def test_a_routes_url_given_as_the_base_url_still_reaches_events(url: str) -> None:
    api = FakeApi()
    ol = opslake_sdk.Opslake(url, "key", transport=httpx.MockTransport(api))
    try:
        ol.record(endpoint="tool:t", success=True, duration_ms=1)
        assert ol.flush(timeout=5)
        assert str(api.requests[0].url) == "https://api.example.com/prod/events"
    finally:
        ol.close()
    exporter = opslake_sdk.otel.exporter(url, "key")
    assert exporter._endpoint == "https://api.example.com/prod/v1/traces"
    exporter.shutdown()


def test_the_sdk_copies_of_the_server_limits_equal_the_server_ones() -> None:
    """The SDK is published on its own and cannot import the layer, so it repeats the /events limits;
    a limit changed on one side only would make the server refuse or cut what the SDK sends."""
    from opslake.ingest import events
    from opslake.models import ops as server_ops

    for name in (
        "MAX_ID_CHARS", "MAX_SUMMARY_CHARS", "MAX_ERROR_CHARS", "MAX_ATTRIBUTES", "MAX_ATTRIBUTE_KEY_CHARS",
        "MAX_ATTRIBUTE_VALUE_CHARS", "MAX_RECORD_BYTES", "MAX_DURATION_MS", "TRUNCATION_MARK",
        "RESERVED_EVENT_KINDS", "RESERVED_SOURCES",
    ):  # fmt: skip
        assert getattr(sdk_ops, name) == getattr(server_ops, name), name
    assert (sdk_ops.MAX_OPS_PER_REQUEST, sdk_ops.MAX_REQUEST_BYTES) == (
        events.MAX_OPS_PER_REQUEST,
        events.MAX_REQUEST_BYTES,
    )


@pytest.mark.parametrize(
    ("status", "retried"),
    [(429, True), (500, True), (501, True), (503, True), (599, True), (400, False), (404, False), (413, False),
     (422, False), (200, False)],
)  # fmt: skip
def test_only_429_and_5xx_invite_a_resend(status: int, retried: bool) -> None:
    assert is_retryable(status) is retried


def test_the_package_version_is_the_distribution_version() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "sdk/python/pyproject.toml").read_text())["project"]
    assert opslake_sdk.__version__ == project["version"]
