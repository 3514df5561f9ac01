"""The one time window of the lake: ops whose ``ingested_at`` is in ``[start, end)``.

``ingested_at`` decides an op's ``(dt, hour)`` partition, so a window also names the partitions a
query must read. The scheduled jobs read ``[watermark, now − settle)``; ``GET /stats`` and
``GET /profile`` read the last N hours. SQL for a window is in :mod:`opslake.query.sqltext`.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from pydantic import computed_field
from pydantic.dataclasses import dataclass


def _utc_ms(moment: datetime) -> datetime:
    """``moment`` in UTC (naive means UTC), cut to the millisecond: the lake's precision."""
    moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


@dataclass(frozen=True)
class Window:
    """``[start, end)`` of ``ingested_at`` (UTC)."""

    start: datetime
    end: datetime

    @classmethod
    def last_hours(cls, now: datetime, hours: int) -> Window:
        """The ``hours`` hours up to and including ``now``'s millisecond (the lake's precision):
        ``end`` is the millisecond after ``now``, so an op ingested at ``now`` is inside."""
        if hours < 1:
            raise ValueError(f"hours out of range: {hours}")
        end = _utc_ms(now) + timedelta(milliseconds=1)
        return cls(end - timedelta(hours=hours), end)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def hours(self) -> int:
        """The window's length in hours, rounded up (answers show it)."""
        return max(0, math.ceil((self.end - self.start) / timedelta(hours=1)))

    def partitions(self) -> list[tuple[str, str]]:
        """The ``(dt, hour)`` partitions the window touches, oldest first."""
        at = self.start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        found = []
        while at < self.end:
            found.append((at.strftime("%Y-%m-%d"), at.strftime("%H")))
            at += timedelta(hours=1)
        return found

    def as_dict(self) -> dict[str, str]:
        """``{"since", "until"}`` as ISO-8601 (the jobs' reports, and a backfill's own shape)."""
        return {
            "since": self.start.astimezone(UTC).isoformat(timespec="milliseconds"),
            "until": self.end.astimezone(UTC).isoformat(timespec="milliseconds"),
        }
