"""The LLM client's memory between scheduled runs: breaker, recent outcomes and token usage.

:class:`UsageLedger` is the pure bookkeeping (hourly token buckets pruned to 24 hours, the outcome
of the last ``window`` calls); :class:`LlmStateStore` loads and saves the whole
:class:`~opslake.models.llm.LlmState` as JSON at ``s3://<lake>/<llm_state_key>``, the object
``GET /model`` reads. A missing object is a fresh, closed state; an unreadable one is logged and
replaced by a fresh state (a lost breaker is better than an analyzer that cannot start); a failed
save raises :class:`LlmStateError` for the caller to report.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from opslake.llm.errors import LlmStateError
from opslake.models.llm import MAX_LAST_ERROR_CHARS, LlmState, TokenBucket

ERROR_RATE_WINDOW = 50  # calls
USAGE_WINDOW = timedelta(hours=24)


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

    def save(self, state: LlmState) -> None:
        """Write the state; raises :class:`LlmStateError` when S3 refuses."""
        from botocore.exceptions import BotoCoreError, ClientError

        body = state.model_dump_json(exclude_none=False).encode()
        try:
            self._s3().put_object(Bucket=self.bucket, Key=self.key, Body=body, ContentType="application/json")
        except (ClientError, BotoCoreError) as exc:
            raise LlmStateError(f"could not save the LLM state to {self.uri}: {exc}") from exc
