"""Gateway tools: cold import, observation middleware overhead, /sql on the embedded engine.

(a) each gateway handler imported cold against the Lambda-like package directory of
    bench_import.py, plus what /sql adds on its first request (sqlglot and the guard);
(b) the observation middleware's cost: p50/p95 of a trivial route resolved with and without it,
    in-process, with an in-memory queue and no key-name lookup (goal ≤ 1 ms p50);
(c) POST /sql through the local stack's HTTP API on the embedded engine: a point query and a
    GROUP BY over the ops posted first.

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_gateway.py [--runs 5] [--calls 2000] [--ops 2000] [--queries 20]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "bench")]

GATEWAY_HANDLERS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "functions" / "gateway").glob("*.py"))
GUARD_PROBE = """
import time, sys
start = time.perf_counter()
import opslake.tools.sql  # noqa: F401  (sqlglot + the guard: /sql's first request)
print((time.perf_counter() - start) * 1000)
"""


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---- (a) cold imports ----------------------------------------------------------------------------
def cold_imports(runs: int) -> None:
    from bench_import import measure

    print(f"(a) cold import, Lambda-like site, median of {runs} ({'handler':32} median ms  min ms  heaviest)")
    for handler in GATEWAY_HANDLERS:
        try:
            results = [measure(handler) for _ in range(runs)]
        except subprocess.CalledProcessError as exc:
            print(f"    {handler:42} failed to import: {exc.stderr.strip().splitlines()[-1:]}")
            continue
        times = [r[0] for r in results]
        heaviest = ", ".join(f"{name} {us / 1000:.0f}" for us, name in results[-1][2][:3])
        print(f"    {handler:42} {statistics.median(times):8.0f} {min(times):7.0f}  {heaviest}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "layers" / "common")}
    guard = [
        float(subprocess.run([sys.executable, "-c", GUARD_PROBE], capture_output=True, text=True, env=env,
                             check=True).stdout)
        for _ in range(runs)
    ]  # fmt: skip
    print(f"    /sql first request adds sqlglot + guard: median {statistics.median(guard):.0f} ms, "
          f"min {min(guard):.0f} ms (venv site-packages)")  # fmt: skip


# ---- (b) middleware overhead -----------------------------------------------------------------------
def middleware_overhead(calls: int) -> None:
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from opslake.http.identity import KeyNameResolver
    from opslake.http.responses import create_resolver
    from opslake.ingest.observe import Observer, observe, summarize
    from opslake.queue import OpsQueue

    class MemoryQueue(OpsQueue):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def send(self, messages: Sequence[str]) -> None:
            self.messages.extend(messages)

    queue = MemoryQueue()
    names = KeyNameResolver(None)
    plain = create_resolver(enable_validation=False)
    observed = observe(create_resolver(enable_validation=False), Observer(lambda: queue, lambda: names))
    for app in (plain, observed):

        @app.post("/tool")
        def tool(app: Any = app) -> dict[str, int]:
            summarize(app, "12 rows", table="workers")
            return {"rows": 12}

    event = json.loads((ROOT / "events" / "events_post_single.json").read_text())
    event.update(path="/tool", resource="/tool", body=json.dumps({"sql": "SELECT 1", "limit": 10}))
    event["requestContext"].update(resourcePath="/tool", path="/tool")

    def timed(app: Any) -> list[float]:
        samples = []
        for _ in range(calls):
            copied = copy.deepcopy(event)
            start = time.perf_counter()
            answer = app.resolve(copied, None)
            samples.append((time.perf_counter() - start) * 1000)
            assert answer["statusCode"] == 200
        return samples

    with contextlib.redirect_stdout(io.StringIO()):  # Powertools flushes EMF metrics every 100
        timed(plain), timed(observed)  # warm up
        base, with_mw = timed(plain), timed(observed)
    print(f"(b) observation middleware, {calls} calls each, in-process, in-memory queue")
    for label, samples in (("without", base), ("with", with_mw)):
        print(f"    {label:8} p50 {pct(samples, 0.5):.3f} ms  p95 {pct(samples, 0.95):.3f} ms")
    print(f"    overhead p50 {pct(with_mw, 0.5) - pct(base, 0.5):.3f} ms  "
          f"p95 {pct(with_mw, 0.95) - pct(base, 0.95):.3f} ms  ({len(queue.messages)} records built)")  # fmt: skip


# ---- (c) /sql on the local stack ---------------------------------------------------------------
def sql_latency(ops: int, queries: int) -> None:
    import httpx

    from opslake_local.drain import Drainer
    from opslake_local.http import LocalApi
    from opslake_local.stack import QUIET_ENV, LocalStack

    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            assert stack.api_key is not None
            key = {"x-api-key": stack.api_key.value}
            with httpx.Client(base_url=base_url, timeout=120) as client:
                for start in range(0, ops, 500):
                    batch = [
                        {"op_id": f"bench-{i}", "endpoint": f"tool:t{i % 7}", "success": i % 5 != 0,
                         "duration_ms": float(i % 300), "agent_id": f"agent-{i % 13}"}
                        for i in range(start, min(ops, start + 500))
                    ]  # fmt: skip
                    client.post("/events", json={"ops": batch}, headers=key).raise_for_status()
                Drainer(stack, invoker).drain()

                def run(sql: str) -> Callable[[], float]:
                    def once() -> float:
                        t0 = time.perf_counter()
                        answer = client.post("/sql", json={"sql": sql, "limit": 100}, headers=key)
                        elapsed = (time.perf_counter() - t0) * 1000
                        assert answer.status_code == 200, answer.text
                        return elapsed

                    return once

                cases = {
                    "point query": "SELECT * FROM ops WHERE op_id = 'bench-42'",
                    "GROUP BY": "SELECT endpoint, count(*) AS n, avg(duration_ms) AS avg_ms FROM ops "
                    "GROUP BY endpoint ORDER BY n DESC",
                }
                first = {name: run(sql)() for name, sql in cases.items()}  # includes sqlglot import
                print(
                    f"(c) POST /sql over HTTP on the embedded engine, {ops} ops in the lake, {queries} queries each"
                )
                for name, sql in cases.items():
                    samples = [run(sql)() for _ in range(queries)]
                    print(f"    {name:12} p50 {pct(samples, 0.5):6.1f} ms  p95 {pct(samples, 0.95):6.1f} ms  "
                          f"(first call {first[name]:.0f} ms)")  # fmt: skip
        finally:
            api.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()
    cold_imports(args.runs)
    middleware_overhead(args.calls)
    sql_latency(args.ops, args.queries)


if __name__ == "__main__":
    main()
