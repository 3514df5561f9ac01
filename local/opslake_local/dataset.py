"""Load the staffing sample dataset into a lake bucket as Parquet (local stack or AWS).

One zstd Parquet object per table at ``s3://<bucket>/datasets/<table>/staffing.parquet``, the
location the template's Glue tables name; loading again overwrites it (same seed, same bytes),
so the command is idempotent. Works on a boto3 S3 client or on any pyarrow filesystem.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from opslake.datasets.schema import to_arrow
from opslake.datasets.staffing import DEFAULT_SEED, DEFAULT_WORKERS, TABLES, generate

DATASETS_PREFIX = "datasets/"
OBJECT_NAME = "staffing.parquet"


@dataclass(frozen=True)
class LoadedTable:
    table: str
    key: str
    rows: int
    bytes: int


def dataset_key(table: str, prefix: str = DATASETS_PREFIX) -> str:
    return f"{prefix}{table}/{OBJECT_NAME}"


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def load_dataset(
    target: Any,
    bucket: str,
    *,
    seed: int = DEFAULT_SEED,
    workers: int = DEFAULT_WORKERS,
    tables: Sequence[str] | None = None,
    prefix: str = DATASETS_PREFIX,
    on_step: Callable[[str], None] | None = None,
) -> list[LoadedTable]:
    """Write the dataset's tables (all, or ``tables``) to ``bucket`` through ``target``: a boto3
    S3 client or a pyarrow filesystem (whose paths are ``<bucket>/<key>``). ``on_step`` hears of
    each step as it starts (generating, then one per table), for a progress display."""
    wanted = list(tables or TABLES)
    unknown = [t for t in wanted if t not in TABLES]
    if unknown:
        raise ValueError(f"unknown dataset table(s) {unknown}; the staffing dataset has {list(TABLES)}")
    step = on_step or (lambda _what: None)
    step(f"generating {workers:,} workers")
    data = generate(seed, workers)
    loaded = []
    for name in wanted:
        step(f"writing {name}")
        body = _parquet(to_arrow(name, data[name]))
        key = dataset_key(name, prefix)
        if isinstance(target, pafs.FileSystem):
            target.create_dir(f"{bucket}/{prefix}{name}", recursive=True)
            with target.open_output_stream(f"{bucket}/{key}") as out:
                out.write(body)
        else:
            target.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/vnd.apache.parquet")
        loaded.append(LoadedTable(name, key, len(data[name]), len(body)))
    return loaded
