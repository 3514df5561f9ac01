"""Op records to Parquet bytes: the only place records become columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from opslake.lake.schema import OPS_SCHEMA
from opslake.models.ops import QueuedOp

COMPRESSION = "zstd"


def ops_table(ops: Sequence[QueuedOp], ingested_ms: Sequence[int]) -> pa.Table:
    """An Arrow table in :data:`OPS_SCHEMA` from queued ops and their ingestion times (epoch ms).

    Column lists are built straight from the models' ``__dict__`` and converted by Arrow in C++
    (maps from dicts, timestamps from datetimes/ints): about 3x faster than row dicts.
    """
    rows = [op.__dict__ for op in ops]
    columns: dict[str, Any] = {
        name: [row[name] for row in rows] for name in OPS_SCHEMA.names if name != "ingested_at"
    }
    columns["ingested_at"] = pa.array(ingested_ms, type=pa.int64()).cast(OPS_SCHEMA.field("ingested_at").type)
    return pa.Table.from_pydict(columns, schema=OPS_SCHEMA)


def to_parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=COMPRESSION)
    return bytes(sink.getvalue().to_pybytes())
