"""When another HTTP attempt at the model may help, and how long to wait before it.

An attempt is retried when it ends *unavailable* (a timeout, a transport error, or 408, 409, 429 or
any 5xx, 529 included); a spent quota (429 ``insufficient_quota``), a refused request and an
invalid answer are never retried, since the next attempt would end the same way. The wait is what
the server asks for in ``retry-after-ms`` or ``Retry-After`` (capped), otherwise exponential
backoff with full jitter so that throttled callers spread out.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TypeVar

from opslake.llm.errors import LlmError, LlmUnavailableError

R = TypeVar("R")

RETRYABLE_STATUSES = frozenset({408, 409, 429})  # and every 5xx
BACKOFF_BASE_S = 0.5


class AttemptFailed(Exception):
    """One attempt failed with ``error``; ``retry_after_s`` is the server's requested wait, ``usage``
    the (tokens in, tokens out) the attempt spent all the same."""

    def __init__(
        self, error: LlmError, *, retry_after_s: float | None = None, usage: tuple[int, int] = (0, 0)
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after_s = retry_after_s
        self.usage = usage


def retryable_status(status: int) -> bool:
    """Whether an HTTP status means the endpoint is busy or failing for now (not refusing us)."""
    return status in RETRYABLE_STATUSES or status >= 500


def retryable(error: LlmError) -> bool:
    """Whether another attempt may end differently: only when the endpoint was unavailable."""
    return isinstance(error, LlmUnavailableError)


def retry_after_s(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asks to wait (``retry-after-ms``, ``Retry-After`` seconds or HTTP-date);
    ``now`` is epoch seconds, for the HTTP-date form."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


class RetryPolicy:
    """Runs attempts until one succeeds, one fails for good, or ``max_retries`` retries are spent."""

    def __init__(
        self,
        *,
        max_retries: int,
        retry_after_cap_s: float,
        sleep: Callable[[float], None],
        rng: random.Random,
    ) -> None:
        self.max_retries = max_retries
        self.retry_after_cap_s = retry_after_cap_s
        self._sleep = sleep
        self._rng = rng

    def run(self, attempt: Callable[[int], R]) -> tuple[R, int]:
        """``attempt(n)`` for n = 1, 2, … until it returns; the result and the number of attempts.

        Raises the last :class:`AttemptFailed`, its ``error.attempts`` set to the attempts made."""
        number = 0
        while True:
            number += 1
            try:
                return attempt(number), number
            except AttemptFailed as failed:
                failed.error.attempts = number
                if not retryable(failed.error) or number > self.max_retries:
                    raise
                delay = self.delay(number, failed.retry_after_s)
                _log_retry(failed.error, number, delay)
                self._sleep(delay)

    def delay(self, attempt: int, retry_after_s: float | None) -> float:
        """The wait after failed attempt number ``attempt``: the server's (capped), else full jitter."""
        cap = self.retry_after_cap_s
        if retry_after_s is not None:
            return min(retry_after_s, cap)
        return self._rng.uniform(0, min(cap, BACKOFF_BASE_S * 2 ** (attempt - 1)))


def _log_retry(error: LlmError, attempt: int, delay: float) -> None:
    from opslake.observability import logger

    logger.warning(
        "LLM attempt failed: retrying",
        attempt=attempt,
        status=error.status,
        error_type=error.error_type,
        delay_s=round(delay, 3),
        error=error.message[:300],
    )
