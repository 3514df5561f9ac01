"""The Arrow schema of the ``ops`` table and its Glue column types.

template.yaml declares the same columns for Glue/Athena; an infrastructure test asserts that
the two agree, so the writer can never produce a file Athena reads differently.
"""

from __future__ import annotations

import re

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

# The one map between Arrow and Glue (Hive DDL) types: the writer, the derived tables and the
# datasets name Glue columns from Arrow schemas; the embedded engine reads Glue columns as Arrow.
# The first Glue name of an Arrow type is the one written; the others are accepted when read.
_GLUE_NAMES: tuple[tuple[str, pa.DataType], ...] = (
    ("string", pa.string()),
    ("varchar", pa.string()),
    ("char", pa.string()),
    ("boolean", pa.bool_()),
    ("tinyint", pa.int8()),
    ("smallint", pa.int16()),
    ("int", pa.int32()),
    ("integer", pa.int32()),
    ("bigint", pa.int64()),
    ("float", pa.float32()),
    ("double", pa.float64()),
    ("date", pa.date32()),
    ("timestamp", pa.timestamp("ms")),  # Athena's timestamp has no zone; the writer's values are UTC
    ("binary", pa.binary()),
)
_ARROW_OF_GLUE: dict[str, pa.DataType] = dict(_GLUE_NAMES)
_GLUE_OF_ARROW: dict[pa.DataType, str] = {}
for _name, _arrow in _GLUE_NAMES:
    _GLUE_OF_ARROW.setdefault(_arrow, _name)


def glue_type(arrow_type: pa.DataType) -> str:
    """The Glue/Athena (Hive DDL) type name for an Arrow type."""
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_map(arrow_type):
        return f"map<{glue_type(arrow_type.key_type)},{glue_type(arrow_type.item_type)}>"
    if pa.types.is_list(arrow_type):
        return f"array<{glue_type(arrow_type.value_type)}>"
    try:
        return _GLUE_OF_ARROW[arrow_type]
    except KeyError:
        raise TypeError(f"no Glue type for Arrow type {arrow_type}") from None


def split_top_level(text: str) -> list[str]:
    """Split ``a, map<b,c>, d`` on top-level commas."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def arrow_type(glue_type: str) -> pa.DataType:
    """The Arrow type of a Glue (Hive DDL) column type; ``TypeError`` for one with no Arrow twin."""
    text = glue_type.strip().lower()
    if text in _ARROW_OF_GLUE:
        return _ARROW_OF_GLUE[text]
    if re.fullmatch(r"(?:var)?char\(\d+\)", text):
        return pa.string()
    if match := re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", text):
        return pa.decimal128(int(match[1]), int(match[2]))
    if text.startswith("array<") and text.endswith(">"):
        return pa.list_(arrow_type(text[6:-1]))
    if text.startswith("map<") and text.endswith(">"):
        key, value = split_top_level(text[4:-1])
        return pa.map_(arrow_type(key), arrow_type(value))
    if text.startswith("struct<") and text.endswith(">"):
        fields = [part.split(":", 1) for part in split_top_level(text[7:-1])]
        return pa.struct([(name.strip(), arrow_type(kind)) for name, kind in fields])
    raise TypeError(f"Glue column type {glue_type!r} has no Arrow type")


def glue_columns(schema: pa.Schema = OPS_SCHEMA) -> list[dict[str, str]]:
    """Glue ``Columns`` for a schema (partition keys are separate and always strings)."""
    return [{"Name": f.name, "Type": glue_type(f.type)} for f in schema if f.name not in PARTITION_KEYS]
