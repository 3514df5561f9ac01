"""A generation's contents: fetch the planned sources, keep one row per op (``reporter_id``,
``op_id``: see :mod:`opslake.lake.opkey`), write files of up to the target size into the
generation's folder, and read their footers back to verify them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from botocore.exceptions import ClientError

from opslake.errors import CompactionError
from opslake.lake.compaction.planner import SourceFile, SourcesChanged
from opslake.lake.conditional import CONFLICT_CODES, MISSING_CODES, error_code
from opslake.lake.opkey import OP_KEY, first_of_each_key
from opslake.lake.parquet import to_parquet_bytes
from opslake.lake.schema import OPS_SCHEMA

_FETCH_THREADS = 16


@dataclass(frozen=True)
class Merged:
    """What ``write_generation`` put: ``outputs`` as the journal records them (key, rows, size)."""

    outputs: list[dict[str, Any]]
    rows_in: int
    distinct_ops: int
    bytes_in: int


def fetch(s3: Any, bucket: str, source: SourceFile) -> pa.Table:
    """One source file as a table, only if it is still the planned object (``IfMatch``)."""
    try:
        response = s3.get_object(Bucket=bucket, Key=source.key, IfMatch=source.etag)
        body = response["Body"].read()
    except ClientError as exc:
        if error_code(exc) in CONFLICT_CODES | MISSING_CODES:
            raise SourcesChanged(f"{source.key}: {error_code(exc)}") from exc
        raise
    table = pq.read_table(pa.BufferReader(body))
    if not table.schema.equals(OPS_SCHEMA):
        table = table.select(OPS_SCHEMA.names).cast(OPS_SCHEMA)
    return table


def dedupe(table: pa.Table) -> pa.Table:
    """One row per op (:data:`~opslake.lake.opkey.OP_KEY`: one key's ``op_id``): the earliest
    ``ingested_at``, then the first in source order (sources are in key order), as the writer keeps.
    Two keys that sent the same ``op_id`` keep a row each: neither may replace the other's op.
    The result is sorted by (ingested_at, op_id, reporter_id) so that row-group statistics prune
    time ranges well."""
    if table.num_rows == 0:
        return table
    keys = pa.table(
        {
            **{name: table.column(name) for name in OP_KEY},
            "ingested_at": table.column("ingested_at"),
            "row": pa.array(range(table.num_rows)),
        }
    )
    by_op = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in keys.column_names])
    kept = table.take(pc.filter(by_op, first_of_each_key(keys, OP_KEY, by_op)))
    return kept.sort_by([("ingested_at", "ascending"), ("op_id", "ascending"), ("reporter_id", "ascending")])


def write_generation(
    s3: Any, bucket: str, sources: list[SourceFile], prefix: str, *, target_file_bytes: int
) -> Merged:
    """Merge and dedupe ``sources`` into even files ``prefix``part-NNNNN.parquet, each written once."""
    # GETs of small objects are latency-bound: fetch several at once (boto3 clients are
    # thread-safe), keep the planned order (it decides which duplicate is kept).
    with ThreadPoolExecutor(max_workers=_FETCH_THREADS) as pool:
        tables = list(pool.map(lambda source: fetch(s3, bucket, source), sources))
    merged = pa.concat_tables(tables) if tables else OPS_SCHEMA.empty_table()
    rows_in = merged.num_rows
    bytes_in = sum(s.size for s in sources)
    kept = dedupe(merged)
    del merged, tables
    # Rows per file from the observed bytes per row: the small sources compress worse than
    # one large file does, so outputs come out at or below the target, never above it.
    per_row = max(1.0, bytes_in / max(1, rows_in))
    per_file = max(1, int(target_file_bytes / per_row))
    n_files = max(1, -(-kept.num_rows // per_file))
    per_file = max(1, -(-kept.num_rows // n_files))  # even files
    outputs = []
    for index in range(n_files):
        chunk = kept.slice(index * per_file, per_file)
        data = to_parquet_bytes(chunk)  # the lake's file format: zstd, bounded row groups
        key = prefix + f"part-{index:05d}.parquet"
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=data,
            ContentType="application/vnd.apache.parquet",
            IfNoneMatch="*",  # a generation's folder is only ever written once
        )
        outputs.append({"key": key, "rows": chunk.num_rows, "size": len(data)})
    return Merged(outputs=outputs, rows_in=rows_in, distinct_ops=kept.num_rows, bytes_in=bytes_in)


def footer(s3: Any, bucket: str, key: str) -> pq.FileMetaData:
    """A Parquet object's footer, read with two ranged GETs (not the whole object)."""
    tail = s3.get_object(Bucket=bucket, Key=key, Range="bytes=-8")["Body"].read()
    if len(tail) != 8 or tail[4:] != b"PAR1":
        raise CompactionError(f"s3://{bucket}/{key} is not a Parquet file (no PAR1 footer)")
    length = int.from_bytes(tail[:4], "little")
    data = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{length + 8}")["Body"].read()
    return pq.ParquetFile(pa.BufferReader(data)).metadata


def verify_generation(
    s3: Any, bucket: str, listed: list[SourceFile], outputs: list[dict[str, Any]], distinct_ops: int
) -> None:
    """Check that the generation's folder (``listed``) holds exactly ``outputs``, each with the ops
    schema and its recorded rows, and that together they hold ``distinct_ops`` rows (the distinct
    (reporter_id, op_id) pairs of the sources); else raise."""
    found = {f.key: f.size for f in listed}
    expected = {o["key"]: o["size"] for o in outputs}
    if found != expected:
        raise CompactionError(f"generation folder holds {sorted(found)}, expected {sorted(expected)}")
    rows = 0
    for output in outputs:
        metadata = footer(s3, bucket, output["key"])
        schema = metadata.schema.to_arrow_schema().remove_metadata()
        if not schema.equals(OPS_SCHEMA):
            raise CompactionError(f"{output['key']} does not have the ops schema: {schema}")
        if metadata.num_rows != output["rows"]:
            raise CompactionError(
                f"{output['key']} holds {metadata.num_rows} rows, expected {output['rows']}"
            )
        rows += metadata.num_rows
    if rows != distinct_ops:
        raise CompactionError(
            f"outputs hold {rows} rows but the sources hold {distinct_ops} distinct (reporter_id, op_id) ops"
        )
