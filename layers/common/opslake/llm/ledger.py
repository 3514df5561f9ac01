"""The LLM client's memory between scheduled runs: breaker, recent outcomes and token usage.

:class:`UsageLedger` is the pure bookkeeping (hourly token buckets pruned to 24 hours, the outcome
of the last ``window`` calls); :class:`LlmStateStore` loads and saves the whole
:class:`~opslake.models.llm.LlmState` as JSON at ``s3://<lake>/<llm_state_key>``, the object
``GET /model`` reads. A missing object is a fresh, closed state; an unreadable one is logged and
replaced by a fresh state (a lost breaker is better than an analyzer that cannot start); a failed
save raises :class:`LlmStateError` for the caller to report.

Several writers share the object (the analyzer and the consolidator, whose runs overlap), each
holding what it read when its run began. A plain put let the last writer win: a run that read a
closed breaker closed the one another run had opened meanwhile, and dropped that run's tokens. So
a writer saves only what it *changed* (:class:`LlmChanges`: the tokens it spent, the outcomes of
its calls, its breaker if it called) merged into the object as it is now (:func:`merge_state`),
written with ``IfMatch`` the ETag it just read, re-read and re-merged when another writer got in
first. One object with merged writes rather than one object per writer: ``GET /model`` and every
reader keep reading one small object, writers need no names or listing, and the merge is a few
pure lines; S3 serialises the writes (:class:`~opslake.lake.conditional.ConditionalJson`, the
primitive under every other shared object of the lake).
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from opslake.llm.errors import LlmStateError
from opslake.models.llm import MAX_LAST_ERROR_CHARS, CircuitState, LlmState, TokenBucket

ERROR_RATE_WINDOW = 50  # calls
USAGE_WINDOW = timedelta(hours=24)
#: Conditional writes of one save: a write loses only to another writer's, so a few rounds suffice
#: unless many writers save at once; then the save is reported (never retried without bound).
SAVE_ATTEMPTS = 5
#: Base of the jittered wait between two conflicting rounds (doubles each round).
CONFLICT_BACKOFF_S = 0.05


def _hour_start(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class UsageLedger:
    """Token usage per clock hour over the last 24 hours, and the outcome of the most recent calls."""

    def __init__(
        self,
        *,
        buckets: list[TokenBucket] | None = None,
        recent_failed: list[bool] | None = None,
        window: int = ERROR_RATE_WINDOW,
    ) -> None:
        self._buckets: dict[datetime, list[int]] = {}
        for bucket in buckets or []:
            counts = self._buckets.setdefault(_hour_start(bucket.hour), [0, 0])
            counts[0] += bucket.tokens_in
            counts[1] += bucket.tokens_out
        self._recent: deque[bool] = deque(recent_failed or [], maxlen=window)

    @classmethod
    def from_state(cls, saved: LlmState) -> UsageLedger:
        """The ledger as a previous run saved it."""
        return cls(buckets=saved.token_buckets, recent_failed=saved.recent_calls_failed)

    def add_tokens(self, now: datetime, tokens_in: int, tokens_out: int) -> None:
        if tokens_in <= 0 and tokens_out <= 0:
            return
        counts = self._buckets.setdefault(_hour_start(now), [0, 0])
        counts[0] += max(0, tokens_in)
        counts[1] += max(0, tokens_out)

    def add_outcome(self, failed: bool) -> None:
        self._recent.append(failed)

    def buckets(self, now: datetime) -> list[TokenBucket]:
        """The buckets of the last 24 hours (the current hour and the 23 before it), oldest first."""
        oldest = _hour_start(now) - USAGE_WINDOW + timedelta(hours=1)
        return [
            TokenBucket(hour=hour, tokens_in=counts[0], tokens_out=counts[1])
            for hour, counts in sorted(self._buckets.items())
            if hour >= oldest
        ]

    def tokens_24h(self, now: datetime) -> tuple[int, int]:
        kept = self.buckets(now)
        return sum(b.tokens_in for b in kept), sum(b.tokens_out for b in kept)

    @property
    def recent_failed(self) -> list[bool]:
        return list(self._recent)

    @property
    def error_rate(self) -> float:
        return sum(self._recent) / len(self._recent) if self._recent else 0.0


@dataclass(frozen=True)
class BreakerView:
    """One writer's breaker as it stands (``changed_at``: when its state last changed)."""

    state: CircuitState
    consecutive_failures: int
    opened_at: datetime | None
    changed_at: datetime | None


@dataclass(frozen=True)
class LlmChanges:
    """What one writer changed since it read the state: the only thing it may write.

    ``tokens`` and ``outcomes`` are its own (added to whatever the object holds, never replacing
    it); ``breaker`` is None when it made no call (then it knows nothing newer of the endpoint)."""

    tokens: list[TokenBucket] = field(default_factory=list)
    outcomes: list[bool] = field(default_factory=list)
    last_error: str | None = None
    breaker: BreakerView | None = None

    @property
    def empty(self) -> bool:
        return not self.tokens and not self.outcomes and self.breaker is None


def _breaker_changed_at(state: LlmState) -> datetime | None:
    # a state saved before changes were timed: an open breaker changed when it opened
    if state.breaker_changed_at is not None:
        return state.breaker_changed_at
    return state.opened_at if state.circuit_breaker != "closed" else None


def merge_state(
    latest: LlmState,
    changes: LlmChanges,
    *,
    now: datetime,
    model: str | None,
    window: int = ERROR_RATE_WINDOW,
) -> LlmState:
    """``latest`` (the object as it is now) with one writer's ``changes`` applied.

    Tokens per hour and call outcomes add up, so no writer's spending is lost whatever the order.
    The breaker is the one whose state changed last: a writer whose breaker changed no later than
    the stored one's (it read the state before another writer opened the breaker, or made no call)
    leaves the stored breaker as it is, so a stale writer never closes an open breaker. On equal
    times (no other writer changed the state since) the writer's consecutive-failure count wins."""
    ledger = UsageLedger(buckets=[*latest.token_buckets, *changes.tokens], window=window)
    for failed in (*latest.recent_calls_failed[-window:], *changes.outcomes):
        ledger.add_outcome(failed)
    breaker = BreakerView(
        latest.circuit_breaker, latest.consecutive_failures, latest.opened_at, _breaker_changed_at(latest)
    )
    mine = changes.breaker
    if mine is not None and _later_or_same(mine.changed_at, breaker.changed_at):
        breaker = mine
    tokens_in, tokens_out = ledger.tokens_24h(now)
    return LlmState(
        circuit_breaker=breaker.state,
        recent_error_rate=ledger.error_rate,
        tokens_in_24h=tokens_in,
        tokens_out_24h=tokens_out,
        updated_at=now,
        model=model if changes.breaker is not None or latest.model is None else latest.model,
        consecutive_failures=breaker.consecutive_failures,
        opened_at=breaker.opened_at,
        breaker_changed_at=breaker.changed_at,
        recent_calls_failed=ledger.recent_failed,
        token_buckets=ledger.buckets(now),
        last_error=changes.last_error if changes.last_error is not None else latest.last_error,
    )


def _later_or_same(mine: datetime | None, theirs: datetime | None) -> bool:
    if theirs is None:
        return True
    return mine is not None and mine >= theirs


def clip_error(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= MAX_LAST_ERROR_CHARS else text[: MAX_LAST_ERROR_CHARS - 1] + "…"


class LlmStateStore:
    """Loads and saves :class:`LlmState` as one JSON object in the lake bucket.

    ``client`` is a boto3 S3 client, or a zero-argument callable returning one (built on first use,
    so importing this module never imports boto3).
    """

    def __init__(self, client: Any, bucket: str, key: str = "state/llm.json") -> None:
        if not bucket:
            raise ValueError("the LLM state store needs a bucket")
        self._client = client
        self.bucket = bucket
        self.key = key

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def _s3(self) -> Any:
        if not hasattr(self._client, "get_object"):  # a factory: build the client now
            self._client = self._client()
        return self._client

    def load(self, *, now: datetime, model: str | None = None) -> LlmState:
        """The saved state, or a fresh closed one when there is none or it cannot be read."""
        from botocore.exceptions import BotoCoreError, ClientError

        from opslake.observability import logger

        try:
            body = self._s3().get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except ClientError as exc:
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if str(error.get("Code")) in ("NoSuchKey", "404", "NotFound") or status == 404:
                return LlmState.fresh(now, model)
            logger.warning("LLM state unreadable: starting closed", uri=self.uri, error=str(exc)[:300])
            return LlmState.fresh(now, model)
        except BotoCoreError as exc:
            logger.warning("LLM state unreadable: starting closed", uri=self.uri, error=str(exc)[:300])
            return LlmState.fresh(now, model)
        try:
            return LlmState.model_validate_json(body)
        except ValidationError as exc:
            logger.warning("LLM state invalid: starting closed", uri=self.uri, error=str(exc)[:300])
            return LlmState.fresh(now, model)

    def update(
        self,
        changes: LlmChanges,
        *,
        now: datetime,
        model: str | None = None,
        attempts: int = SAVE_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> LlmState:
        """Merge ``changes`` into the stored state with a conditional write, and return what was
        written. Another writer's save in between (412) means: read again, merge again, after a
        short jittered wait, up to ``attempts`` rounds. Throttling and transient S3 errors are
        retried by botocore (the client's retry mode), not here. Raises :class:`LlmStateError`
        when S3 refuses (access denied, no bucket) or the rounds are spent."""
        from botocore.exceptions import BotoCoreError

        from opslake.lake.conditional import ConditionalJson, StateError

        target = ConditionalJson(self._s3(), self.bucket, self.key)
        rng = rng or random.Random()
        for attempt in range(attempts):
            if attempt:
                sleep(CONFLICT_BACKOFF_S * 2 ** (attempt - 1) * (0.5 + rng.random()))
            try:
                latest, etag = self._read_for_update(now, model)
                merged = merge_state(latest, changes, now=now, model=model)
                if target.write(merged.model_dump_json(exclude_none=False).encode(), etag) is not None:
                    return merged
            except StateError as exc:  # it names the object
                raise LlmStateError(f"LLM state not saved: {exc}") from exc
            except BotoCoreError as exc:  # no answer from S3, after botocore's retries
                raise LlmStateError(f"LLM state not saved to {self.uri}: {exc}") from exc
        raise LlmStateError(
            f"LLM state not saved to {self.uri}: other writers changed it first {attempts} times in a row"
        )

    def _read_for_update(self, now: datetime, model: str | None) -> tuple[LlmState, str | None]:
        """The stored state and its ETag (a fresh state and None when there is none). An object
        that is not a valid state is replaced (as :meth:`load` starts afresh), conditionally on
        its ETag all the same."""
        from botocore.exceptions import ClientError

        from opslake.lake.conditional import MISSING_CODES, StateError, error_code

        try:
            response = self._s3().get_object(Bucket=self.bucket, Key=self.key)
            body = response["Body"].read()
        except ClientError as exc:
            if error_code(exc) in MISSING_CODES:
                return LlmState.fresh(now, model), None
            raise StateError(f"{self.uri} could not be read: {exc}") from exc
        etag = str(response["ETag"])
        try:
            return LlmState.model_validate_json(body), etag
        except ValidationError:
            return LlmState.fresh(now, model), etag
