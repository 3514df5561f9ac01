"""The Arrow schema of the ``ops`` table and its Glue column types.

template.yaml declares the same columns for Glue/Athena; an infrastructure test asserts that
the two agree, so the writer can never produce a file Athena reads differently.
"""

from __future__ import annotations

import pyarrow as pa

from opslake.lake.layout import PARTITION_KEYS

OPS_SCHEMA = pa.schema(
    [
        pa.field("op_id", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("ingested_at", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("endpoint", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("reporter_id", pa.string(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("duration_ms", pa.float64(), nullable=False),
        pa.field("session_id", pa.string()),
        pa.field("trace_id", pa.string()),
        pa.field("input_summary", pa.string()),
        pa.field("output_summary", pa.string()),
        pa.field("error", pa.string()),
        pa.field("error_type", pa.string()),
        pa.field("sig_hash", pa.string()),
        pa.field("event_kind", pa.string()),
        pa.field("task_class", pa.string()),
        pa.field("correction", pa.string()),
        pa.field("applied_at_turn", pa.int32()),
        pa.field("rescue_attempted", pa.bool_()),
        pa.field("rescue_succeeded", pa.bool_()),
        pa.field("attributes", pa.map_(pa.string(), pa.string())),
        pa.field("truncated", pa.bool_(), nullable=False),
    ]
)

_SIMPLE_GLUE_TYPES: dict[pa.DataType, str] = {
    pa.string(): "string",
    pa.bool_(): "boolean",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float64(): "double",
}


def glue_type(arrow_type: pa.DataType) -> str:
    """The Glue/Athena (Hive DDL) type name for an Arrow type."""
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_map(arrow_type):
        return f"map<{glue_type(arrow_type.key_type)},{glue_type(arrow_type.item_type)}>"
    if pa.types.is_list(arrow_type):
        return f"array<{glue_type(arrow_type.value_type)}>"
    try:
        return _SIMPLE_GLUE_TYPES[arrow_type]
    except KeyError:
        raise TypeError(f"no Glue type for Arrow type {arrow_type}") from None


def glue_columns(schema: pa.Schema = OPS_SCHEMA) -> list[dict[str, str]]:
    """Glue ``Columns`` for a schema (partition keys are separate and always strings)."""
    return [{"Name": f.name, "Type": glue_type(f.type)} for f in schema if f.name not in PARTITION_KEYS]
