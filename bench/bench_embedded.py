"""Benchmark the embedded engine: 1,000,000 ops in a 30 days × 24 hours lake (720 partitions).

Two backends: ``local`` (moto's Glue in process, Parquet files on the local filesystem: the
engine's path minus S3) and ``server`` (a moto server in this process, as the local stack runs
it: Glue and S3 over HTTP on 127.0.0.1, the files read through pyarrow's S3 client). Each
``--code DIR`` checkout runs in its own process over the same files, one after the other, so an
older checkout is measured side by side with this one. Prints figures; asserts nothing but that
every variant counts the same rows.

    .venv/bin/python bench/bench_embedded.py [--code /tmp/i13/old --code .] [--backend local server]

Per checkout and backend: (a) GROUP BY endpoint over every row, the first query and the median
of the next five, with the Glue calls one warm query makes; (b) one hour of the 30 days; (c)
the full GROUP BY right after a partition was added (registered, then its file written, as the
writer does), which must count the new rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROWS = 1_000_000
DAYS, HOURS = 30, 24
ENDPOINTS = ["tool:query_db", "tool:search", "/sql", "tool:fetch", "scenario:fill", "tool:write", "/events"]
START = datetime(2026, 1, 1, tzinfo=UTC)
HERE = Path(__file__).resolve().parents[1]
BUCKET = "bench-lake"
FULL = "SELECT endpoint, count(*), approx_percentile(duration_ms, 0.95) FROM ops GROUP BY endpoint"
ONE_HOUR = "SELECT count(*) FROM ops WHERE dt = '2026-01-15' AND hour = '13'"
ADDED = (START + timedelta(days=DAYS, hours=1)).strftime("%Y-%m-%d"), "01"  # after the 30 days


def use_code(root: Path) -> None:
    sys.path[:0] = [str(root / "layers" / "common"), str(root / "local"), str(root)]


# -- the lake's files (built once, in the parent, with this checkout's schema) ----------------
def build_table(rows: int) -> Any:
    """Random op rows in OPS_SCHEMA, ingested across the 30 days (columns built by Arrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from opslake.lake.schema import OPS_SCHEMA

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


def write_files(root: Path) -> None:
    """One Parquet file per hour under ``root/ops/dt=…/hour=…/`` plus the file (c) adds later."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from opslake.lake.parquet import to_parquet_bytes

    table = build_table(ROWS + 1000)
    extra, table = table.slice(ROWS), table.slice(0, ROWS)
    hours = pc.cast(
        pc.floor(pc.divide(pc.cast(pc.cast(table["ingested_at"], pa.int64()), pa.float64()), 3_600_000)),
        pa.int64(),
    )
    first = int(START.timestamp()) // 3600
    counts = dict(zip(*[c.to_pylist() for c in pc.value_counts(hours).flatten()], strict=True))
    offset = 0
    for h in range(DAYS * HOURS):
        at = START + timedelta(hours=h)
        folder = root / "ops" / f"dt={at:%Y-%m-%d}" / f"hour={at:%H}"
        folder.mkdir(parents=True)
        n = counts.get(first + h, 0)
        # as the lake's writer and compaction write a file
        (folder / "part-0.parquet").write_bytes(to_parquet_bytes(table.slice(offset, n)))
        offset += n
    (root / "extra.parquet").write_bytes(to_parquet_bytes(extra))


# -- one checkout, one backend (a worker process) ---------------------------------------------
class Backend:
    """Glue and a pyarrow filesystem over the lake, in process (``local``) or over HTTP (``server``)."""

    def __init__(self, kind: str, files: Path) -> None:
        import boto3

        self.kind, self.files = kind, files
        self.calls = Counter[str]()
        if kind == "local":
            from moto import mock_aws

            self._mock = mock_aws()
            self._mock.start()
            self.glue = boto3.client("glue", region_name="us-east-1")
            self.root = str(files)
        else:
            from moto.server import ThreadedMotoServer

            from opslake_local.stack import free_port

            port = free_port()
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            self._server.start()
            options = {
                "endpoint_url": f"http://127.0.0.1:{port}",
                "region_name": "us-east-1",
                "aws_access_key_id": "bench",
                "aws_secret_access_key": "bench",
            }
            self.port = port
            self.glue = boto3.client("glue", **options)
            self.s3 = boto3.client("s3", **options)
            self.s3.create_bucket(Bucket=BUCKET)
            self.root = f"s3://{BUCKET}"
        for operation in ("GetPartitions", "BatchGetPartition", "GetTable"):
            self.glue.meta.events.register(
                f"before-call.glue.{operation}",
                lambda operation=operation, **_: self.calls.update([operation]),
            )

    def filesystem(self) -> Any:
        import pyarrow.fs as pafs

        if self.kind == "local":
            return pafs.LocalFileSystem()
        return pafs.S3FileSystem(
            access_key="bench",
            secret_key="bench",
            region="us-east-1",
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
        )

    def put(self, relative: str, source: Path) -> str:
        """The file at ``relative`` under the lake's root (uploaded on the server backend)."""
        if self.kind == "local":
            target = self.files / relative
            if source != target:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read_bytes())
            return f"{self.root}/{Path(relative).parent}/"
        self.s3.put_object(Bucket=BUCKET, Key=relative, Body=source.read_bytes())
        return f"{self.root}/{Path(relative).parent}/"

    def register(self, values: list[str], location: str) -> None:
        from opslake.lake.schema import glue_columns

        self.glue.create_partition(
            DatabaseName="bench",
            TableName="ops",
            PartitionInput={
                "Values": values,
                "StorageDescriptor": {"Columns": glue_columns(), "Location": location},
            },
        )

    def load(self) -> None:
        from opslake.lake.schema import glue_columns

        self.glue.create_database(DatabaseInput={"Name": "bench"})
        self.glue.create_table(
            DatabaseName="bench",
            TableInput={
                "Name": "ops",
                "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
                "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{self.root}/ops/"},
            },
        )
        partitions = []
        for path in sorted(self.files.glob("ops/dt=*/hour=*/part-0.parquet")):
            relative = str(path.relative_to(self.files))
            location = self.put(relative, path)
            dt, hour = (part.split("=", 1)[1] for part in relative.split("/")[1:3])
            partitions.append(
                {"Values": [dt, hour], "StorageDescriptor": {"Columns": glue_columns(), "Location": location}}
            )
        for i in range(0, len(partitions), 100):
            self.glue.batch_create_partition(
                DatabaseName="bench", TableName="ops", PartitionInputList=partitions[i : i + 100]
            )


def worker(code: Path, kind: str, files: Path, runs: int) -> dict[str, Any]:
    use_code(code)
    import opslake
    from opslake.query.embedded import EmbeddedEngine

    backend = Backend(kind, files)
    began = time.perf_counter()
    backend.load()
    loaded_s = time.perf_counter() - began
    engine = EmbeddedEngine(backend.glue, backend.filesystem(), database="bench")

    cpu: list[float] = []

    def timed(sql: str) -> tuple[float, Any]:
        began, began_cpu = time.perf_counter(), time.process_time()
        result = engine.run(sql)
        cpu.append(time.process_time() - began_cpu)  # every thread's CPU: steadier than wall under load
        return time.perf_counter() - began, result

    first_s, result = timed(FULL)
    rows = sum(r[1] for r in result.rows)
    warm = []
    cpu.clear()
    for _ in range(runs):
        backend.calls.clear()
        seconds, result = timed(FULL)
        warm.append(seconds)
    calls = dict(backend.calls)
    warm_cpu = statistics.median(cpu)
    hour = [timed(ONE_HOUR) for _ in range(runs)]
    # (c) the writer's order: register the partition, then put its file
    relative = f"ops/dt={ADDED[0]}/hour={ADDED[1]}/part-0.parquet"
    backend.register(list(ADDED), f"{backend.root}/{Path(relative).parent}/")
    backend.put(relative, files / "extra.parquet")
    added_s, added = timed(FULL)
    if kind == "local":
        (files / relative).unlink()  # the next checkout adds it again
        (files / relative).parent.rmdir()
        (files / relative).parent.parent.rmdir()
    return {
        "code": str(Path(opslake.__file__).resolve().parents[3]),
        "backend": kind,
        "load_s": loaded_s,
        "rows": rows,
        "files": len(result.files_read or []),
        "first_s": first_s,
        "warm_s": statistics.median(warm),
        "warm_cpu_s": warm_cpu,
        "warm_calls": calls,
        "hour_s": statistics.median(s for s, _ in hour),
        "hour_files": len(hour[0][1].files_read or []),
        "hour_rows": hour[0][1].rows[0][0],
        "added_s": added_s,
        "added_rows": sum(r[1] for r in added.rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--code", type=Path, action="append", help="a checkout to run (repeatable; default: this one)"
    )
    parser.add_argument("--backend", nargs="+", choices=["local", "server"], default=["local", "server"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--worker", nargs=3, metavar=("CODE", "BACKEND", "FILES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        code, kind, files = args.worker
        print(json.dumps(worker(Path(code), kind, Path(files), args.runs)))
        return
    use_code(HERE)
    codes = [c.resolve() for c in args.code or [HERE]]
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        write_files(Path(tmp))
        print(
            f"lake: {ROWS:,} ops in {DAYS * HOURS} partitions (one file each), built in {time.perf_counter() - began:.1f} s"
        )
        for kind in args.backend:
            for code in codes:
                env = {**os.environ, "PYTHONPATH": ""}
                out = subprocess.run(
                    [sys.executable, __file__, "--runs", str(args.runs), "--worker", str(code), kind, tmp],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                ).stdout
                r = json.loads(out.strip().splitlines()[-1])
                calls = ", ".join(f"{k} {v}" for k, v in sorted(r["warm_calls"].items()))
                load = os.getloadavg()[0]
                print(
                    f"[{kind:6}] load {load:.1f}: {r['code']}: lake loaded in {r['load_s']:.1f} s\n"
                    f"  (a) full GROUP BY, {r['rows']:,} rows, {r['files']} files: first {r['first_s'] * 1000:.0f} ms, "
                    f"median of {args.runs} warm {r['warm_s'] * 1000:.0f} ms (CPU {r['warm_cpu_s'] * 1000:.0f} ms; "
                    f"Glue per warm query: {calls})\n"
                    f"  (b) one hour: {r['hour_files']} file(s), {r['hour_rows']} rows, median {r['hour_s'] * 1000:.0f} ms\n"
                    f"  (c) full GROUP BY after a partition was added: {r['added_s'] * 1000:.0f} ms, "
                    f"{r['added_rows']:,} rows ({r['added_rows'] - r['rows']:+,})"
                )


if __name__ == "__main__":
    main()
