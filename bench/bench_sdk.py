"""What the Python SDK (``opslake_sdk``) costs an agent: time added to each decorated tool call,
and how many ops per second its sender moves, on one core, with an in-memory API
(``httpx.MockTransport``: no network, so the figures are the SDK's own work).

- ``call overhead``: a decorated no-op function against the same function undecorated (median of
  rounds of 20,000 calls), with argument and result summaries on and off. A call only builds its
  op and appends it to the buffer; the figure is that work (the sender is held in its first
  request meanwhile, so its encoding and sending are not counted here but in ``sender``).
- ``sender``: ops queued as fast as possible, then ``flush()``: ops/s from the first op to the
  last accepted (batches of 500, each op JSON-encoded once).
- ``dropped``: the same with a 1,000-op buffer: every call still returns at once; the overflow is
  counted, not waited for.

    .venv/bin/python bench/bench_sdk.py [--calls 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

import opslake_sdk


def _accept(request: httpx.Request) -> httpx.Response:
    ops = json.loads(request.content)["ops"]
    return httpx.Response(202, json={"accepted": [op["op_id"] for op in ops], "rejected": []})


def _client(gate: threading.Event | None = None, **options: Any) -> opslake_sdk.Opslake:
    def answer(request: httpx.Request) -> httpx.Response:
        if gate is not None:
            gate.wait()  # the sender stays in its first request: calls are measured on their own
        return _accept(request)

    return opslake_sdk.Opslake(
        "http://opslake.bench", "key", transport=httpx.MockTransport(answer), **options
    )


def _per_call_us(func: Callable[..., Any], calls: int) -> float:
    args = ("SELECT name FROM workers WHERE city = 'Austin'",)
    start = time.perf_counter()
    for _ in range(calls):
        func(*args, limit=10)
    return (time.perf_counter() - start) / calls * 1e6


def call_overhead(calls: int, rounds: int) -> dict[str, float]:
    def tool(sql: str, limit: int = 10) -> list[dict[str, str]]:
        return [{"name": "Ana", "city": "Austin"}]

    figures: dict[str, list[float]] = {"plain": [], "observed": [], "observed, no summaries": []}
    for _ in range(rounds):
        gate = threading.Event()
        ol = _client(gate, max_queue=calls * 3)
        observed = ol.observe()(tool)
        bare = ol.observe(capture_args=False, capture_result=False)(tool)
        figures["plain"].append(_per_call_us(tool, calls))
        figures["observed"].append(_per_call_us(observed, calls))
        figures["observed, no summaries"].append(_per_call_us(bare, calls))
        gate.set()
        ol.close(timeout=60)
    return {name: statistics.median(values) for name, values in figures.items()}


def sender(ops: int, max_queue: int) -> tuple[float, opslake_sdk.Stats]:
    ol = _client(max_queue=max_queue)
    start = time.perf_counter()
    for n in range(ops):
        ol.record(endpoint="tool:bench", success=True, duration_ms=1.5, input_summary=f"call {n}")
    ol.flush(timeout=120)
    elapsed = time.perf_counter() - start
    ol.close(timeout=5)
    return ops / elapsed, ol.stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    overhead = call_overhead(options.calls, options.rounds)
    plain = overhead["plain"]
    print(f"call overhead (median of {options.rounds} rounds of {options.calls:,} calls):")
    for name, us in overhead.items():
        added = "" if name == "plain" else f"  (+{us - plain:.1f} µs)"
        print(f"  {name:<24} {us:7.1f} µs/call{added}")
    rate, stats = sender(50_000, 100_000)
    print(
        f"sender: {rate:,.0f} ops/s queued and accepted ({stats.requests} requests, {stats.accepted:,} accepted)"
    )
    rate, stats = sender(50_000, 1_000)
    print(
        f"1,000-op buffer, 50,000 ops at once: {stats.accepted:,} accepted, {stats.dropped:,} dropped (counted)"
    )


if __name__ == "__main__":
    main()
