"""A circuit breaker for the LLM endpoint: pure logic over an injected clock.

closed → open after ``failure_threshold`` consecutive failed calls; open → half_open once
``cooldown_s`` has passed, which lets exactly one trial call through; the trial's success closes
the circuit, its failure opens it again for another cooldown. Time is epoch seconds from
``clock`` so the state can be saved (``opened_at``) and restored by the next scheduled run.
``changed_at`` is when the state last changed: when two writers' breakers disagree, the state
saved is the one that changed last (:func:`opslake.llm.ledger.merge_state`).
:func:`counts_against_breaker` says which ended calls are failures.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opslake.llm.errors import LlmError, LlmQuotaError, LlmRequestError, LlmUnavailableError
from opslake.models.llm import CircuitState, LlmState

#: Refusals that mean the endpoint is unusable as configured (a wrong key or model), not a bad request.
BREAKER_FAILURE_STATUSES = frozenset({401, 403, 404})


def counts_against_breaker(error: LlmError) -> bool:
    """Whether a call that ended with ``error`` is a failure for the breaker: the endpoint was
    unavailable, the quota is spent, or the key or model is refused. A call the endpoint answered
    (even with an invalid answer or a refused request) shows it is up."""
    if isinstance(error, (LlmUnavailableError, LlmQuotaError)):
        return True
    return isinstance(error, LlmRequestError) and error.status in BREAKER_FAILURE_STATUSES


class CircuitBreaker:
    """Decides whether a call may go out, and learns from how each call ended."""

    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        cooldown_s: float = 900.0,
        clock: Callable[[], float] = time.time,
        state: CircuitState = "closed",
        consecutive_failures: int = 0,
        opened_at: float | None = None,
        changed_at: float | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._state: CircuitState = state
        self.consecutive_failures = consecutive_failures
        self.opened_at = opened_at
        if self._state == "open" and self.opened_at is None:
            self.opened_at = clock()  # an open state without a time: wait a full cooldown from now
        # A state saved before changes were timed: an open one changed when it opened; a closed one
        # at no known time (any timed change by another writer is later).
        self.changed_at = (
            changed_at if changed_at is not None else (None if state == "closed" else self.opened_at)
        )
        self._trial_in_flight = False

    @classmethod
    def from_state(
        cls,
        saved: LlmState,
        *,
        failure_threshold: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.time,
    ) -> CircuitBreaker:
        """The breaker as a previous run saved it."""
        return cls(
            failure_threshold=failure_threshold,
            cooldown_s=cooldown_s,
            clock=clock,
            state=saved.circuit_breaker,
            consecutive_failures=saved.consecutive_failures,
            opened_at=saved.opened_at.timestamp() if saved.opened_at else None,
            changed_at=saved.breaker_changed_at.timestamp() if saved.breaker_changed_at else None,
        )

    @property
    def state(self) -> CircuitState:
        """The state as of now: an open circuit whose cooldown has passed reads as half_open."""
        if self._state == "open" and self._cooldown_over():
            return "half_open"
        return self._state

    def allow(self) -> bool:
        """Whether a call may go out now (half_open lets one trial through until it is recorded)."""
        if self._state == "open":
            if not self._cooldown_over():
                return False
            self._move("half_open")
        if self._state == "half_open":
            if self._trial_in_flight:
                return False
            self._trial_in_flight = True
        return True

    def seconds_until_trial(self) -> float:
        """How long an open circuit still refuses calls (0 when a call may go out)."""
        if self._state != "open" or self.opened_at is None:
            return 0.0
        return max(0.0, self.opened_at + self.cooldown_s - self._clock())

    def record_success(self) -> None:
        self._move("closed")
        self.consecutive_failures = 0
        self.opened_at = None
        self._trial_in_flight = False

    def record_failure(self) -> None:
        self.consecutive_failures += 1
        if self._state == "half_open" or self.consecutive_failures >= self.failure_threshold:
            self._move("open")
            self.opened_at = self._clock()
        self._trial_in_flight = False

    def release(self) -> None:
        """Give back a half-open trial that never reached the endpoint (e.g. the key was unreadable)."""
        self._trial_in_flight = False

    def _move(self, state: CircuitState) -> None:
        """Change state, noting when."""
        if state != self._state:
            self.changed_at = self._clock()
        self._state = state

    def _cooldown_over(self) -> bool:
        return self.opened_at is None or self._clock() - self.opened_at >= self.cooldown_s
