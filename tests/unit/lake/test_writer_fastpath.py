"""The Arrow fast path of the lake writer: same rows, objects and report as the per-record path,
and it declines (returns None) whenever a body might be refused or decoded differently."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from opslake.lake.fastpath import ID_PATTERN_RE2, decode_batch
from opslake.lake.schema import OPS_SCHEMA
from opslake.lake.writer import LakeWriter, QueueMessage, WriteReport
from opslake.models.ops import (
    MAX_ATTRIBUTE_KEY_CHARS,
    MAX_ATTRIBUTE_VALUE_CHARS,
    MAX_ATTRIBUTES,
    MAX_DURATION_MS,
    MAX_ERROR_CHARS,
    MAX_ID_CHARS,
    MAX_SUMMARY_CHARS,
    Id,
    QueuedOp,
)

from ...fakes import MemoryCatalog, MemoryStore

T0 = datetime(2026, 11, 21, 23, 59, 59, 900000, tzinfo=UTC)  # just before an hour and a day boundary


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def queued(op_id: str = "op-1", **fields: object) -> QueuedOp:
    base: dict[str, object] = {
        "op_id": op_id,
        "ts": T0,
        "endpoint": "/sql",
        "success": True,
        "duration_ms": 3.5,
        "source": "event",
        "agent_id": "agent-1",
        "reporter_id": "rt",
        "attributes": {"role": "welder"},
    }
    return QueuedOp.model_validate({**base, **fields})


def run(
    messages: list[QueueMessage], *, fast_path: bool
) -> tuple[WriteReport, dict[str, bytes], MemoryStore]:
    store = MemoryStore()
    report = LakeWriter(
        store, MemoryCatalog(), ops_prefix="ops/", rejects_prefix="rejects/", fast_path=fast_path
    ).write_batch(messages)
    return report, store.objects, store


def decoded_objects(objects: dict[str, bytes]) -> dict[str, object]:
    """Parquet objects as rows (schema checked), reject files as their JSON lines."""
    out: dict[str, object] = {}
    for key, data in objects.items():
        if key.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(data))
            assert table.schema.equals(OPS_SCHEMA, check_metadata=False)
            out[key] = table.to_pylist()
        else:
            out[key] = [json.loads(line) for line in data.decode().splitlines()]
    return out


def assert_same_as_slow_path(messages: list[QueueMessage]) -> WriteReport:
    fast_report, fast_objects, _ = run(messages, fast_path=True)
    slow_report, slow_objects, _ = run(messages, fast_path=False)
    assert fast_report == slow_report
    assert decoded_objects(fast_objects) == decoded_objects(slow_objects)
    return fast_report


# ---- equivalence on valid batches ---------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_id = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\n"), min_size=1, max_size=12
).filter(lambda s: _is_id(s)) | st.sampled_from(
    ["x" * MAX_ID_CHARS, "é" * MAX_ID_CHARS, "a b", "tool:query_db", "😀"]
)
_key = st.from_regex(r"\A[A-Za-z0-9_.:\-]{1,12}\Z") | st.just("k" * MAX_ATTRIBUTE_KEY_CHARS)
_value = (
    _text | st.just("v" * MAX_ATTRIBUTE_VALUE_CHARS) | st.just("2026-11-21") | st.just("2026-11-21T10:00:00")
)
_ts = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
) | st.sampled_from(
    [
        datetime(2026, 11, 21, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 11, 22, 0, 0, tzinfo=UTC),
        datetime(2024, 2, 29, 12, 0, 0, 1000, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC),
    ]
)


_ID_ADAPTER = TypeAdapter(Id)  # built once: building an adapter costs far more than validating


def _is_id(value: str) -> bool:
    try:
        _ID_ADAPTER.validate_python(value)
    except ValidationError:
        return False
    return True


def _optional(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


ops = st.builds(
    QueuedOp,
    op_id=st.sampled_from(["op-a", "op-b", "op-c"]) | _id,  # a small pool makes duplicates
    ts=_ts,
    endpoint=_id,
    success=st.booleans(),
    duration_ms=st.floats(min_value=0, max_value=MAX_DURATION_MS) | st.sampled_from([0, MAX_DURATION_MS, 3]),
    source=_id,
    agent_id=_id,
    reporter_id=st.sampled_from(["rt-a", "rt-b"]) | _id,  # two keys sharing op ids, too
    session_id=_optional(_id),
    trace_id=_optional(_id),
    error_type=_optional(_id),
    sig_hash=_optional(_id),
    event_kind=_optional(_id),
    task_class=_optional(_id),
    applied_at_turn=_optional(st.integers(0, 1_000_000)),
    rescue_attempted=_optional(st.booleans()),
    rescue_succeeded=_optional(st.booleans()),
    input_summary=_optional(_text | st.just("s" * MAX_SUMMARY_CHARS)),
    output_summary=_optional(_text),
    error=_optional(_text | st.just("é" * MAX_ERROR_CHARS)),
    correction=_optional(_text),
    attributes=st.dictionaries(_key, _value, max_size=MAX_ATTRIBUTES)
    | st.just({f"k{i:02d}": str(i) for i in range(MAX_ATTRIBUTES)}),
    truncated=st.booleans(),
)
_sent = st.integers(-3_000, 3_000).map(lambda delta: millis(T0) + delta)  # across 00:00 (hour and day)


@given(st.lists(st.tuples(ops, _sent), min_size=1, max_size=12))
def test_fast_path_writes_what_the_slow_path_writes(batch: list[tuple[QueuedOp, int]]) -> None:
    messages = [QueueMessage(f"m-{i:03d}", op.to_message(), sent) for i, (op, sent) in enumerate(batch)]
    assert decode_batch([m.body for m in messages]) is not None
    assert_same_as_slow_path(messages)


def test_duplicates_collapse_into_the_earliest_copy_and_fail_with_it() -> None:
    messages = [
        QueueMessage("m-late", queued("dup", error_type="late").to_message(), millis(T0)),
        QueueMessage("m-early", queued("dup", error_type="kept").to_message(), millis(T0) - 1000),
        QueueMessage("m-tie", queued("dup", error_type="tie").to_message(), millis(T0) - 1000),
        QueueMessage("m-other", queued("other").to_message(), millis(T0) + 500),
    ]
    report = assert_same_as_slow_path(messages)
    assert report.duplicates_dropped == 2 and report.records_written == 2
    store = MemoryStore()
    store.fail_keys_containing = "hour=23"
    failed = LakeWriter(store, MemoryCatalog(), ops_prefix="ops/", rejects_prefix="rejects/").write_batch(
        messages
    )
    assert failed.failed_message_ids == ["m-early", "m-late", "m-tie"]


def test_two_keys_sending_one_op_id_keep_a_row_each_and_one_key_resending_keeps_one() -> None:
    """issue 12: another key's op with the same op_id, sent EARLIER, must not replace this key's op."""
    messages = [
        QueueMessage("m-forged", queued("run-1", reporter_id="mallory", error_type="forged").to_message(), 1),
        QueueMessage("m-real", queued("run-1", reporter_id="bob", error_type="real").to_message(), 5),
        QueueMessage("m-retry", queued("run-1", reporter_id="bob", error_type="retry").to_message(), 9),
    ]
    messages = [QueueMessage(m.message_id, m.body, millis(T0) - 5000 + m.sent_ms) for m in messages]
    report = assert_same_as_slow_path(messages)
    assert report.records_written == 2 and report.duplicates_dropped == 1
    (rows,) = decoded_objects(run(messages, fast_path=True)[1]).values()
    assert sorted((r["reporter_id"], r["op_id"], r["error_type"]) for r in rows) == [  # type: ignore[attr-defined]
        ("bob", "run-1", "real"),
        ("mallory", "run-1", "forged"),
    ]


@pytest.mark.parametrize("fast_path", [True, False])
def test_one_keys_failed_partition_never_fails_or_drops_another_keys_op_with_the_same_id(
    fast_path: bool,
) -> None:
    messages = [
        QueueMessage("m-a", queued("same", reporter_id="key-a").to_message(), millis(T0)),  # hour 23
        QueueMessage("m-b", queued("same", reporter_id="key-b").to_message(), millis(T0) + 500),  # hour 00
        QueueMessage("m-b2", queued("same", reporter_id="key-b").to_message(), millis(T0) + 900),  # its retry
    ]
    store = MemoryStore()
    store.fail_keys_containing = "hour=00"
    report = LakeWriter(
        store, MemoryCatalog(), ops_prefix="ops/", rejects_prefix="rejects/", fast_path=fast_path
    ).write_batch(messages)
    assert report.failed_message_ids == ["m-b", "m-b2"]  # key-b's op and its duplicate: redelivered
    assert report.records_written == 1 and report.duplicates_dropped == 1
    (rows,) = decoded_objects(store.objects).values()
    assert [r["reporter_id"] for r in rows] == ["key-a"]  # type: ignore[attr-defined]


def test_attribute_maps_are_sorted_by_key_on_both_paths() -> None:
    body = queued(attributes={"b": "2", "a": "1", "c": "3"}).to_message()
    for fast_path in (True, False):
        _, objects, _ = run([QueueMessage("m", body, millis(T0))], fast_path=fast_path)
        (rows,) = decoded_objects(objects).values()
        assert rows[0]["attributes"] == [("a", "1"), ("b", "2"), ("c", "3")]  # type: ignore[index]


def test_date_like_attribute_values_stay_text() -> None:
    body = queued(attributes={"day": "2026-11-21", "at": "2026-11-21T10:00:00"}).to_message()
    table = decode_batch([body])
    assert table is not None
    assert table.column("attributes").to_pylist() == [[("at", "2026-11-21T10:00:00"), ("day", "2026-11-21")]]


# ---- declining --------------------------------------------------------------------------------

GOOD = queued().to_message()


def _edit(**changes: object) -> str:
    data = json.loads(GOOD)
    for name, value in changes.items():
        if value is _DROP:
            del data[name]
        else:
            data[name] = value
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


_DROP = object()

INVALID_BODIES = {
    "bad JSON": "Test message.",
    "truncated JSON": GOOD[:-1],
    "extra field": _edit(ingested_at="2026-11-21T10:00:00Z"),
    "too-long id": _edit(op_id="x" * (MAX_ID_CHARS + 1)),
    "whitespace id": _edit(op_id=" padded"),
    "unicode whitespace id": _edit(agent_id="agent\u00a0"),
    "attribute key pattern": _edit(attributes={"bad key": "v"}),
    "too many attributes": _edit(attributes={f"k{i}": "v" for i in range(MAX_ATTRIBUTES + 1)}),
    "too-long attribute value": _edit(attributes={"k": "v" * (MAX_ATTRIBUTE_VALUE_CHARS + 1)}),
    "numeric attribute value": _edit(attributes={"k": 1}),
    "null attribute value": _edit(attributes={"k": None}),
    "negative duration": _edit(duration_ms=-1),
    "too-long duration": _edit(duration_ms=MAX_DURATION_MS + 1),
    "NaN duration": GOOD.replace('"duration_ms":3.5', '"duration_ms":NaN'),
    "string bool": _edit(success="true"),
    "int bool": _edit(truncated=1),
    "missing required field": _edit(endpoint=_DROP),
    "null required field": _edit(source=None),
    "null truncated": _edit(truncated=None),
    "turn out of range": _edit(applied_at_turn=1_000_001),
    "ts with offset": _edit(ts="2026-11-21T23:59:59.900000+00:00"),
    "ts without Z": _edit(ts="2026-11-21T23:59:59.900000"),
    "ts as number": _edit(ts=1_700_000_000),
    "ts day 30 of February": _edit(ts="2026-02-30T00:00:00Z"),
    "too-long summary": _edit(input_summary="s" * (MAX_SUMMARY_CHARS + 1)),
    "duplicate key": GOOD.replace('"endpoint":"/sql"', '"endpoint":"/sql","endpoint":"/x"'),
    "newline in body": GOOD.replace(",", ",\n", 1),
    "tab between tokens": GOOD.replace(",", ",\t", 1),
    "leading space": " " + GOOD,
    "two objects": GOOD + GOOD,
    "non-object JSON": "[1, 2]",
    "JSON string": '"op"',
    "empty body": "",
}


@pytest.mark.parametrize("body", INVALID_BODIES.values(), ids=INVALID_BODIES.keys())
def test_fast_path_declines_and_the_writer_matches_the_slow_path(body: str) -> None:
    assert decode_batch([GOOD, body]) is None
    messages = [
        QueueMessage("m-good", GOOD, millis(T0)),
        QueueMessage("m-odd", body, millis(T0)),
        QueueMessage("m-other", queued("op-2").to_message(), millis(T0) + 200),
    ]
    report = assert_same_as_slow_path(messages)
    assert report.failed_message_ids == []


def test_a_rejected_body_is_in_rejects_with_its_reason() -> None:
    messages = [
        QueueMessage("m-good", GOOD, millis(T0)),
        QueueMessage("m-bad", _edit(duration_ms=-1), millis(T0)),
    ]
    report, objects, _ = run(messages, fast_path=True)
    assert report.rejects_written == 1 and report.records_written == 1
    (reject_key,) = [key for key in objects if key.startswith("rejects/")]
    (line,) = decoded_objects(objects)[reject_key]  # type: ignore[misc]
    assert line["message_id"] == "m-bad" and "duration_ms" in line["reason"]


def test_duplicate_message_ids_take_the_slow_path() -> None:
    messages = [
        QueueMessage("m", GOOD, millis(T0)),
        QueueMessage("m", queued("op-2").to_message(), millis(T0)),
    ]
    assert_same_as_slow_path(messages)


# ---- the rules the fast path relies on ---------------------------------------------------------


def test_id_pattern_matches_pydantic_for_every_whitespace_candidate() -> None:
    """RE2's \\S is ASCII-only; the fast path spells out Unicode White_Space (all below U+3100)."""
    chars = [chr(c) for c in range(0x3100) if not 0xD800 <= c < 0xE000]
    for template in ("{}", "a{}", "{}a", "a{}a"):
        values = [template.format(c) for c in chars]
        arrow = pc.match_substring_regex(pa.array(values), ID_PATTERN_RE2).to_pylist()
        assert arrow == [_is_id(v) for v in values], template


def test_arrow_timestamp_parsing_refuses_what_python_refuses() -> None:
    texts = [
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.000Z"
        for year in (1, 1900, 2000, 2023, 2024, 2100, 9999)
        for month in range(0, 14)
        for day in range(0, 33)
        for hour, minute, second in ((0, 0, 0), (23, 59, 59), (24, 0, 0), (12, 60, 0), (12, 0, 60))
    ]
    for text in texts:
        try:
            expected = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        except ValueError:
            expected = None
        try:
            parsed = pa.array([text]).cast(OPS_SCHEMA.field("ts").type)[0].as_py()
        except pa.ArrowInvalid:
            parsed = None
        assert parsed == expected, text


def test_timestamps_are_cut_to_the_millisecond_like_the_model() -> None:
    moments = [T0 + timedelta(microseconds=us) for us in (0, 1, 999, 1000, 123456, 999999)]
    moments += [datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)]
    texts = [moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for moment in moments] + ["2026-01-01T00:00:00Z"]
    bodies = [_edit(op_id=f"op-{i}", ts=text) for i, text in enumerate(texts)]
    table = decode_batch(bodies)
    assert table is not None
    assert table.column("ts").to_pylist() == [QueuedOp.model_validate_json(b).ts for b in bodies]


def test_an_attribute_key_outside_the_sampled_vocabulary_declines_and_the_slow_path_writes_it() -> None:
    from opslake.lake.fastpath import VOCABULARY_SAMPLE_ROWS

    ops = [queued(f"op-{i}", attributes={"role": "welder"}) for i in range(VOCABULARY_SAMPLE_ROWS + 5)]
    ops.append(queued("late", attributes={"surprise": "key"}))
    bodies = [op.to_message() for op in ops]
    assert decode_batch(bodies) is None
    assert decode_batch(bodies[:-1]) is not None
    messages = [QueueMessage(f"m-{i}", body, millis(T0)) for i, body in enumerate(bodies)]
    report = assert_same_as_slow_path(messages)
    assert report.records_written == len(ops)


def test_a_huge_attribute_vocabulary_declines_before_it_costs_memory() -> None:
    from opslake.lake.fastpath import MAX_ATTRIBUTE_VOCABULARY

    ops = [
        queued(f"op-{i}", attributes={f"k{i}-{j}": "v" for j in range(MAX_ATTRIBUTES)})
        for i in range(MAX_ATTRIBUTE_VOCABULARY // MAX_ATTRIBUTES + 2)
    ]
    assert decode_batch([op.to_message() for op in ops]) is None
