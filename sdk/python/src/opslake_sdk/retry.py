"""When to resend a batch, and how long to wait first: the ``/events`` retry contract.

A 503 means nothing was accepted and ``Retry-After`` says when to come back; 429 (API Gateway's
throttle), other 5xx and network errors are retried the same way. Every resend carries the same
op ids, so the lake keeps one op however often a batch is sent. Any other 4xx would fail again
unchanged and is not retried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from opslake_sdk.ops import RNG

THROTTLED = 429


def is_retryable(status: int) -> bool:
    """Whether an answer with this status invites the same request again: 429 and every 5xx."""
    return status == THROTTLED or 500 <= status <= 599


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return None if math.isnan(seconds) else max(0.0, seconds)  # inf is capped by the policy
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` sends of one batch at most; between them the server's ``Retry-After`` or
    an exponential backoff from ``base_s`` with jitter, either capped at ``max_backoff_s`` (a
    server asking for an hour must not hold the agent's ops, or its exit, that long)."""

    max_attempts: int = 6
    base_s: float = 0.5
    max_backoff_s: float = 30.0

    def delay(self, retry: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first resend)."""
        if retry_after_s is not None:
            return min(retry_after_s, self.max_backoff_s)
        backoff = min(self.base_s * 2 ** (retry - 1), self.max_backoff_s)
        return backoff * RNG.uniform(0.5, 1.0)  # jitter: many agents must not retry in step
