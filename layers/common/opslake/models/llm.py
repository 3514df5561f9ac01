"""The analyzer's LLM state object (``s3://<lake>/state/llm.json``), read by ``GET /model``.

The analyzer and the consolidator merge their runs into it (:mod:`opslake.llm.ledger`: conditional
writes, so neither loses the other's update): the circuit breaker, how often calls failed recently
and how many tokens went in and out over the last 24 hours. It never holds the API key.

``GET /model`` reads only the first six fields; the rest is the LLM client's bookkeeping
(:mod:`opslake.llm`), all with defaults so that an older object still loads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from opslake.models.ops import UtcMs

CircuitState = Literal["closed", "open", "half_open"]
MAX_LAST_ERROR_CHARS = 300


class TokenBucket(BaseModel):
    """Tokens spent in one clock hour (``hour`` is the start of the hour, UTC)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    hour: UtcMs
    tokens_in: Annotated[int, Field(ge=0)] = 0
    tokens_out: Annotated[int, Field(ge=0)] = 0


class LlmState(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    circuit_breaker: CircuitState
    recent_error_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    tokens_in_24h: Annotated[int, Field(ge=0)] = 0
    tokens_out_24h: Annotated[int, Field(ge=0)] = 0
    updated_at: UtcMs
    model: str | None = Field(default=None, description="the model the analyzer last called")
    # ---- the client's bookkeeping (opslake.llm) ----
    consecutive_failures: Annotated[int, Field(ge=0)] = Field(
        default=0, description="failed calls in a row (the breaker opens at llm_breaker_failures)"
    )
    opened_at: UtcMs | None = Field(default=None, description="when the breaker last opened")
    breaker_changed_at: UtcMs | None = Field(
        default=None,
        description="when the breaker last changed state (of two writers, the later change is kept)",
    )
    recent_calls_failed: list[bool] = Field(
        default_factory=list, description="outcome of the most recent calls, oldest first (True = failed)"
    )
    token_buckets: list[TokenBucket] = Field(
        default_factory=list, description="hourly token usage over the last 24 hours"
    )
    last_error: Annotated[str, Field(max_length=MAX_LAST_ERROR_CHARS)] | None = Field(
        default=None, description="what the last failed call said (never the key)"
    )

    @classmethod
    def fresh(cls, now: datetime, model: str | None = None) -> LlmState:
        """The state of a client that never called: circuit closed, nothing spent."""
        return cls(circuit_breaker="closed", recent_error_rate=0.0, updated_at=now, model=model)
