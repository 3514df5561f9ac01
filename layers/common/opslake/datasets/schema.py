"""Arrow schemas of the sample datasets, their Glue columns, and rows → Arrow tables.

Imports pyarrow: for the loader and tests, never for a gateway handler (which read the tables
through Glue and the query engine). template.yaml declares the same Glue columns; an
infrastructure test asserts that they agree.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from opslake.datasets.staffing import PLACEMENTS, WORKERS
from opslake.lake.schema import glue_type

WORKERS_SCHEMA = pa.schema(
    [
        pa.field("worker_id", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("city", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("skills", pa.list_(pa.string()), nullable=False),
        pa.field("certifications", pa.list_(pa.string()), nullable=False),
        pa.field("availability", pa.string(), nullable=False),
        pa.field("years_experience", pa.int32(), nullable=False),
        pa.field("rating", pa.float64(), nullable=False),
        pa.field("hourly_rate", pa.float64(), nullable=False),
    ]
)

PLACEMENTS_SCHEMA = pa.schema(
    [
        pa.field("placement_id", pa.string(), nullable=False),
        pa.field("worker_id", pa.string(), nullable=False),
        pa.field("client", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("city", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("start_date", pa.date32(), nullable=False),
        pa.field("end_date", pa.date32()),
        pa.field("status", pa.string(), nullable=False),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {WORKERS: WORKERS_SCHEMA, PLACEMENTS: PLACEMENTS_SCHEMA}


def glue_columns(table: str) -> list[dict[str, str]]:
    """Glue ``Columns`` of a dataset table (unpartitioned: every field is a column)."""
    return [{"Name": f.name, "Type": glue_type(f.type)} for f in SCHEMAS[table]]


def to_arrow(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows of a dataset table as an Arrow table with its schema (fails on a missing column)."""
    return pa.Table.from_pylist(rows, schema=SCHEMAS[table])
