"""Ask an OpenAI-compatible chat-completions endpoint for JSON that validates against a pydantic model.

One :meth:`LlmClient.complete_json` call is one *call*: up to ``1 + max_retries`` HTTP *attempts*.
Attempts are retried with exponential backoff and full jitter on 408, 409, 429, 5xx (529 included),
timeouts and transport errors, waiting what ``Retry-After`` asks for (capped); a spent quota
(429 ``insufficient_quota``) and other 4xx are never retried. Each attempt becomes an
:class:`LlmCall` record (kept in :attr:`LlmClient.calls` and passed to ``on_call``) for the caller
to turn into op records.

The circuit breaker counts calls, not attempts: a call that ends unavailable, with a spent quota,
or refused as unauthorised or unknown (401/403/404) is a failure; a call the endpoint answered —
even with an invalid answer — is a success. An open circuit fails calls at once, without a request.
Breaker, error rate and token usage live in an :class:`~opslake.models.llm.LlmState` that
:meth:`LlmClient.save_state` writes to the lake for the next run and for ``GET /model``.

httpx is imported on first use, boto3 only when the key or the state is read.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from opslake.llm.breaker import CircuitBreaker
from opslake.llm.errors import (
    LlmError,
    LlmInvalidAnswerError,
    LlmQuotaError,
    LlmRequestError,
    LlmUnavailableError,
)
from opslake.llm.ledger import LlmStateStore, UsageLedger, clip_error
from opslake.models.llm import LlmState

if TYPE_CHECKING:
    import httpx

    from opslake.config import Settings

T = TypeVar("T", bound=BaseModel)

RETRYABLE_STATUSES = frozenset({408, 409, 429})  # and every 5xx
BREAKER_FAILURE_STATUSES = frozenset({401, 403, 404})  # a wrong key or model: the endpoint is unusable
QUOTA_CODES = frozenset({"insufficient_quota"})
BACKOFF_BASE_S = 0.5
EXCERPT_CHARS = 200
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL | re.IGNORECASE)


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


class _AttemptFailed(Exception):
    """Internal: one attempt failed; ``retry`` says whether another attempt may help."""

    def __init__(
        self, error: LlmError, *, retry: bool, retry_after_s: float | None = None, breaker_failure: bool
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry = retry
        self.retry_after_s = retry_after_s
        self.breaker_failure = breaker_failure


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
        self._http = http
        self._owns_http = http is None
        self._store = state_store
        self._initial_state = initial_state
        self._on_call = on_call
        self._sleep = sleep
        self._clock = clock
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self.calls: list[LlmCall] = []
        self._breaker: CircuitBreaker | None = None
        self._ledger = UsageLedger()
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
            self._breaker = CircuitBreaker(
                failure_threshold=self.config.breaker_failures,
                cooldown_s=self.config.breaker_cooldown_s,
                clock=self._clock,
                state=saved.circuit_breaker,
                consecutive_failures=saved.consecutive_failures,
                opened_at=saved.opened_at.timestamp() if saved.opened_at else None,
            )
            self._ledger = UsageLedger(buckets=saved.token_buckets, recent_failed=saved.recent_calls_failed)
            self._last_error = saved.last_error
        return self._breaker

    def state(self) -> LlmState:
        """The state as of now (what :meth:`save_state` writes)."""
        breaker = self.breaker
        now = self._now()
        tokens_in, tokens_out = self._ledger.tokens_24h(now)
        return LlmState(
            circuit_breaker=breaker.state,
            recent_error_rate=self._ledger.error_rate,
            tokens_in_24h=tokens_in,
            tokens_out_24h=tokens_out,
            updated_at=now,
            model=self.config.model,
            consecutive_failures=breaker.consecutive_failures,
            opened_at=datetime.fromtimestamp(breaker.opened_at, UTC) if breaker.opened_at else None,
            recent_calls_failed=self._ledger.recent_failed,
            token_buckets=self._ledger.buckets(now),
            last_error=self._last_error,
        )

    def save_state(self) -> LlmState:
        """Write the state to the lake (raises LlmStateError when S3 refuses) and return it."""
        current = self.state()
        if self._store is not None:
            self._store.save(current)
        return current

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
        body = {
            "model": self.config.model,
            "messages": [dict(m) for m in messages],
            "temperature": 0,
            "max_tokens": max_tokens or self.config.max_output_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": _SCHEMA_NAME.sub("_", schema_name or answer_model.__name__)[:64],
                    "strict": True,
                    "schema": answer_model.model_json_schema(),
                },
            },
        }
        started = self._monotonic()
        tokens = [0, 0]
        attempt = 0
        while True:
            attempt += 1
            try:
                value, model = self._attempt(body, headers, answer_model, attempt, tokens)
            except _AttemptFailed as failed:
                failed.error.attempts = attempt
                if failed.retry and attempt <= self.config.max_retries:
                    delay = self._delay(attempt, failed.retry_after_s)
                    self._log_retry(failed.error, attempt, delay)
                    self._sleep(delay)
                    continue
                self._finish(failed=True, breaker_failure=failed.breaker_failure, error=failed.error.message)
                raise failed.error from failed.__cause__
            self._finish(failed=False, breaker_failure=False, error=None)
            return LlmAnswer(
                value=value,
                model=model,
                tokens_in=tokens[0],
                tokens_out=tokens[1],
                latency_ms=(self._monotonic() - started) * 1000,
                attempts=attempt,
            )

    def _finish(self, *, failed: bool, breaker_failure: bool, error: str | None) -> None:
        if breaker_failure:
            self.breaker.record_failure()
        else:
            self.breaker.record_success()
        self._ledger.add_outcome(failed)
        if error is not None:
            self._last_error = clip_error(error)

    def _headers(self) -> dict[str, str]:
        if callable(self._api_key):
            self._api_key = self._api_key()  # read once per client (and cached by Powertools)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _client(self) -> httpx.Client:
        if self._http is None:
            import httpx

            timeout = httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s)
            self._http = httpx.Client(timeout=timeout)
        return self._http

    def _attempt(
        self,
        body: dict[str, Any],
        headers: dict[str, str],
        answer_model: type[T],
        attempt: int,
        tokens: list[int],
    ) -> tuple[T, str]:
        import httpx

        url = self.config.base_url.rstrip("/") + "/chat/completions"
        started_at = self._now()
        t0 = self._monotonic()

        def record(status: int | None, error: LlmError | None, usage: tuple[int, int] = (0, 0)) -> None:
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
            tokens[0] += usage[0]
            tokens[1] += usage[1]
            self._ledger.add_tokens(started_at, *usage)
            self.calls.append(call)
            if self._on_call is not None:
                self._on_call(call)

        try:
            response = self._client().post(url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            kind = "connect timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
            error: LlmError = LlmUnavailableError(f"LLM request {kind}: {exc or type(exc).__name__}")
            error.error_type = "llm_timeout"
            record(None, error)
            raise _AttemptFailed(error, retry=True, breaker_failure=True) from exc
        except httpx.TransportError as exc:
            error = LlmUnavailableError(f"LLM transport error: {type(exc).__name__}: {exc}")
            error.error_type = "llm_transport_error"
            record(None, error)
            raise _AttemptFailed(error, retry=True, breaker_failure=True) from exc

        status = response.status_code
        if status >= 300:
            code, message = _server_error(response)
            if code in QUOTA_CODES:
                error = LlmQuotaError(f"LLM quota exhausted ({status}): {message}", status=status)
                record(status, error)
                raise _AttemptFailed(error, retry=False, breaker_failure=True)
            if status in RETRYABLE_STATUSES or status >= 500:
                error = LlmUnavailableError(f"LLM answered {status}: {message}", status=status)
                error.error_type = f"llm_http_{status}"
                record(status, error)
                raise _AttemptFailed(
                    error, retry=True, retry_after_s=self._retry_after(response), breaker_failure=True
                )
            error = LlmRequestError(f"LLM refused the request ({status}): {message}", status=status)
            record(status, error)
            raise _AttemptFailed(error, retry=False, breaker_failure=status in BREAKER_FAILURE_STATUSES)

        try:
            document = response.json()
        except ValueError:
            document = None
        usage = _usage(document)
        content = _content(document)
        if content is None:
            excerpt = _excerpt(response.text)
            error = LlmInvalidAnswerError(
                "the LLM response has no choices[0].message.content", excerpt=excerpt, status=status
            )
            record(status, error, usage)
            raise _AttemptFailed(error, retry=False, breaker_failure=False)
        try:
            value = answer_model.model_validate_json(_unfence(content))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}" for e in exc.errors()[:3]
            )
            error = LlmInvalidAnswerError(
                f"the LLM answer is not a valid {answer_model.__name__}: {problems} — got {_excerpt(content)!r}",
                excerpt=_excerpt(content),
                status=status,
            )
            record(status, error, usage)
            raise _AttemptFailed(error, retry=False, breaker_failure=False) from exc
        record(status, None, usage)
        model = document.get("model") if isinstance(document, dict) else None
        return value, model if isinstance(model, str) and model else self.config.model

    def _retry_after(self, response: httpx.Response) -> float | None:
        """Seconds the server asks to wait (``retry-after-ms``, ``Retry-After`` seconds or HTTP-date)."""
        milliseconds = response.headers.get("retry-after-ms")
        if milliseconds:
            try:
                return max(0.0, float(milliseconds) / 1000)
            except ValueError:
                pass
        value = response.headers.get("retry-after")
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
        return max(0.0, when.timestamp() - self._clock())

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        cap = self.config.retry_after_cap_s
        if retry_after_s is not None:
            return min(retry_after_s, cap)
        return self._rng.uniform(0, min(cap, BACKOFF_BASE_S * 2 ** (attempt - 1)))

    def _log_retry(self, error: LlmError, attempt: int, delay: float) -> None:
        from opslake.observability import logger

        logger.warning(
            "LLM attempt failed: retrying",
            attempt=attempt,
            status=error.status,
            error_type=error.error_type,
            delay_s=round(delay, 3),
            error=error.message[:300],
        )

    def close(self) -> None:
        if self._owns_http and self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> LlmClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _default_s3() -> Any:
    from opslake import runtime

    return runtime.client("s3")


def _server_error(response: httpx.Response) -> tuple[str | None, str]:
    """(error code or type, message) from an error body: OpenAI's ``{"error": {...}}`` or plain text."""
    try:
        document = response.json()
    except ValueError:
        return None, _excerpt(response.text) or response.reason_phrase
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        if error.get("type") in QUOTA_CODES:
            code = error["type"]
        message = error.get("message") or json.dumps(error)[:EXCERPT_CHARS]
        return (str(code) if code else None), _excerpt(str(message))
    if isinstance(error, str):
        return None, _excerpt(error)
    if isinstance(document, dict) and document.get("detail"):
        return None, _excerpt(str(document["detail"]))
    return None, _excerpt(response.text) or response.reason_phrase


def _usage(document: Any) -> tuple[int, int]:
    usage = document.get("usage") if isinstance(document, dict) else None
    if not isinstance(usage, dict):
        return 0, 0

    def count(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and value > 0 else 0

    return count("prompt_tokens"), count("completion_tokens")


def _content(document: Any) -> str | None:
    try:
        content = document["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _unfence(content: str) -> str:
    """The JSON inside a Markdown code fence, if the model wrapped its answer in one."""
    match = _FENCE.match(content)
    return match.group(1) if match else content


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
