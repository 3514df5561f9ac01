"""Op records to Parquet bytes: the only place records become columns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq

from opslake.lake.schema import OPS_SCHEMA
from opslake.models.ops import QueuedOp

COMPRESSION = "zstd"


def ops_table(ops: Sequence[tuple[QueuedOp, datetime]]) -> pa.Table:
    """An Arrow table in :data:`OPS_SCHEMA` from (queued op, ingested_at) pairs."""
    columns: dict[str, list[object]] = {field.name: [] for field in OPS_SCHEMA}
    model_columns = [name for name in columns if name not in ("ingested_at", "attributes")]
    for op, ingested_at in ops:
        values = op.__dict__
        for name in model_columns:
            columns[name].append(values[name])
        columns["ingested_at"].append(ingested_at)
        columns["attributes"].append(list(op.attributes.items()))
    return pa.Table.from_pydict(columns, schema=OPS_SCHEMA)


def to_parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=COMPRESSION)
    return bytes(sink.getvalue().to_pybytes())
