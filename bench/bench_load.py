"""A fleet on the local stack: concurrent clients post 100–500-op requests to POST /events.

Starts the local stack as ``opslake local up`` does (moto server from template.yaml, the real
handlers behind the local HTTP API, the background SQS → writer drainer, the scheduler), then
``--clients`` client processes post requests of 100–500 ops (``--min-ops``/``--max-ops``) with
the local API key, one after the other each, for ``--seconds`` or until ``--max-requests`` in all.
Then it waits for the drainer to empty the queue (at most ``--drain-timeout`` seconds) and reads
every Parquet object under ``ops/`` back.

Reports accepted ops/s, p50/p95/max request latency, 4xx/5xx counts, the queue sampled every
``--sample-s`` (depth, in flight, and the age of the oldest message each writer batch received:
the queue lag), the drainer's throughput, and whether every accepted op landed exactly once: each
accepted (reporter_id, op_id) is counted in the raw Parquet objects, before any dedupe (lost = 0
copies, duplicated = more than one), and no op that was not accepted landed.

The op texts are not ours: error texts are AWS's own error shapes (name and documentation) and
input summaries are the request examples of AWS's API models, both as botocore ships them in the
venv (``botocore/data/*/service-2.json.gz`` and ``examples-1.json``).

Loopback only, bounded in time and requests; prints figures and asserts nothing (CI never runs it).
``--code DIR`` runs another checkout's stack (e.g. the worktree of the commit before a change).

    .venv/bin/python bench/bench_load.py [--seconds 60] [--clients 4] [--code DIR]
"""

from __future__ import annotations

import argparse
import gzip
import html
import io
import json
import multiprocessing
import os
import random
import re
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BOTOCORE_DATA = Path(str(__import__("botocore").__file__)).parent / "data"
_TAG = re.compile(r"<[^>]+>")


def corpus(services: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Error texts and (operation, example input) pairs from the first ``services`` AWS API models
    botocore ships: text written by someone else, shaped like what agents report."""
    errors: list[str] = []
    inputs: list[tuple[str, str]] = []
    for service_dir in sorted(p for p in BOTOCORE_DATA.iterdir() if p.is_dir())[:services]:
        versions = sorted(p for p in service_dir.iterdir() if p.is_dir())
        if not versions:
            continue
        latest = versions[-1]
        model_path = latest / "service-2.json.gz"
        if model_path.exists():
            model = json.loads(gzip.decompress(model_path.read_bytes()))
            for name, shape in model.get("shapes", {}).items():
                if shape.get("exception"):
                    doc = " ".join(html.unescape(_TAG.sub(" ", shape.get("documentation", ""))).split())
                    errors.append(f"{service_dir.name}: {name}: {doc}"[:2000])
        examples_path = latest / "examples-1.json"
        if examples_path.exists():
            examples = json.loads(examples_path.read_text()).get("examples", {})
            for operation, cases in examples.items():
                for case in cases:
                    if case.get("input"):
                        text = json.dumps(case["input"], separators=(",", ":"))[:2000]
                        inputs.append((f"aws:{service_dir.name}.{operation}"[:200], text))
    return errors, inputs


@dataclass
class ClientResult:
    """What one client process saw."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    accepted: list[str] = field(default_factory=list)
    rejected: int = 0
    sent_ops: int = 0
    errors: list[str] = field(default_factory=list)


def client_run(
    index: int,
    base_url: str,
    api_key: str,
    start_at: float,
    stop_at: float,
    max_requests: int,
    ops_range: tuple[int, int],
    texts: tuple[list[str], list[tuple[str, str]]],
) -> ClientResult:
    """One agent runtime: requests one after the other until ``stop_at`` (wall clock)."""
    import httpx

    errors, inputs = texts
    rng = random.Random(index)
    result = ClientResult()
    agent = f"fleet-agent-{index}"
    while time.time() < start_at:
        time.sleep(0.01)
    with httpx.Client(base_url=base_url, timeout=120, headers={"x-api-key": api_key}) as client:
        for request in range(max_requests):
            if time.time() >= stop_at:
                break
            ops = []
            for i in range(rng.randint(*ops_range)):
                endpoint, summary = rng.choice(inputs)
                failed = rng.random() < 0.2
                op: dict[str, Any] = {
                    "op_id": str(uuid.uuid4()),
                    "endpoint": endpoint,
                    "success": not failed,
                    "duration_ms": round(rng.uniform(2, 4000), 1),
                    "agent_id": agent,
                    "session_id": f"{agent}-s{request // 5}",
                    "input_summary": summary,
                    "attributes": {"attempt": str(i % 3), "region": "us-east-1"},
                }
                if failed:
                    op["error"] = rng.choice(errors)
                ops.append(op)
            body = json.dumps({"ops": ops}).encode()
            started = time.perf_counter()
            try:
                answer = client.post("/events", content=body, headers={"content-type": "application/json"})
            except httpx.HTTPError as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            result.latencies.append(time.perf_counter() - started)
            result.statuses[answer.status_code] += 1
            result.sent_ops += len(ops)
            if answer.status_code == 202:
                payload = answer.json()
                result.accepted += payload["accepted"]
                result.rejected += len(payload["rejected"])
    return result


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def measured_drainer(drainer: Any) -> Any:
    """A subclass of the stack's ``Drainer`` (of whichever checkout is on the path: hence built from
    the class, not imported) that times each writer batch and the age of its oldest message:
    ``batches`` holds (time, messages, ops, busy s, lag s). ``load_stack`` runs it."""

    class MeasuredDrainer(drainer):
        """The stack's drainer, timing each writer batch and the age of its oldest message."""

        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.batches: list[tuple[float, int, int, float, float]] = []  # t, messages, ops, busy s, lag s

        def drain_source(self, source: Any) -> Any:
            started = time.perf_counter()
            original = self._receive  # type: ignore[has-type]  # the base is known at run time only
            seen: dict[str, Any] = {}

            def receive(url: str, batch_size: int) -> list[dict[str, Any]]:
                got = original(url, batch_size)
                seen["messages"] = got
                return got

            self._receive = receive
            try:
                result = super().drain_source(source)
            finally:
                del self._receive
            messages = seen.get("messages") or []
            if messages and source.queue == "OpsQueue":
                now_ms = time.time() * 1000
                oldest = min(int(m["Attributes"]["SentTimestamp"]) for m in messages)
                ops = sum(m["Body"].count("\n") + 1 for m in messages)
                self.batches.append(
                    (time.time(), len(messages), ops, time.perf_counter() - started, (now_ms - oldest) / 1000)
                )
            return result

    return MeasuredDrainer


def load_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every load bench takes: how long, how many clients, and the stack's."""
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument(
        "--poll-s", type=float, default=0.2, help="the drainer's poll when the queue is empty"
    )
    parser.add_argument(
        "--containers",
        type=int,
        default=2,
        help="processes the API's functions run in (opslake_local.containers); 0: in this process",
    )


class QueueSampler:
    """The OpsQueue's depth, sampled in a thread every ``every_s`` while the load runs: ``samples``
    holds (time, visible, in flight), and ``extra()`` after them when ``start`` is given one."""

    def __init__(self, stack: Any, every_s: float) -> None:
        self.sqs = stack.client("sqs")
        self.queue_url = stack.queue_url("OpsQueue")
        self.every_s = every_s
        self.samples: list[tuple[Any, ...]] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def depth(self) -> tuple[int, int]:
        """(visible, in flight) now."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )

    def start(self, extra: Callable[[], float] | None = None) -> None:
        def sample() -> None:
            while not self._done.wait(self.every_s):
                row = (time.time(), *self.depth())
                self.samples.append((*row, extra()) if extra else row)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class LoadStack:
    """The local stack as a load bench runs it: the API (its functions in ``pool`` or in this
    process) at ``base_url`` with the API key ``key``, the measured drainer in the background, the
    scheduler, the queue sampler, and the pids whose CPU and memory are the stack's."""

    stack: Any
    invoker: Any
    pool: Any  # a ContainerPool, or None: the functions run in this process
    base_url: str
    key: str
    drainer: Any  # measured_drainer's: ``batches``
    queue: QueueSampler
    stack_pids: list[int]
    poll_s: float
    services: list[Any]  # stopped in this order (the scheduler, the background drainer, the API)
    stopped: bool = False

    def cpu_s(self) -> float:
        return sum(_cpu_s(pid) for pid in self.stack_pids)

    def rss_mb(self) -> float:
        return sum(_rss_mb(pid) for pid in self.stack_pids)

    def drain(self, timeout_s: float) -> float:
        """Waits (at most ``timeout_s``) for the queue to empty, lets the drainer's last polls pass and
        stops the sampler; returns when the queue was empty."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and sum(self.queue.depth()) > 0:
            time.sleep(0.2)
        drained_at = time.time()
        time.sleep(self.poll_s * 2)
        self.queue.stop()
        return drained_at

    def run_clients(
        self,
        target: Callable[..., Any],
        arguments: list[tuple[Any, ...]],
        start_at: float,
        cpu_from_start: bool = True,
    ) -> tuple[list[Any], float, float]:
        """``target(*a)`` for each of ``arguments``, each in its own spawned process (a client waits for
        ``start_at`` itself): (their results, when the last ended, the stack's CPU seconds meanwhile,
        from ``start_at``, or from before the processes spawn if not ``cpu_from_start``)."""
        cpu_before = None if cpu_from_start else self.cpu_s()
        context = multiprocessing.get_context("spawn")
        with context.Pool(len(arguments)) as clients:
            pending = [clients.apply_async(target, a) for a in arguments]
            if cpu_before is None:
                time.sleep(max(0.0, start_at - time.time()))
                cpu_before = self.cpu_s()
            results = [p.get() for p in pending]
        ended = time.time()
        return results, ended, self.cpu_s() - cpu_before

    def read_lake(self, columns: list[str]) -> tuple[list[Any], int]:
        """Every Parquet object under ``ops/`` read back (``columns`` only), and the count of reject
        objects under ``rejects/``."""
        import pyarrow.parquet as pq

        s3 = self.stack.client("s3")
        tables: list[Any] = []
        rejects = 0
        for prefix in ("ops/", "rejects/"):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.stack.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    if prefix == "rejects/":
                        rejects += 1
                        continue
                    body = s3.get_object(Bucket=self.stack.bucket, Key=item["Key"])["Body"].read()
                    tables.append(pq.read_table(io.BytesIO(body), columns=columns))
        return tables, rejects

    def stop(self) -> None:
        """Stops everything but the stack itself (which stays up for reading the lake back); once."""
        if self.stopped:
            return
        self.stopped = True
        self.queue.stop()
        for service in self.services:
            service.stop()
        if self.pool is not None:
            self.pool.close()


@contextmanager
def load_stack(args: argparse.Namespace, root: Path, route: str) -> Iterator[LoadStack]:
    """The local stack of the checkout at ``root`` as ``opslake local up`` starts it, with the options
    of ``load_arguments``; ``route``'s function is warmed in each container. Everything but the
    stack stops on leaving (or at ``stop()``), the stack after that."""
    from opslake_local.drain import BackgroundDrainer, Drainer
    from opslake_local.http import LocalApi
    from opslake_local.schedule import Scheduler
    from opslake_local.stack import QUIET_ENV, LocalStack

    # that checkout's template, hence its functions' code too (not the working directory's)
    with LocalStack(root / "template.yaml", env_overrides=QUIET_ENV) as stack:
        invoker = stack.invoker()
        pool: Any = None
        if args.containers:
            from opslake_local.containers import ContainerPool  # not in checkouts before issue 13

            pool = ContainerPool(stack, args.containers)
            pool.warm({r.function for r in stack.template.api_routes() if r.path == route})
        api = LocalApi(stack, pool or invoker)
        base_url = api.start()
        print(f"API functions: {f'{args.containers} containers (processes)' if pool else 'in this process'}")
        drainer = measured_drainer(Drainer)(stack, invoker)
        background = BackgroundDrainer(drainer, interval_s=args.poll_s).start()
        scheduler = Scheduler(stack.template, invoker.invoke).start()
        assert stack.api_key is not None
        load = LoadStack(
            stack=stack,
            invoker=invoker,
            pool=pool,
            base_url=base_url,
            key=stack.api_key.value,
            drainer=drainer,
            queue=QueueSampler(stack, args.sample_s),
            stack_pids=[os.getpid(), *(c.process.pid for c in (pool._all if pool else []) if c.process.pid)],
            poll_s=args.poll_s,
            services=[scheduler, background, api],
        )
        try:
            yield load
        finally:
            load.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load_arguments(parser)
    parser.add_argument("--min-ops", type=int, default=100)
    parser.add_argument("--max-ops", type=int, default=500)
    parser.add_argument("--max-requests", type=int, default=5000, help="in all, over every client")
    parser.add_argument("--services", type=int, default=120, help="AWS API models the texts come from")
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    root = args.code.resolve()
    sys.path[:0] = [str(root / "layers" / "common"), str(root / "local")]

    import opslake

    texts = corpus(args.services)
    print(f"code: {Path(opslake.__file__).parents[3]}")
    print(f"texts: {len(texts[0])} AWS error shapes, {len(texts[1])} AWS request examples (botocore data)")

    with load_stack(args, root, "/events") as load:
        drainer = load.drainer
        import httpx

        warm = httpx.post(  # cold starts of the ingest function happen before the clock starts
            f"{load.base_url}/events",
            json={"op_id": "warm-up", "endpoint": "warm", "success": True, "duration_ms": 1},
            headers={"x-api-key": load.key},
            timeout=60,
        )
        assert warm.status_code == 202, warm.text
        start_at = time.time() + 1.0
        stop_at = start_at + args.seconds
        per_client = max(1, args.max_requests // args.clients)
        load.queue.start()
        results, ended, cpu_load = load.run_clients(
            client_run,
            [
                (
                    i,
                    load.base_url,
                    load.key,
                    start_at,
                    stop_at,
                    per_client,
                    (args.min_ops, args.max_ops),
                    texts,
                )
                for i in range(args.clients)
            ],
            start_at,
            cpu_from_start=False,  # as this bench always counted: from before the clients spawn
        )
        elapsed = ended - start_at
        drained_at = load.drain(args.drain_timeout)
        load.stop()
        samples = load.queue.samples

        accepted = [op_id for r in results for op_id in r.accepted]
        latencies = [x for r in results for x in r.latencies]
        statuses: Counter[int] = Counter()
        for r in results:
            statuses.update(r.statuses)
        transport_errors = [e for r in results for e in r.errors]
        sent = sum(r.sent_ops for r in results)
        rejected = sum(r.rejected for r in results)
        print(f"\nload: {args.clients} clients, {args.min_ops}–{args.max_ops} ops per request, "
              f"{elapsed:.1f} s")  # fmt: skip
        client_errors = sum(n for s, n in statuses.items() if 400 <= s < 500)
        server_errors = sum(n for s, n in statuses.items() if s >= 500)
        print(f"  requests {len(latencies)}: " + ", ".join(f"{s}×{n}" for s, n in sorted(statuses.items()))
              + f"; 4xx {client_errors}, 5xx {server_errors}, transport errors {len(transport_errors)}")  # fmt: skip
        for error in transport_errors[:3]:
            print(f"    {error}")
        print(f"  ops sent {sent}, accepted {len(accepted)} ({len(accepted) / elapsed:.0f} ops/s), "
              f"rejected by validation {rejected}")  # fmt: skip
        p50, p95, worst = _percentile(latencies, 0.5), _percentile(latencies, 0.95), max(latencies, default=0)
        print(f"  latency p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {worst * 1000:.0f} ms")
        print(f"  stack CPU while loaded: {cpu_load:.1f} s in {elapsed:.1f} s "
              f"({cpu_load / elapsed * 100:.0f}% of one core; {cpu_load / max(len(accepted), 1) * 1e6:.0f} µs per "
              f"accepted op; machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")  # fmt: skip
        during = [s for s in samples if s[0] <= ended]
        if during:
            third = max(1, len(during) // 3)
            first = statistics.mean(s[1] + s[2] for s in during[:third])
            last = statistics.mean(s[1] + s[2] for s in during[-third:])
            print(f"  queue depth (visible + in flight, every {args.sample_s:g} s): "
                  f"max {max(s[1] + s[2] for s in during)}, mean of first third {first:.1f}, "
                  f"of last third {last:.1f}, at the end {during[-1][1] + during[-1][2]}")  # fmt: skip
        batches = [b for b in drainer.batches if b[0] <= ended]
        if batches:
            lags = [b[4] for b in batches]
            print(f"  queue lag (oldest message's age when a writer batch received it): "
                  f"p50 {statistics.median(lags):.2f} s, p95 {_percentile(lags, 0.95):.2f} s, "
                  f"max {max(lags):.2f} s over {len(batches)} batches")  # fmt: skip
        all_batches = drainer.batches
        ops_written = sum(b[2] for b in all_batches)
        busy = sum(b[3] for b in all_batches)
        print(f"  drainer: {len(all_batches)} writer batches, {sum(b[1] for b in all_batches)} messages, "
              f"{ops_written} ops; {ops_written / max(busy, 1e-9):.0f} ops/s while busy "
              f"({busy:.1f} s busy of {drained_at - start_at:.1f} s); queue empty "
              f"{drained_at - ended:.1f} s after the clients stopped")  # fmt: skip

        stored: Counter[tuple[str, str]] = Counter()
        tables, rejects = load.read_lake(["reporter_id", "op_id"])
        objects = len(tables)
        for table in tables:
            stored.update(
                zip(table.column("reporter_id").to_pylist(), table.column("op_id").to_pylist(), strict=True)
            )
        by_id = Counter[str]()
        for (_, op_id), copies in stored.items():
            by_id[op_id] += copies
        accepted_set = set(accepted)
        lost = sum(1 for op_id in accepted_set if by_id[op_id] == 0)
        duplicated = sum(1 for op_id in accepted_set if by_id[op_id] > 1)
        unexpected = sum(1 for op_id in by_id if op_id not in accepted_set and op_id != "warm-up")
        print(f"  lake: {objects} Parquet objects, {sum(stored.values())} rows, {rejects} reject objects; "
              f"of {len(accepted_set)} accepted op ids: lost {lost}, duplicated {duplicated} "
              f"(raw rows, before any dedupe); rows not accepted {unexpected}")  # fmt: skip
        if len(accepted_set) != len(accepted):
            print(f"  WARNING: {len(accepted) - len(accepted_set)} op ids accepted twice")


if __name__ == "__main__":
    main()
