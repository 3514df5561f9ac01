"""Decode a whole batch of queue bodies in Arrow, or decline so the per-record path decides.

Validating 10,000 bodies one by one with :class:`QueuedOp` costs about 12 µs each, most of the
writer's time. :func:`decode_batch` parses every body at once with ``pyarrow.json`` and checks,
vectorised, every constraint ``QueuedOp`` enforces. It is an optimisation only, so it is built
to *decline* (return ``None``) whenever it cannot be sure that pydantic would accept every body
and produce exactly the same values; the caller then runs the per-record path, which sorts out
rejects precisely. In particular it declines:

* bodies the Arrow reader would split or join differently than one JSON object per message
  (a newline or any other raw control character, a body not starting with ``{``, two objects
  on one line), and bodies that do not encode as UTF-8;
* any explicit ``null`` member (``to_message`` never writes one, and Arrow cannot tell
  ``"k": null`` from a missing key inside ``attributes``);
* anything ``read_json`` refuses (bad JSON, a wrong JSON type, duplicate keys, NaN/ints in the
  wrong place), unknown fields, and any value outside the model's constraints;
* timestamps other than the two shapes ``to_message`` writes (``…T10:15:00Z`` and
  ``…T10:15:00.123000Z``), although pydantic accepts offsets and numbers too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from opslake.lake.schema import OPS_SCHEMA
from opslake.models.ops import (
    MAX_ATTRIBUTE_KEY_CHARS,
    MAX_ATTRIBUTE_VALUE_CHARS,
    MAX_ATTRIBUTES,
    MAX_DURATION_MS,
    MAX_ID_CHARS,
    TEXT_LIMITS,
    AttributeKey,
    Id,
    TurnNumber,
)

#: The columns of a queued op: the ``ops`` table without ``ingested_at`` (the queue's receive time).
QUEUED_SCHEMA = OPS_SCHEMA.remove(OPS_SCHEMA.get_field_index("ingested_at"))

_ID_FIELDS = (
    "op_id",
    "endpoint",
    "source",
    "agent_id",
    "reporter_id",
    "session_id",
    "trace_id",
    "error_type",
    "sig_hash",
    "event_kind",
    "task_class",
)
# Fields pydantic requires to be present and non-null. ``truncated`` and ``attributes`` have
# defaults, but ``to_message`` always writes them; requiring them avoids telling "missing" from
# "null" (which pydantic refuses for them) apart.
_REQUIRED_FIELDS = (*(f.name for f in QUEUED_SCHEMA if not f.nullable), "attributes")


def _metadata_value(annotated: Any, attribute: str) -> Any:
    """A constraint (``pattern``, ``ge``, ``le``) from an ``Annotated`` type of the model, so the
    fast path checks the model's own numbers and patterns instead of copies of them."""
    for item in annotated.__metadata__:
        for candidate in [item, *getattr(item, "metadata", ())]:
            value = getattr(candidate, attribute, None)
            if value is not None:
                return value
    raise LookupError(f"{annotated} has no {attribute} constraint")


# pydantic runs ``pattern`` with Rust's regex crate, whose ``\S`` is "not Unicode White_Space";
# Arrow's RE2 ``\S`` is ASCII-only. Spell the Unicode class out (a unit test compares every code
# point below U+3100, which covers all of White_Space, against pydantic).
_UNICODE_WHITE_SPACE = (
    r"\x{9}-\x{d}\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
)
_MODEL_ID_PATTERN = r"^\S(?:.*\S)?$"
if _metadata_value(Id, "pattern") != _MODEL_ID_PATTERN:  # pragma: no cover - guards a model change
    raise RuntimeError("the Id pattern changed: update opslake.lake.fastpath to match")
ID_PATTERN_RE2 = _MODEL_ID_PATTERN.replace(r"\S", f"[^{_UNICODE_WHITE_SPACE}]")
ATTRIBUTE_KEY_PATTERN = _metadata_value(AttributeKey, "pattern")
TURN_MIN = _metadata_value(TurnNumber, "ge")
TURN_MAX = _metadata_value(TurnNumber, "le")

# The two timestamp shapes ``QueuedOp.to_message`` writes (pydantic omits a zero fraction).
_TS_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{6})?Z$"
# A JSON member whose value is null. The look-behind skips escaped quotes inside strings; it
# misses only a key ending in a backslash, which no valid field or attribute key does (and which
# the field-name checks decline anyway).
_NULL_MEMBER = re.compile(r'(?<!\\)"\s*:\s*null')
_CONTROL_BYTES = bytes(range(0x20))


def decode_batch(bodies: Sequence[str]) -> pa.Table | None:
    """All bodies as one table in :data:`QUEUED_SCHEMA` (row i is body i), or ``None`` when any
    body might be refused or decoded differently by ``QueuedOp.model_validate_json``."""
    data = _ndjson(bodies)
    if data is None:
        return None
    raw = _read(data, len(bodies))
    if raw is None:
        return None
    ts = _timestamps(_column(raw, "ts"))
    if ts is None or not _valid(raw):
        return None
    return _to_queued_table(raw, ts)


# ---- step 1: the bodies as newline-delimited JSON --------------------------------------------


def _ndjson(bodies: Sequence[str]) -> bytes | None:
    """The bodies joined by newlines, or ``None`` unless each body is exactly one line that
    starts with ``{`` and has no raw control character and no null member."""
    if not bodies:
        return None
    if {body[:1] for body in bodies} != {"{"}:
        return None
    text = "\n".join(bodies)
    if "null" in text and _NULL_MEMBER.search(text):
        return None
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: let pydantic say what it makes of it
        return None
    # The only control bytes allowed are the len(bodies) - 1 newlines joining the bodies.
    if len(data.translate(None, _CONTROL_BYTES)) != len(data) - (len(bodies) - 1):
        return None
    return data


# ---- step 2: read_json -------------------------------------------------------------------------


def _read_schema(attribute_names: Sequence[str] = ()) -> pa.Schema:
    """The explicit schema for ``read_json``: ``ts`` as text (checked and parsed afterwards) and
    ``attributes`` as a struct (the JSON reader cannot read maps) of the given string keys."""
    fields = []
    for f in QUEUED_SCHEMA:
        if f.name == "ts":
            f = pa.field("ts", pa.string())
        elif f.name == "attributes":
            f = pa.field("attributes", pa.struct([pa.field(name, pa.string()) for name in attribute_names]))
        fields.append(f.with_nullable(True))
    return pa.schema(fields)


#: Attribute keys are read as one struct column per distinct key, i.e. about 4 bytes x rows x
#: keys. The vocabulary is learned from the first rows and capped, and the full read refuses any
#: other key, so a batch of random keys (a client can send 50 per op) costs at most
#: ~10 MB here before the per-record path takes over, instead of exhausting the Lambda's memory.
VOCABULARY_SAMPLE_ROWS = 256
MAX_ATTRIBUTE_VOCABULARY = 256


def _read_once(data: bytes, schema: pa.Schema, unexpected: str) -> pa.Table | None:
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected)
    # One block for the whole batch: one type inference, no cross-block surprises.
    read = pj.ReadOptions(block_size=len(data) + 1)
    try:
        return pj.read_json(pa.py_buffer(data), read_options=read, parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _first_lines(data: bytes, count: int) -> bytes:
    end = -1
    for _ in range(count):
        end = data.find(b"\n", end + 1)
        if end < 0:
            return data
    return data[:end]


def _read(data: bytes, rows: int) -> pa.Table | None:
    """The parsed batch with every attribute value as text, or ``None``.

    Two reads: the first rows with inference (``"infer"``) give the attribute-key vocabulary;
    the whole batch is then read with every field and key declared (``"error"``), so an unknown
    top-level field, an attribute key outside the vocabulary or a non-string attribute value
    makes the reader fail and the batch decline. Declaring the keys as strings also keeps
    date-like values verbatim (inference would turn them into timestamps).
    """
    sample = _read_once(_first_lines(data, VOCABULARY_SAMPLE_ROWS), _read_schema(), "infer")
    if sample is None or sample.schema.names != QUEUED_SCHEMA.names:
        return None
    vocabulary = [f.name for f in sample.schema.field("attributes").type]
    if len(vocabulary) > MAX_ATTRIBUTE_VOCABULARY:
        return None
    table = _read_once(data, _read_schema(vocabulary), "error")
    if table is None or table.num_rows != rows:
        return None
    return table.combine_chunks()


# ---- step 3: every QueuedOp constraint, vectorised ----------------------------------------------


def _column(table: pa.Table, name: str) -> Any:
    """One column as an array (the table is never empty and its chunks were combined)."""
    return table.column(name).chunk(0)


def _all(mask: pa.Array) -> bool:
    """True when every non-null entry is true (nulls are optional fields that are absent)."""
    return bool(pc.all(mask).as_py() in (True, None))


def _lengths_within(values: pa.Array, low: int, high: int) -> bool:
    lengths = pc.utf8_length(values)
    return _all(pc.and_(pc.greater_equal(lengths, low), pc.less_equal(lengths, high)))


def _valid(table: pa.Table) -> bool:
    """Whether pydantic would accept every row unchanged (JSON types were checked by read_json,
    ``ts`` by :func:`_timestamps`)."""
    if any(table.column(name).null_count for name in _REQUIRED_FIELDS):
        return False
    for name in _ID_FIELDS:
        values = pc.unique(_column(table, name))  # labels repeat a lot: check each one once
        if not _lengths_within(values, 1, MAX_ID_CHARS):
            return False
        if not _all(pc.match_substring_regex(values, ID_PATTERN_RE2)):
            return False
    for name, limit in TEXT_LIMITS.items():
        if not _lengths_within(_column(table, name), 0, limit):
            return False
    duration = _column(table, "duration_ms")
    if not _all(pc.is_finite(duration)) or not _all(
        pc.and_(pc.greater_equal(duration, 0), pc.less_equal(duration, MAX_DURATION_MS))
    ):
        return False
    turn = _column(table, "applied_at_turn")
    if not _all(pc.and_(pc.greater_equal(turn, TURN_MIN), pc.less_equal(turn, TURN_MAX))):
        return False
    return _attributes_valid(_column(table, "attributes"))


def _timestamps(ts: pa.Array) -> pa.Array | None:
    """``ts`` as timestamp[ms, UTC] cut to the millisecond like ``_utc_ms``, or ``None`` unless
    every value has one of ``to_message``'s shapes and names a real instant.

    The text is cut to milliseconds before parsing (``_utc_ms`` floors the microsecond field,
    which is the same as dropping its last three digits). Arrow's parser refuses exactly the
    dates and times Python's ``datetime`` refuses (day 30 of February, hour 24, second 60; a unit
    test compares them), except year 0, which is declined here.
    """
    if not _all(pc.match_substring_regex(ts, _TS_PATTERN)):
        return None
    full = pc.replace_substring_regex(ts, r"^(.{19})Z$", r"\1.000000Z")
    millis_text = pc.utf8_slice_codeunits(full, 0, 23)  # 2026-11-21T10:15:00.123
    if not _all(pc.invert(pc.starts_with(millis_text, "0000"))):
        return None
    try:
        parsed = pc.binary_join_element_wise(millis_text, "Z", "").cast(OPS_SCHEMA.field("ts").type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return parsed


def _attributes_valid(attributes: pa.StructArray) -> bool:
    """Keys match the model's pattern and length, values fit, at most MAX_ATTRIBUTES per op."""
    names = pa.array([f.name for f in attributes.type], pa.string())
    if not _lengths_within(names, 1, MAX_ATTRIBUTE_KEY_CHARS) or not _all(
        pc.match_substring_regex(names, ATTRIBUTE_KEY_PATTERN)
    ):
        return False
    if attributes.type.num_fields > MAX_ATTRIBUTES and not _all(
        pc.less_equal(_entries_per_row(attributes), MAX_ATTRIBUTES)
    ):
        return False
    return all(_lengths_within(child, 0, MAX_ATTRIBUTE_VALUE_CHARS) for child in _children(attributes))


def _children(attributes: pa.StructArray) -> list[pa.Array]:
    return [attributes.field(i) for i in range(attributes.type.num_fields)]


def _entries_per_row(attributes: pa.StructArray) -> pa.Array:
    counts: pa.Array = pa.array([0] * len(attributes), pa.int32())
    for child in _children(attributes):
        counts = pc.add(counts, pc.cast(pc.is_valid(child), pa.int32()))
    return counts


# ---- step 4: the table in the lake's types -----------------------------------------------------


def _to_queued_table(table: pa.Table, ts: pa.Array) -> pa.Table:
    """Columns in :data:`QUEUED_SCHEMA` order and types (nullability included)."""
    columns = []
    for f in QUEUED_SCHEMA:
        if f.name == "ts":
            columns.append(ts)
        elif f.name == "attributes":
            columns.append(attributes_map(_column(table, "attributes")))
        else:
            columns.append(_column(table, f.name).cast(f.type))
    return pa.Table.from_arrays(columns, schema=QUEUED_SCHEMA)


def attributes_map(attributes: pa.StructArray) -> pa.MapArray:
    """The struct of attribute keys as ``map<string,string>``, each row's entries sorted by key
    (the slow path sorts too: JSON key order is not part of an op, and sorting makes it so).

    Entries are all (row, key, value) triples with a value, stably sorted by row; keys were
    concatenated in sorted order, so within a row they stay sorted.
    """
    map_type = OPS_SCHEMA.field("attributes").type
    rows = len(attributes)
    order = sorted(range(attributes.type.num_fields), key=lambda i: attributes.type.field(i).name)
    names = pa.array([attributes.type.field(i).name for i in order], pa.string())
    all_rows = pa.array(range(rows), pa.int32())
    row_numbers, key_numbers, values = [], [], []
    for rank, i in enumerate(order):
        child = attributes.field(i)
        present = pc.is_valid(child)
        row_numbers.append(pc.filter(all_rows, present))
        values.append(pc.filter(child, present))
        key_numbers.append(pa.array([rank] * len(values[-1]), pa.int32()))
    if not order:
        offsets = pa.array([0] * (rows + 1), pa.int32())
        return pa.MapArray.from_arrays(
            offsets, pa.array([], pa.string()), pa.array([], pa.string()), type=map_type
        )
    entries = pa.table(
        {
            "row": pa.concat_arrays(row_numbers),
            "key": pa.concat_arrays(key_numbers),
            "value": pa.concat_arrays(values),
        }
    )
    entries = entries.take(pc.sort_indices(entries, sort_keys=[("row", "ascending"), ("key", "ascending")]))
    per_row = _entries_per_row(attributes)
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(per_row)])
    keys = pc.take(names, entries.column("key").combine_chunks())
    return pa.MapArray.from_arrays(
        offsets, keys, entries.column("value").combine_chunks().cast(pa.string()), type=map_type
    )
