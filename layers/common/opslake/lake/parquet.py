"""Op records to Parquet bytes: the only place records become columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from opslake.lake.schema import OPS_SCHEMA
from opslake.models.ops import QueuedOp

COMPRESSION = "zstd"

#: Most rows in one Parquet row group of an ops file (the writer's and compaction's). Readers decode a
#: row group whole (Arrow's Parquet reader, so the embedded engine inside a 1 GB Lambda), so its size is
#: the unit of a scan's memory; pyarrow's own bound (1,048,576 rows) would let a 128 MiB compacted hour
#: hold one or two groups of hundreds of MB decoded. 131,072 rows is pyarrow's scan batch (one group,
#: one batch) and close to DuckDB's own 122,880; Athena splits and prunes by row group too, and files
#: sorted by ``ingested_at`` (compaction's order) get a time range per group to skip by. The cost is a
#: footer entry and a dictionary per column per group: a few bytes per row.
ROW_GROUP_ROWS = 131_072


def ops_table(ops: Sequence[QueuedOp], ingested_ms: Sequence[int]) -> pa.Table:
    """An Arrow table in :data:`OPS_SCHEMA` from queued ops and their ingestion times (epoch ms).

    Column lists are built straight from the models' ``__dict__`` and converted by Arrow in C++
    (maps from sorted key/value pairs, timestamps from datetimes/ints): about 3x faster than row
    dicts. Attribute entries are sorted by key so that an op's map does not depend on the key
    order its JSON happened to have (the Arrow fast path writes them in the same order).
    """
    rows = [op.__dict__ for op in ops]
    columns: dict[str, Any] = {
        name: [row[name] for row in rows]
        for name in OPS_SCHEMA.names
        if name not in ("ingested_at", "attributes")
    }
    columns["attributes"] = [sorted(row["attributes"].items()) for row in rows]
    columns["ingested_at"] = pa.array(ingested_ms, type=pa.int64()).cast(OPS_SCHEMA.field("ingested_at").type)
    return pa.Table.from_pydict(columns, schema=OPS_SCHEMA)


def to_parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as a Parquet file the way the lake writes one (zstd, row groups of at most
    :data:`ROW_GROUP_ROWS` rows)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    return bytes(sink.getvalue().to_pybytes())
