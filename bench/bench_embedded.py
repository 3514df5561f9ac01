"""Benchmark the embedded engine: 1,000,000 ops in a 30 days × 24 hours local lake.

Glue is moto (in process); the files are local (pyarrow LocalFileSystem), so this measures
the engine's real path minus S3 latency. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_embedded.py
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from moto import mock_aws

from opslake.lake.schema import OPS_SCHEMA, glue_columns
from opslake.query.embedded import EmbeddedEngine

ROWS = 1_000_000
DAYS, HOURS = 30, 24
ENDPOINTS = ["tool:query_db", "tool:search", "/sql", "tool:fetch", "scenario:fill", "tool:write", "/events"]
START = datetime(2026, 1, 1, tzinfo=UTC)


def build_table(rows: int) -> pa.Table:
    """Random op rows in OPS_SCHEMA, ingested across the 30 days (columns built by Arrow)."""
    rng = random.Random(1)
    span_ms = DAYS * HOURS * 3_600_000
    start_ms = int(START.timestamp() * 1000)
    ingested = pa.array(sorted(start_ms + rng.randrange(span_ms) for _ in range(rows)), pa.int64())
    endpoint_ids = pa.array([rng.randrange(len(ENDPOINTS)) for _ in range(rows)], pa.int32())
    columns = {
        "op_id": pc.binary_join_element_wise("op-", pc.cast(pa.array(range(rows)), pa.string()), ""),
        "ts": pc.cast(pc.subtract(ingested, 5), OPS_SCHEMA.field("ts").type),
        "ingested_at": pc.cast(ingested, OPS_SCHEMA.field("ingested_at").type),
        "endpoint": pc.take(pa.array(ENDPOINTS), endpoint_ids),
        "source": pa.array(["event"] * rows),
        "agent_id": pa.array(["agent"] * rows),
        "reporter_id": pa.array(["local-agent"] * rows),
        "success": pa.array([rng.random() > 0.15 for _ in range(rows)]),
        "duration_ms": pa.array([rng.expovariate(1 / 80) for _ in range(rows)], pa.float64()),
        "attributes": pa.array([[("city", "paris")]] * rows, OPS_SCHEMA.field("attributes").type),
        "truncated": pa.array([False] * rows),
    }
    return pa.table(
        {f.name: columns.get(f.name, pa.nulls(rows, f.type)) for f in OPS_SCHEMA}, schema=OPS_SCHEMA
    )


def write_lake(root: Path, glue: object) -> int:
    table = build_table(ROWS)
    hours = pc.floor(pc.divide(pc.cast(pc.cast(table["ingested_at"], pa.int64()), pa.float64()), 3_600_000))
    hour_index = pc.cast(hours, pa.int64())
    partitions = []
    first = int(START.timestamp()) // 3600
    offsets = [0]
    counts = dict(zip(*[c.to_pylist() for c in pc.value_counts(hour_index).flatten()], strict=True))
    for h in range(DAYS * HOURS):
        offsets.append(offsets[-1] + counts.get(first + h, 0))
    for h in range(DAYS * HOURS):
        at = START + timedelta(hours=h)
        dt, hour = at.strftime("%Y-%m-%d"), at.strftime("%H")
        folder = root / "ops" / f"dt={dt}" / f"hour={hour}"
        folder.mkdir(parents=True)
        pq.write_table(
            table.slice(offsets[h], offsets[h + 1] - offsets[h]),
            folder / "part-0.parquet",
            compression="zstd",
        )
        partitions.append(
            {"Values": [dt, hour], "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{folder}/"}}
        )
    glue.create_database(DatabaseInput={"Name": "bench"})  # type: ignore[attr-defined]
    glue.create_table(  # type: ignore[attr-defined]
        DatabaseName="bench",
        TableInput={
            "Name": "ops",
            "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
            "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{root}/ops/"},
        },
    )
    for i in range(0, len(partitions), 100):
        glue.batch_create_partition(  # type: ignore[attr-defined]
            DatabaseName="bench", TableName="ops", PartitionInputList=partitions[i : i + 100]
        )
    return len(partitions)


def timed(engine: EmbeddedEngine, sql: str, runs: int = 5) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = engine.run(sql)
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        glue = boto3.client("glue", region_name="us-east-1")
        began = time.perf_counter()
        total_files = write_lake(Path(tmp), glue)
        print(
            f"lake: {ROWS:,} ops in {total_files} partitions/files, written in {time.perf_counter() - began:.1f} s"
        )
        engine = EmbeddedEngine(glue, pafs.LocalFileSystem(), database="bench")
        sql = "SELECT endpoint, count(*), approx_percentile(duration_ms, 0.95) FROM ops GROUP BY endpoint"
        median, result = timed(engine, sql)
        print(
            f"(a) group by endpoint over all rows: median of 5 = {median * 1000:.0f} ms "
            f"({len(result.files_read or [])} files, {sum(r[1] for r in result.rows):,} rows)"
        )  # type: ignore[attr-defined]
        one_hour = "SELECT count(*) FROM ops WHERE dt = '2026-01-15' AND hour = '13'"
        median, result = timed(engine, one_hour)
        print(
            f"(b) one hour of 30 days: {len(result.files_read or [])}/{total_files} files read, "  # type: ignore[attr-defined]
            f"median of 5 = {median * 1000:.0f} ms, rows {result.rows[0][0]}"
        )  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
