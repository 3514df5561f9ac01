"""OpInput → QueuedOp: defaults, limits, truncation, server-owned fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from opslake.models import (
    MAX_ATTRIBUTE_VALUE_CHARS,
    MAX_ATTRIBUTES,
    MAX_ERROR_CHARS,
    MAX_ID_CHARS,
    MAX_RECORD_BYTES,
    MAX_SUMMARY_CHARS,
    TRUNCATION_MARK,
    OpInput,
    OpRecord,
    QueuedOp,
)
from opslake.models.ids import ULID_RE

NOW = datetime(2026, 11, 21, 10, 0, 0, 123000, tzinfo=UTC)


def queued(**fields: object) -> QueuedOp:
    raw = {"endpoint": "tool:query_db", "success": True, "duration_ms": 12.5, **fields}
    return OpInput.model_validate(raw).to_queued(reporter_id="runtime-a", received_at=NOW)


def test_defaults_fill_what_a_client_may_omit() -> None:
    op = queued()
    assert ULID_RE.match(op.op_id)
    assert op.ts == NOW
    assert op.agent_id == "runtime-a" and op.reporter_id == "runtime-a"
    assert op.source == "event"
    assert op.truncated is False and op.attributes == {}


def test_client_op_id_is_kept_as_idempotency_key() -> None:
    assert queued(op_id="run-42:step-7").op_id == "run-42:step-7"


@pytest.mark.parametrize("field", ["reporter_id", "ingested_at"])
def test_server_owned_fields_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=f"{field} is set by the server"):
        queued(**{field: "x"})


def test_unknown_field_is_refused_not_ignored() -> None:
    with pytest.raises(ValidationError) as info:
        queued(sucess=True)
    assert info.value.errors()[0]["loc"] == ("sucess",)


@pytest.mark.parametrize("value", ["x" * (MAX_ID_CHARS + 1), "", " padded", "tab\t"])
def test_ids_are_bounded_and_trimmed(value: str) -> None:
    with pytest.raises(ValidationError):
        queued(agent_id=value)


def test_id_at_the_limit_is_accepted() -> None:
    assert queued(session_id="s" * MAX_ID_CHARS).session_id == "s" * MAX_ID_CHARS


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("input_summary", MAX_SUMMARY_CHARS),
        ("output_summary", MAX_SUMMARY_CHARS),
        ("error", MAX_ERROR_CHARS),
        ("correction", MAX_ERROR_CHARS),
    ],
)
def test_long_text_is_truncated_with_a_mark_and_a_flag(field: str, limit: int) -> None:
    exact = queued(**{field: "a" * limit})
    assert getattr(exact, field) == "a" * limit and not exact.truncated
    cut = queued(**{field: "b" * (limit + 1)})
    text = getattr(cut, field)
    assert len(text) == limit and text.endswith(TRUNCATION_MARK) and cut.truncated


def test_attributes_are_stringified_bounded_and_truncated() -> None:
    op = queued(attributes={"count": 3, "rate": 1.5, "ok": True, "city": "Austin", "long": "z" * 5000})
    assert op.attributes["count"] == "3" and op.attributes["rate"] == "1.5" and op.attributes["ok"] == "true"
    assert len(op.attributes["long"]) == MAX_ATTRIBUTE_VALUE_CHARS and op.truncated


def test_too_many_attributes_are_refused_with_the_limit() -> None:
    with pytest.raises(ValidationError, match=f"at most {MAX_ATTRIBUTES} attributes"):
        queued(attributes={f"k{i}": "v" for i in range(MAX_ATTRIBUTES + 1)})


@pytest.mark.parametrize("key", ["has space", "", "k" * 129, "semi;colon"])
def test_bad_attribute_keys_are_refused(key: str) -> None:
    with pytest.raises(ValidationError):
        queued(attributes={key: "v"})


def test_record_over_64_kib_is_refused_with_its_size() -> None:
    big = {f"{i:02d}-" + "k" * 120: "v" * MAX_ATTRIBUTE_VALUE_CHARS for i in range(MAX_ATTRIBUTES)}
    with pytest.raises(ValueError, match=f"the limit is {MAX_RECORD_BYTES}"):
        queued(attributes=big, input_summary="i" * 5000, error="e" * 5000, correction="c" * 5000)


def test_ts_more_than_24h_ahead_is_refused() -> None:
    assert queued(ts=(NOW + timedelta(hours=23)).isoformat()).ts == NOW + timedelta(hours=23)
    with pytest.raises(ValueError, match="in the future"):
        queued(ts=(NOW + timedelta(hours=25)).isoformat())


def test_ts_is_normalised_to_utc_milliseconds() -> None:
    assert queued(ts="2026-11-21T12:00:00.123456+02:00").ts == datetime(
        2026, 11, 21, 10, 0, 0, 123000, tzinfo=UTC
    )
    assert queued(ts="2026-11-21T10:00:00").ts.tzinfo == UTC  # naive is UTC
    assert queued(ts=1795255200000).ts == datetime(2026, 11, 21, 10, 0, tzinfo=UTC)  # epoch ms


@pytest.mark.parametrize(
    "fields",
    [
        {"success": "true"},
        {"success": 1},
        {"duration_ms": -1},
        {"duration_ms": float("nan")},
        {"duration_ms": "fast"},
        {"applied_at_turn": -2},
        {"rescue_attempted": "yes"},
    ],
)
def test_wrong_types_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        queued(**fields)


def test_queue_message_round_trips_and_becomes_a_row_with_partitions() -> None:
    op = queued(error="boom", attributes={"role": "welder"}, applied_at_turn=3, rescue_attempted=True)
    again = QueuedOp.model_validate_json(op.to_message())
    assert again == op
    row = OpRecord(**again.model_dump(), ingested_at=datetime(2026, 11, 21, 23, 59, 59, tzinfo=UTC))
    assert (row.dt, row.hour) == ("2026-11-21", "23")
