"""Compaction of one busy hour: 1,000 writer-style files (50-200 rows each, ~2% redelivered
duplicates) merged, deduplicated, verified and swapped in, on moto's in-process mock.

Prints wall time of the compaction run (plan, reads, merge, write, verify, swap) and of the
delete run after the grace period, Arrow's peak pool memory, the process's peak RSS, and
files/rows/bytes in and out. moto's in-process S3 is slower per request than S3 from Lambda
is per byte, so the figure is an upper bound on CPU plus request overhead. Never asserts.

    .venv/bin/python bench/bench_compaction.py [--files 1000] [--target-mb 128]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "common"))
os.environ.update(
    AWS_ACCESS_KEY_ID="bench",
    AWS_SECRET_ACCESS_KEY="bench",
    AWS_DEFAULT_REGION="us-east-1",
    POWERTOOLS_TRACE_DISABLED="true",
    POWERTOOLS_LOG_LEVEL="ERROR",
    POWERTOOLS_METRICS_DISABLED="true",
)
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
    os.environ.pop(_name, None)

import boto3  # noqa: E402
import pyarrow as pa  # noqa: E402
from moto import mock_aws  # noqa: E402

from opslake.lake.catalog import GlueCatalog  # noqa: E402
from opslake.lake.compaction import CompactionOptions, Compactor  # noqa: E402
from opslake.lake.layout import ops_object_key  # noqa: E402
from opslake.lake.parquet import ops_table, to_parquet_bytes  # noqa: E402
from opslake.lake.schema import glue_columns  # noqa: E402
from opslake.models.ops import QueuedOp  # noqa: E402

BUCKET, DATABASE = "opslake-bench-lake", "opslake_bench"
HOUR = datetime(2026, 3, 1, 5, tzinfo=UTC)
ENDPOINTS = ["tool:query_db", "tool:search", "/sql", "tool:fetch", "scenario:fill"]


def setup(s3: object, glue: object) -> None:
    s3.create_bucket(Bucket=BUCKET)  # type: ignore[attr-defined]
    glue.create_database(DatabaseInput={"Name": DATABASE})  # type: ignore[attr-defined]
    glue.create_table(  # type: ignore[attr-defined]
        DatabaseName=DATABASE,
        TableInput={
            "Name": "ops",
            "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
            "StorageDescriptor": {"Columns": glue_columns(), "Location": f"s3://{BUCKET}/ops/"},
        },
    )


def fill(s3: object, glue: object, files: int, rows: tuple[int, int] = (50, 200)) -> tuple[int, int]:
    """``files`` writer-style objects of ``rows`` (low, high) rows each in one hour, ~2% of them
    redelivered copies; returns (rows, bytes) written."""
    rng = random.Random(11)
    written: list[tuple[QueuedOp, int]] = []
    total_rows = total_bytes = 0
    for f in range(files):
        batch = []
        for i in range(rng.randint(*rows)):
            ts = HOUR + timedelta(seconds=rng.randrange(3600))
            endpoint = rng.choice(ENDPOINTS)
            op = QueuedOp(
                op_id=f"op-{f:04d}-{i:03d}",
                ts=ts,
                endpoint=endpoint,
                source="gateway",
                agent_id=f"agent-{rng.randrange(20)}",
                reporter_id="bench",
                success=rng.random() > 0.2,
                duration_ms=round(rng.expovariate(1 / 80), 3),
                input_summary="select count(*) from workers where city = 'paris'",
                attributes={"city": rng.choice(["paris", "lima", "oslo"]), "role": "nurse"},
            )
            batch.append((op, int(ts.timestamp() * 1000) + rng.randrange(500)))
        if written:  # ~2% redelivered copies of earlier ops
            batch += rng.sample(written, min(len(written), len(batch) // 50))
        written += batch
        body = to_parquet_bytes(ops_table([o for o, _ in batch], [ms for _, ms in batch]))
        key = ops_object_key("ops/", "2026-03-01", "05", [f"bench-{f}"])
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)  # type: ignore[attr-defined]
        total_rows += len(batch)
        total_bytes += len(body)
    GlueCatalog(glue, DATABASE, "ops").ensure_partitions([("2026-03-01", "05")])
    return total_rows, total_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--target-mb", type=float, default=128)
    args = parser.parse_args()
    with mock_aws():
        s3, glue = boto3.client("s3"), boto3.client("glue")
        setup(s3, glue)
        started = time.perf_counter()
        rows, size = fill(s3, glue, args.files)
        print(
            f"setup: {args.files} files, {rows:,} rows, {size / 1e6:.1f} MB in {time.perf_counter() - started:.1f} s"
        )

        now = [HOUR + timedelta(hours=4)]
        options = CompactionOptions(target_file_bytes=int(args.target_mb * 1024 * 1024))
        compactor = Compactor(
            s3, glue, bucket=BUCKET, database=DATABASE, clock=lambda: now[0], options=options
        )
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        pool = pa.default_memory_pool()
        arrow_before = pool.max_memory()
        started = time.perf_counter()
        report = compactor.run()
        compact_s = time.perf_counter() - started
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        now[0] += timedelta(seconds=options.grace_s + 1)
        started = time.perf_counter()
        cleanup = compactor.run()
        delete_s = time.perf_counter() - started

        totals = report.to_dict()
        print(f"compaction run: {compact_s:.2f} s wall (list, read, merge, dedupe, write, verify, swap)")
        print(
            f"delete run after grace: {delete_s:.2f} s wall, {cleanup.total('files_deleted')} files deleted"
        )
        print(f"files: {totals['files_in']} in -> {totals['files_out']} out")
        print(
            f"rows: {totals['rows_in']:,} in -> {totals['rows_out']:,} out "
            f"({totals['duplicates_dropped']:,} duplicates dropped)"
        )
        print(f"bytes: {totals['bytes_in'] / 1e6:.2f} MB in -> {totals['bytes_out'] / 1e6:.2f} MB out")
        print(
            f"arrow pool peak: {(pool.max_memory() or 0) / 1e6:.1f} MB (before the run: {(arrow_before or 0) / 1e6:.1f})"
        )
        print(
            f"process peak RSS: {rss_after / 1024:.0f} MB (before the run: {rss_before / 1024:.0f} MB, incl. moto)"
        )
        if totals["errors"]:
            print(f"errors: {totals['errors']}")


if __name__ == "__main__":
    main()
