"""What the scheduled jobs (analyzer, consolidator) share: their trigger and their time window.

A job is started either by EventBridge (an event with ``detail-type`` "Scheduled Event") or by
hand with ``{"since": ISO-8601, "until": ISO-8601}``: a *backfill* that re-analyzes that window
without moving the watermark. Anything else is refused with a message saying what was wrong.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from opslake.models.ops import UtcMs
from opslake.models.window import Window

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
