"""The analyzer's LLM state object (``s3://<lake>/state/llm.json``), read by ``GET /model``.

The analyzer rewrites it after each run: its circuit breaker, how often calls failed recently and
how many tokens went in and out over the last 24 hours. It never holds the API key.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from opslake.models.ops import UtcMs

CircuitState = Literal["closed", "open", "half_open"]


class LlmState(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    circuit_breaker: CircuitState
    recent_error_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    tokens_in_24h: Annotated[int, Field(ge=0)] = 0
    tokens_out_24h: Annotated[int, Field(ge=0)] = 0
    updated_at: UtcMs
    model: str | None = Field(default=None, description="the model the analyzer last called")
