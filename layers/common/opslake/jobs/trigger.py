"""What the scheduled jobs (analyzer, consolidator) share: their trigger and their time window.

A job is started either by EventBridge (an event with ``detail-type`` "Scheduled Event") or by
hand with ``{"since": ISO-8601, "until": ISO-8601}``: a *backfill* that re-analyzes that window
without moving the watermark. Anything else is refused with a message saying what was wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from opslake.insights.stats import sql_string
from opslake.models.ops import UtcMs

MAX_BACKFILL = timedelta(days=31)


class JobInputError(ValueError):
    """The invocation event is neither a schedule event nor a valid backfill request."""


class Backfill(BaseModel):
    model_config = ConfigDict(extra="forbid")

    since: UtcMs
    until: UtcMs

    @model_validator(mode="after")
    def _ordered(self) -> Backfill:
        if self.until <= self.since:
            raise ValueError("until must be later than since")
        if self.until - self.since > MAX_BACKFILL:
            raise ValueError(f"a backfill window may span at most {MAX_BACKFILL.days} days")
        return self


@dataclass(frozen=True)
class Window:
    """``[start, end)`` of ``ingested_at`` (UTC, millisecond precision)."""

    start: datetime
    end: datetime

    def hours(self) -> list[tuple[str, str]]:
        """The ``(dt, hour)`` partitions the window touches, oldest first."""
        at = self.start.replace(minute=0, second=0, microsecond=0)
        found = []
        while at < self.end:
            found.append((at.strftime("%Y-%m-%d"), at.strftime("%H")))
            at += timedelta(hours=1)
        return found

    def as_dict(self) -> dict[str, str]:
        return {"since": _iso(self.start), "until": _iso(self.end)}


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds")


def timestamp_literal(value: datetime) -> str:
    value = value.astimezone(UTC)
    return f"TIMESTAMP '{value:%Y-%m-%d %H:%M:%S}.{value.microsecond // 1000:03d}'"


def sql_string_list(values: Sequence[str]) -> str:
    """``'a', 'b'`` for an ``IN (...)`` (sorted, unique); ``''`` when empty, which matches nothing."""
    return ", ".join(sql_string(v) for v in sorted(set(values))) or "''"


def partitions_predicate(hours: list[tuple[str, str]]) -> str:
    """WHERE terms that prune to exactly these ``(dt, hour)`` partitions (Athena and the embedded
    engine both push ``dt``/``hour`` equalities down to the catalog)."""
    if not hours:
        return "FALSE"
    by_day: dict[str, list[str]] = {}
    for dt, hour in hours:
        by_day.setdefault(dt, []).append(hour)
    terms = [
        f"(dt = '{dt}' AND hour IN ({', '.join(repr(h) for h in sorted(day_hours))}))"
        for dt, day_hours in sorted(by_day.items())
    ]
    return "(" + " OR ".join(terms) + ")"


def window_predicate(window: Window, *, from_start_of_hour: bool = False) -> str:
    """WHERE terms for ops ingested in the window, pruned to its partitions. With
    ``from_start_of_hour`` the window's first hour is read whole (a job that rewrites a whole
    partition of a derived table needs every row of the partition up to the window's end)."""
    start = window.start.replace(minute=0, second=0, microsecond=0) if from_start_of_hour else window.start
    return (
        f"{partitions_predicate(window.hours())} "
        f"AND ingested_at >= {timestamp_literal(start)} AND ingested_at < {timestamp_literal(window.end)}"
    )


def parse_trigger(event: Any) -> Backfill | None:
    """``None`` for a scheduled run; the window for a backfill; :class:`JobInputError` otherwise."""
    if isinstance(event, dict) and (
        event.get("detail-type") == "Scheduled Event"
        or event.get("source") in ("aws.events", "aws.scheduler")
    ):
        return None
    if isinstance(event, dict) and ("since" in event or "until" in event):
        try:
            return Backfill.model_validate(event)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'event'}: {e['msg']}" for e in exc.errors()
            )
            raise JobInputError(f"invalid backfill request: {problems}") from exc
    if event in (None, {}):
        return None  # a bare manual invocation runs like the schedule
    raise JobInputError(
        'expected an EventBridge schedule event or {"since": ISO-8601, "until": ISO-8601} (a backfill)'
    )


def scheduled_window(
    watermark: datetime | None,
    now: datetime,
    *,
    settle_s: float,
    initial_lookback: timedelta,
    max_span: timedelta,
) -> Window | None:
    """The next window of a scheduled run: from the watermark (or ``initial_lookback`` ago on the
    first run) to ``settle_s`` before now, at most ``max_span`` long; ``None`` when empty."""
    end = now - timedelta(seconds=settle_s)
    end = end.replace(microsecond=end.microsecond // 1000 * 1000)
    start = watermark or (end - initial_lookback)
    end = min(end, start + max_span)
    return Window(start, end) if end > start else None
