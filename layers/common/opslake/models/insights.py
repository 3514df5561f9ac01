"""Answers of ``GET /stats`` and ``GET /profile/{agent_id}``: what the lake says about recent ops."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from opslake.models.window import Window

#: The longest window either endpoint accepts (7 days): bounds the partitions a query may read.
MAX_WINDOW_HOURS = 168
DEFAULT_STATS_HOURS = 24
DEFAULT_PROFILE_HOURS = 168
#: Rows of the by-endpoint breakdown served at most (busiest first); the rest are counted.
MAX_ENDPOINTS = 100
TOP_ERRORS = 5
RECENT_OPS = 10
#: API keys listed per profile at most (most ops first); ``reporter_count`` counts them all.
PROFILE_REPORTERS = 10


#: Kinds of op the answers count apart: an agent's calls (tools, routes: what success rates are
#: about), its model calls, its agent runs (each holds calls and model calls: counting its success
#: beside theirs would count a failure twice), and the reports a runtime makes (lessons, rescues).
OP_KINDS = ("tool", "model", "agent", "report")
TOOL_KIND = "tool"


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Breakdown(_Answer):
    """Ops of one source, one endpoint or one kind in the window."""

    name: str
    ops: int = Field(ge=0)
    failures: int = Field(ge=0)
    failure_rate: float = Field(ge=0, le=1)
    p95_duration_ms: float | None = Field(description="approximate 95th percentile of duration_ms")


class StatsAnswer(_Answer):
    """``GET /stats``: every op of every agent in the window, in total and by source and endpoint."""

    window: Window
    ops: int = Field(ge=0, description="every op, of every kind")
    successes: int = Field(
        ge=0, description="tool calls that succeeded (model calls and agent runs: by_kind)"
    )
    failures: int = Field(ge=0, description="tool calls that failed")
    failure_rate: float = Field(ge=0, le=1, description="of the tool calls")
    p95_duration_ms: float | None = Field(description="of the tool calls")
    by_kind: list[Breakdown] = Field(
        default_factory=list, description=f"each kind of op apart: {', '.join(OP_KINDS)}"
    )
    by_source: list[Breakdown]
    by_endpoint: list[Breakdown]
    endpoints_omitted: int = Field(ge=0, description=f"endpoints beyond the busiest {MAX_ENDPOINTS}")
    engine: str
    generated_at: datetime
    cached: bool = Field(description="served from this container's short-lived cache")


class ErrorSummary(_Answer):
    """One kind of failure of an agent: how often, and its most recent error text."""

    error_type: str | None = Field(description="null for failures reported without an error_type")
    count: int = Field(ge=1)
    sample_error: str | None


class RecentOp(_Answer):
    op_id: str
    ts: datetime
    endpoint: str
    success: bool
    duration_ms: float
    error_type: str | None
    reporter_id: str | None = Field(
        default=None,
        description="the API key (its name) that posted the op: what opslake knows; agent_id is its claim",
    )


class ReporterShare(_Answer):
    """One API key that posted ops under the claimed agent_id, and how many."""

    reporter_id: str
    ops: int = Field(ge=1)


class ProfileAnswer(_Answer):
    """``GET /profile/{agent_id}``: the ops that claim this agent_id in the window. The agent_id is
    a claim any key can make: ``reporters`` says which API keys stand behind these ops."""

    agent_id: str
    window: Window
    ops: int = Field(ge=1, description="every op, of every kind")
    successes: int = Field(
        ge=0, description="tool calls that succeeded (model calls and agent runs: by_kind)"
    )
    failures: int = Field(ge=0, description="tool calls that failed")
    success_rate: float | None = Field(
        ge=0, le=1, description="of the tool calls (null when there were none)"
    )
    p95_duration_ms: float | None = Field(description="of the tool calls")
    by_kind: list[Breakdown] = Field(
        default_factory=list, description=f"each kind of op apart: {', '.join(OP_KINDS)}"
    )
    top_errors: list[ErrorSummary] = Field(max_length=TOP_ERRORS)
    recent_ops: list[RecentOp] = Field(max_length=RECENT_OPS, description="most recent first (by ts)")
    reporter_count: int = Field(
        default=0, ge=0, description="distinct API keys that posted ops under this agent_id in the window"
    )
    reporters: list[ReporterShare] = Field(
        default_factory=list,
        max_length=PROFILE_REPORTERS,
        description=f"those keys, most ops first (up to {PROFILE_REPORTERS})",
    )
    engine: str
    generated_at: datetime
