"""Ask an OpenAI-compatible chat-completions endpoint for JSON that validates against a pydantic model.

One :meth:`LlmClient.complete_json` call is one *call*: up to ``1 + max_retries`` HTTP *attempts*.
:mod:`~opslake.llm.transport` makes each attempt and names how it ended; :mod:`~opslake.llm.retry`
decides whether to try again and how long to wait (unavailable endpoints only, ``Retry-After``
capped, a spent quota never). Each attempt becomes an :class:`LlmCall` record (kept in
:attr:`LlmClient.calls` and passed to ``on_call``) for the caller to turn into op records.

The :class:`~opslake.llm.breaker.CircuitBreaker` counts calls, not attempts
(:func:`~opslake.llm.breaker.counts_against_breaker` says which are failures); an open circuit
fails calls at once, without a request. Breaker, error rate and token usage
(:class:`~opslake.llm.ledger.UsageLedger`) live in an :class:`~opslake.models.llm.LlmState` that
:meth:`LlmClient.save_state` writes to the lake for the next run and for ``GET /model``.

httpx is imported on first use, boto3 only when the key or the state is read.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from opslake.llm.breaker import CircuitBreaker, counts_against_breaker
from opslake.llm.errors import LlmError, LlmUnavailableError
from opslake.llm.ledger import BreakerView, LlmChanges, LlmStateStore, UsageLedger, clip_error, merge_state
from opslake.llm.retry import AttemptFailed, RetryPolicy
from opslake.llm.transport import ChatTransport, Reply, request_body, request_headers
from opslake.models.llm import LlmState

if TYPE_CHECKING:
    import httpx

    from opslake.config import Settings

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class LlmCall:
    """One HTTP attempt and how it ended (``error_type`` is None on success)."""

    model: str
    success: bool
    status: int | None
    error_type: str | None
    tokens_in: int
    tokens_out: int
    latency_ms: float
    started_at: datetime
    attempt: int = 1
    error: str | None = None


@dataclass(frozen=True)
class LlmAnswer(Generic[T]):
    """A validated answer; ``latency_ms`` spans every attempt (and the waits between them)."""

    value: T
    model: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    attempts: int


@dataclass(frozen=True)
class LlmConfig:
    """What the client needs to know; :meth:`from_settings` reads it from the function's settings."""

    base_url: str
    model: str
    timeout_s: float = 30.0
    connect_timeout_s: float = 5.0
    max_retries: int = 3
    retry_after_cap_s: float = 30.0
    breaker_failures: int = 3
    breaker_cooldown_s: float = 900.0
    max_output_tokens: int = 600

    @classmethod
    def from_settings(cls, settings: Settings) -> LlmConfig:
        settings.require("llm_base_url", "llm_model")
        return cls(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            timeout_s=settings.llm_timeout_s,
            connect_timeout_s=settings.llm_connect_timeout_s,
            max_retries=settings.llm_max_retries,
            retry_after_cap_s=settings.llm_retry_after_cap_s,
            breaker_failures=settings.llm_breaker_failures,
            breaker_cooldown_s=settings.llm_breaker_cooldown_s,
            max_output_tokens=settings.llm_max_output_tokens,
        )


class LlmClient:
    """A synchronous client for structured JSON answers, with retries, a breaker and usage accounting."""

    def __init__(
        self,
        config: LlmConfig,
        *,
        api_key: str | Callable[[], str | None] | None = None,
        http: httpx.Client | None = None,
        state_store: LlmStateStore | None = None,
        initial_state: LlmState | None = None,
        on_call: Callable[[LlmCall], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.perf_counter,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._api_key = api_key
        self._transport = ChatTransport(
            config.base_url,
            timeout_s=config.timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            http=http,
            clock=clock,
        )
        self._retry = RetryPolicy(
            max_retries=config.max_retries,
            retry_after_cap_s=config.retry_after_cap_s,
            sleep=sleep,
            rng=rng or random.Random(),
        )
        self._store = state_store
        self._initial_state = initial_state
        self._on_call = on_call
        self._clock = clock
        self._monotonic = monotonic
        self.calls: list[LlmCall] = []
        self._breaker: CircuitBreaker | None = None
        # The state as read, and what this client changed since (all it writes: see ledger.py).
        self._base: LlmState | None = None
        self._spent = UsageLedger()
        self._outcomes: list[bool] = []
        self._last_error: str | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        s3_client: Any = None,
        http: httpx.Client | None = None,
        api_key: str | Callable[[], str | None] | None = None,
        **options: Any,
    ) -> LlmClient:
        """A client for the configured endpoint, its key from ``llm_api_key_parameter`` (read on first
        call) and its state at ``s3://<lake_bucket>/<llm_state_key>`` (when a bucket is configured)."""
        from opslake.llm.keys import key_loader

        store = None
        if settings.lake_bucket:
            store = LlmStateStore(s3_client or _default_s3, settings.lake_bucket, settings.llm_state_key)
        return cls(
            LlmConfig.from_settings(settings),
            api_key=api_key if api_key is not None else key_loader(settings.llm_api_key_parameter),
            http=http,
            state_store=store,
            **options,
        )

    # ---- state ---------------------------------------------------------------------------------
    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker, restored from the saved state on first use."""
        if self._breaker is None:
            if self._initial_state is not None:
                saved = self._initial_state
            elif self._store is not None:
                saved = self._store.load(now=self._now(), model=self.config.model)
            else:
                saved = LlmState.fresh(self._now(), self.config.model)
            self._rebase(saved)
        assert self._breaker is not None
        return self._breaker

    def _rebase(self, saved: LlmState) -> None:
        """Start from ``saved``: its breaker, and no change of this client's yet."""
        self._base = saved
        self._breaker = CircuitBreaker.from_state(
            saved,
            failure_threshold=self.config.breaker_failures,
            cooldown_s=self.config.breaker_cooldown_s,
            clock=self._clock,
        )
        self._spent, self._outcomes, self._last_error = UsageLedger(), [], None

    def changes(self) -> LlmChanges:
        """What this client changed since it read the state (what :meth:`save_state` merges in)."""
        breaker = self.breaker
        assert self._base is not None
        view = None
        # A client that made no call has no news of the endpoint, unless its breaker's cooldown
        # ran out (open reads half_open): then its view is as new as the one it read.
        if self._outcomes or breaker.state != self._base.circuit_breaker:
            view = BreakerView(
                state=breaker.state,
                consecutive_failures=breaker.consecutive_failures,
                opened_at=_instant(breaker.opened_at),
                changed_at=_instant(breaker.changed_at),
            )
        return LlmChanges(
            tokens=self._spent.buckets(self._now()),
            outcomes=list(self._outcomes),
            last_error=self._last_error,
            breaker=view,
        )

    def state(self) -> LlmState:
        """The state as of now: the one read with this client's changes merged in."""
        changes = self.changes()
        assert self._base is not None
        return merge_state(self._base, changes, now=self._now(), model=self.config.model)

    def save_state(self) -> LlmState:
        """Merge this client's changes into the stored state (conditionally: no other writer's update
        is lost) and return what was written; raises LlmStateError when it could not be saved. The
        client then goes on from the merged state (another writer's newer breaker included)."""
        if self._store is None:
            return self.state()
        self.breaker  # noqa: B018 - restores the state first when nothing has yet
        written = self._store.update(self.changes(), now=self._now(), model=self.config.model)
        self._rebase(written)
        return written

    # ---- calls ---------------------------------------------------------------------------------
    def complete_json(
        self,
        messages: Sequence[Mapping[str, Any]],
        answer_model: type[T],
        *,
        schema_name: str | None = None,
        max_tokens: int | None = None,
    ) -> LlmAnswer[T]:
        """Ask for an answer of ``answer_model``'s JSON schema; raise an :class:`LlmError` otherwise."""
        breaker = self.breaker
        if not breaker.allow():
            raise LlmUnavailableError(
                f"the LLM circuit breaker is open: no call for {breaker.seconds_until_trial():.0f} s more",
                circuit_open=True,
            )
        try:
            headers = self._headers()
        except LlmError:
            breaker.release()
            raise
        body = request_body(
            messages,
            answer_model,
            model=self.config.model,
            max_tokens=max_tokens or self.config.max_output_tokens,
            schema_name=schema_name,
        )
        started = self._monotonic()
        spent: list[tuple[int, int]] = []  # (tokens in, tokens out) of each attempt of this call

        def attempt(number: int) -> Reply[T]:
            started_at, t0 = self._now(), self._monotonic()
            try:
                reply = self._transport.send(body, headers, answer_model)
            except AttemptFailed as failed:
                self._record(number, started_at, t0, failed.error.status, failed.usage, failed.error)
                spent.append(failed.usage)
                raise
            self._record(number, started_at, t0, reply.status, reply.usage)
            spent.append(reply.usage)
            return reply

        try:
            reply, attempts = self._retry.run(attempt)
        except AttemptFailed as failed:
            self._finish(failed.error)
            raise failed.error from failed.__cause__
        self._finish(None)
        return LlmAnswer(
            value=reply.value,
            model=reply.model or self.config.model,
            tokens_in=sum(usage[0] for usage in spent),
            tokens_out=sum(usage[1] for usage in spent),
            latency_ms=(self._monotonic() - started) * 1000,
            attempts=attempts,
        )

    def _record(
        self,
        attempt: int,
        started_at: datetime,
        t0: float,
        status: int | None,
        usage: tuple[int, int],
        error: LlmError | None = None,
    ) -> None:
        """Book one attempt: an :class:`LlmCall` (kept and passed to ``on_call``), tokens in the ledger."""
        call = LlmCall(
            model=self.config.model,
            success=error is None,
            status=status,
            error_type=None if error is None else error.error_type,
            tokens_in=usage[0],
            tokens_out=usage[1],
            latency_ms=(self._monotonic() - t0) * 1000,
            started_at=started_at,
            attempt=attempt,
            error=None if error is None else clip_error(error.message),
        )
        self._spent.add_tokens(started_at, *usage)
        self.calls.append(call)
        if self._on_call is not None:
            self._on_call(call)

    def _finish(self, error: LlmError | None) -> None:
        """Book the end of a call: the breaker and the recent outcomes learn how it went."""
        if error is not None and counts_against_breaker(error):
            self.breaker.record_failure()
        else:
            self.breaker.record_success()
        self._outcomes.append(error is not None)
        if error is not None:
            self._last_error = clip_error(error.message)

    def _headers(self) -> dict[str, str]:
        if callable(self._api_key):
            self._api_key = self._api_key()  # read once per client (and cached by Powertools)
        return request_headers(self._api_key)

    def close(self) -> None:
        """Close the HTTP client the client built (one passed in as ``http`` stays open)."""
        self._transport.close()

    def __enter__(self) -> LlmClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _instant(epoch_s: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_s, UTC) if epoch_s is not None else None


def _default_s3() -> Any:
    from opslake import runtime

    return runtime.client("s3")
