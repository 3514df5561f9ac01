"""The scheduled jobs' trigger parsing and time windows (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opslake.jobs.trigger import Backfill, JobInputError, parse_trigger, scheduled_window
from opslake.models.window import Window
from opslake.query.sqltext import partitions_predicate, window_predicate

NOW = datetime(2026, 11, 22, 10, 7, 30, 123456, tzinfo=UTC)


def test_schedule_events_and_bare_invocations_are_scheduled_runs() -> None:
    assert parse_trigger({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}) is None
    assert parse_trigger({"source": "aws.scheduler"}) is None
    assert parse_trigger({}) is None
    assert parse_trigger(None) is None


def test_backfill_window_is_parsed_as_utc() -> None:
    found = parse_trigger({"since": "2026-11-21T08:00:00Z", "until": "2026-11-21T10:30:00+01:00"})
    assert found == Backfill(
        since=datetime(2026, 11, 21, 8, tzinfo=UTC), until=datetime(2026, 11, 21, 9, 30, tzinfo=UTC)
    )


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"since": "2026-11-21T08:00:00Z"}, "until: Field required"),
        ({"since": "yesterday", "until": "2026-11-21T08:00:00Z"}, "since: Input should be a valid datetime"),
        (
            {"since": "2026-11-21T08:00:00Z", "until": "2026-11-21T07:00:00Z"},
            "until must be later than since",
        ),
        ({"since": "2026-01-01T00:00:00Z", "until": "2026-03-01T00:00:00Z"}, "at most 31 days"),
        ({"since": "2026-11-21T08:00:00Z", "until": "2026-11-21T09:00:00Z", "force": 1}, "force: Extra"),
        ({"hello": "world"}, "expected an EventBridge schedule event"),
        ([1, 2], "expected an EventBridge schedule event"),
    ],
)
def test_invalid_invocations_say_what_was_wrong(event: object, message: str) -> None:
    with pytest.raises(JobInputError, match=message):
        parse_trigger(event)


def test_first_window_looks_back_and_ends_before_the_settle_delay() -> None:
    window = scheduled_window(
        None, NOW, settle_s=120, initial_lookback=timedelta(hours=24), max_span=timedelta(hours=48)
    )
    assert window is not None
    assert window.end == datetime(2026, 11, 22, 10, 5, 30, 123000, tzinfo=UTC)
    assert window.start == window.end - timedelta(hours=24)


def test_next_window_starts_at_the_watermark_and_is_capped() -> None:
    watermark = NOW - timedelta(days=3)
    window = scheduled_window(
        watermark, NOW, settle_s=120, initial_lookback=timedelta(hours=1), max_span=timedelta(hours=24)
    )
    assert window == Window(watermark, watermark + timedelta(hours=24))


def test_no_window_when_the_watermark_is_already_past_the_settle_point() -> None:
    assert (
        scheduled_window(
            NOW, NOW, settle_s=120, initial_lookback=timedelta(hours=1), max_span=timedelta(hours=1)
        )
        is None
    )


def test_window_hours_cover_every_touched_partition() -> None:
    window = Window(datetime(2026, 11, 21, 22, 55, tzinfo=UTC), datetime(2026, 11, 22, 1, 0, tzinfo=UTC))
    assert window.partitions() == [("2026-11-21", "22"), ("2026-11-21", "23"), ("2026-11-22", "00")]


def test_predicates_prune_partitions_and_cut_the_window() -> None:
    window = Window(datetime(2026, 11, 21, 23, 55, tzinfo=UTC), datetime(2026, 11, 22, 0, 10, 5, tzinfo=UTC))
    assert partitions_predicate(window.partitions()) == (
        "dt >= '2026-11-21' AND dt <= '2026-11-22' "
        "AND ((dt = '2026-11-21' AND hour IN ('23')) OR (dt = '2026-11-22' AND hour IN ('00')))"
    )
    sql = window_predicate(window)
    assert "ingested_at >= TIMESTAMP '2026-11-21 23:55:00.000'" in sql
    assert "ingested_at < TIMESTAMP '2026-11-22 00:10:05.000'" in sql
    whole = window_predicate(window, from_start_of_hour=True)
    assert "ingested_at >= TIMESTAMP '2026-11-21 23:00:00.000'" in whole
    assert partitions_predicate([]) == "FALSE"


def test_window_predicates_prune_days_in_the_embedded_engine_too() -> None:
    """The embedded engine asks Glue only for partitions its top-level dt/hour conjuncts allow."""
    from opslake.query.dialect import Predicate, to_duckdb

    window = Window(datetime(2026, 11, 21, 23, 55, tzinfo=UTC), datetime(2026, 11, 22, 0, 10, tzinfo=UTC))
    query = to_duckdb(f"SELECT count(*) FROM ops WHERE {window_predicate(window)}")
    ((ops, found),) = query.predicates.items()
    assert ops.name == "ops"
    assert {Predicate("dt", ">=", ("2026-11-21",)), Predicate("dt", "<=", ("2026-11-22",))} <= set(found[0])
