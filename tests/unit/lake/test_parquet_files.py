"""The lake's Parquet files: row groups bounded, so a reader's memory does not grow with a file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from opslake.lake.parquet import ROW_GROUP_ROWS, to_parquet_bytes
from opslake.lake.schema import OPS_SCHEMA


def big_ops_table(rows: int) -> pa.Table:
    """``rows`` ops in OPS_SCHEMA built column-wise (more rows than a row group may hold)."""
    ms = pa.array(range(1_767_225_600_000, 1_767_225_600_000 + rows), pa.int64())
    columns = {
        "op_id": pa.array([f"op-{i}" for i in range(rows)]),
        "ts": ms.cast(OPS_SCHEMA.field("ts").type),
        "ingested_at": ms.cast(OPS_SCHEMA.field("ingested_at").type),
        "endpoint": pa.repeat("/sql", rows),
        "source": pa.repeat("event", rows),
        "agent_id": pa.repeat("agent-a", rows),
        "reporter_id": pa.repeat("agent-a", rows),
        "success": pa.repeat(True, rows),
        "duration_ms": pa.repeat(1.5, rows),
        "truncated": pa.repeat(False, rows),
    }
    return pa.table(
        {f.name: columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in OPS_SCHEMA},
        schema=OPS_SCHEMA,
    )


def test_row_groups_hold_at_most_the_bound() -> None:
    rows = 2 * ROW_GROUP_ROWS + 5
    metadata = pq.ParquetFile(pa.BufferReader(to_parquet_bytes(big_ops_table(rows)))).metadata
    assert metadata.num_rows == rows
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sizes == [ROW_GROUP_ROWS, ROW_GROUP_ROWS, 5]
    assert metadata.row_group(0).column(0).compression == "ZSTD"


def test_the_bound_is_well_below_pyarrows_own() -> None:
    # pyarrow's default (1,048,576 rows) would put a 128 MiB compacted hour in one or two groups
    assert 65_536 <= ROW_GROUP_ROWS <= 262_144
