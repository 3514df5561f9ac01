"""Writer throughput: a 10,000-op SQS event to Parquet bytes in one process (no network).

The ops arrive packed as ``POST /events`` sends them (issue 13): each request of
``--ops-per-request`` ops becomes as few messages as fit under the queue's 256 KiB
``MaximumMessageSize`` (:func:`opslake.queue.packing.pack`), so the event holds a few dozen
messages, not 10,000. ``--ops-per-request 1`` is the old one-op-per-message event.

Runs the real handler (Powertools batch processor, pydantic validation, dedupe, partitioning,
Arrow conversion, zstd Parquet) with an in-memory object store and catalog, so the figure is
CPU only. Prints records/s (median of several runs), peak traced memory and bytes per record.

    make bench            # or: .venv/bin/python bench/bench_writer.py [--records 10000] [--runs 5]
                          #     [--ops-per-request 500]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "common"))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.update(
    OPSLAKE_LAKE_BUCKET="bench",
    OPSLAKE_GLUE_DATABASE="bench",
    OPSLAKE_OPS_TABLE="ops",
    POWERTOOLS_TRACE_DISABLED="true",
    POWERTOOLS_LOG_LEVEL="ERROR",
    POWERTOOLS_METRICS_DISABLED="true",
)

from opslake.lake.catalog import Catalog  # noqa: E402
from opslake.lake.store import ObjectStore  # noqa: E402
from opslake.lake.writer import LakeWriter  # noqa: E402
from opslake.models import OpInput  # noqa: E402
from opslake.queue.packing import pack  # noqa: E402
from opslake.queue.sqs import DEFAULT_MAX_MESSAGE_BYTES  # noqa: E402

ENDPOINTS = ["/sql", "tool:query_db", "tool:search", "/match", "scenario:fill", "/tables/{name}"]
ERRORS = [
    'column "wrokers" does not exist',
    "timeout after 30000 ms",
    "worker 123 not found",
    None,
    None,
    None,
]


class NullStore(ObjectStore):
    def __init__(self) -> None:
        self.bytes_written = 0

    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        self.bytes_written += len(data)


class NullCatalog(Catalog):
    def ensure_partitions(self, partitions: Iterable[tuple[str, ...]]) -> None:
        list(partitions)


def _record(message_id: str, body: str, sent: datetime) -> dict[str, Any]:
    """One SQS event record as Lambda delivers it."""
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": str(int(sent.timestamp() * 1000)),
            "SenderId": "AROAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": str(int(sent.timestamp() * 1000)),
        },
        "messageAttributes": {},
        "md5OfBody": "0" * 32,
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:opslake-ops",
        "awsRegion": "us-east-1",
    }


def sqs_event(n: int, ops_per_request: int = 500, seed: int = 7) -> dict[str, Any]:
    """A realistic batch of ``n`` ops (mixed endpoints, ~20% failures, a few attributes, two
    partitions), sent as requests of ``ops_per_request`` ops, each packed into messages."""
    rng = random.Random(seed)
    base = datetime(2026, 11, 21, 9, 59, 30, tzinfo=UTC)
    records: list[dict[str, Any]] = []
    for first in range(0, n, ops_per_request):
        sent = base + timedelta(milliseconds=first * 6)  # crosses 10:00 → two partitions
        bodies = []
        for _ in range(first, min(n, first + ops_per_request)):
            error = rng.choice(ERRORS)
            raw = {
                "endpoint": rng.choice(ENDPOINTS),
                "success": error is None,
                "duration_ms": round(rng.lognormvariate(3, 1), 2),
                "agent_id": f"agent-{rng.randrange(40)}",
                "session_id": f"sess-{rng.randrange(500)}",
                "input_summary": f"SELECT name, city FROM workers WHERE role = 'welder' LIMIT {rng.randrange(100)}",
                "output_summary": f"{rng.randrange(100)} rows",
                "error": error,
                "error_type": "ToolError" if error else None,
                "attributes": {"role": "welder", "city": "Austin", "count": str(rng.randrange(10))},
            }
            bodies.append(
                OpInput.model_validate(raw).to_queued(reporter_id="runtime-a", received_at=sent).to_message()
            )
        for _, body in pack(bodies, DEFAULT_MAX_MESSAGE_BYTES):
            records.append(_record(f"{len(records):08d}-0000-4000-8000-000000000000", body, sent))
    return {"Records": records}


def load_writer_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_writer_handler", ROOT / "functions/observer/writer.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Context:
    function_name = "bench"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    aws_request_id = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--ops-per-request",
        type=int,
        default=500,
        help="ops packed together (1: one op per message, the old format)",
    )
    args = parser.parse_args()

    event = sqs_event(args.records, args.ops_per_request)
    event_bytes = sum(len(r["body"]) for r in event["Records"])
    handler_module = load_writer_handler()
    store = NullStore()
    handler_module._writer.cache_clear()
    handler_module._writer = lambda: LakeWriter(  # type: ignore[attr-defined]
        store, NullCatalog(), ops_prefix="ops/", rejects_prefix="rejects/"
    )

    handler_module.handler(event, Context())  # warm-up (imports, first-call caches)
    timings = []
    cpu: list[float] = []
    for _ in range(args.runs):
        store.bytes_written = 0
        start, cpu_start = time.perf_counter(), time.process_time()
        response = handler_module.handler(event, Context())
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)  # all threads (Arrow's too): steadier on a busy machine
        assert response == {"batchItemFailures": []}, response

    tracemalloc.start()
    handler_module.handler(event, Context())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    median = statistics.median(timings)
    print(f"ops per batch          {args.records:,} in {len(event['Records']):,} messages "
          f"({args.ops_per_request} ops per request, packed up to {DEFAULT_MAX_MESSAGE_BYTES // 1024} KiB)")  # fmt: skip
    print(f"mean op size           {event_bytes / args.records:,.0f} B (JSON on the queue)")
    print(
        f"handler time (median)  {median * 1000:,.1f} ms over {args.runs} runs (min {min(timings) * 1000:,.1f} ms)"
    )
    print(f"throughput             {args.records / median:,.0f} ops/s on one core")
    print(f"CPU time (median)      {statistics.median(cpu) * 1000:,.1f} ms (process time, every thread)")
    print(f"parquet bytes/op       {store.bytes_written / args.records:,.1f} B (zstd)")
    print(f"peak traced memory     {peak / 1e6:,.1f} MB (tracemalloc, one batch)")


if __name__ == "__main__":
    main()
