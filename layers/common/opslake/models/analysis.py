"""Contracts of the analyzer: failures, signatures and diagnoses (tables ``failures``,
``signatures`` and ``diagnoses``), and the JSON a model must answer when it diagnoses.

Every model output is validated against :class:`DiagnosisAnswer` before anything is stored; the
heuristic diagnoser produces the same shape, so downstream code never knows the difference
except through ``diagnosed_by``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from opslake.models.ops import MAX_WITNESS_CHARS, Id, OpRow, UtcMs

MAX_CAUSE_CHARS = 500
MAX_ADJUSTMENT_CHARS = 300
MAX_TEMPLATE_CHARS = 1_000
MAX_SAMPLE_OP_IDS = 5
MAX_TRACKED_AGENTS = 200  # distinct agents (and reporters) kept per signature; the count saturates beyond

Category = Literal[
    "unknown_column",
    "unknown_table",
    "not_found",
    "timeout",
    "rate_limit",
    "auth",
    "validation",
    "resource_exhausted",
    "other",
]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]
Confidence = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class FailureSample(OpRow):
    """A failed op as the analyzer reads it from ``ops`` (the columns it needs, nothing else)."""

    ingested_at: UtcMs
    reporter_id: str | None = None  # the API key (server-set); None in samples kept before it was read
    error: str | None = None
    error_type: str | None = None
    input_summary: str | None = None
    task_class: str | None = None


class FailureRow(BaseModel):
    """One row of ``failures``: every failed op gets exactly one signature. An op is known by
    (``reporter_id``, ``op_id``): op ids are unique per API key only."""

    model_config = ConfigDict(frozen=True)

    op_id: Id
    reporter_id: str | None = None  # the API key (server-set); None only in rows written before it was kept
    signature_id: Id
    endpoint: Id
    agent_id: Id
    error_type: str | None = None
    ts: UtcMs
    ingested_at: UtcMs


def _json_list(value: Any) -> Any:
    """An engine's array as a list: Athena returns arrays as text, so the SQL sends them as JSON."""
    if value is None:
        return []
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value


JsonList = Annotated[list[str], BeforeValidator(_json_list)]


class SignatureAggregate(BaseModel):
    """One failure template's failures in a window, as the engine aggregates them (one row per
    template, whatever the number of ops): the analyzer merges it into the signature's statistics.
    Every list is bounded and sorted in the SQL, so both engines answer the same rows."""

    model_config = ConfigDict(frozen=True)

    signature_id: Id
    template: Annotated[str, Field(max_length=MAX_TEMPLATE_CHARS)]
    endpoint: Id = Field(description="the normalized endpoint")
    error_type: str | None = None
    part: int = Field(
        default=0, description="0: failures to count; 1: read in the window, not counted; 2: read after it"
    )
    count: Annotated[int, Field(ge=1)]
    first_seen: UtcMs
    last_seen: UtcMs
    agents: JsonList = Field(default_factory=list, description="the first distinct agent_ids, sorted")
    witnesses: JsonList = Field(
        default_factory=list, description="reporters' witnesses, a few per key, sorted"
    )
    variants: JsonList = Field(default_factory=list, description="the first distinct input variants, sorted")
    sample_op_ids: JsonList = Field(default_factory=list, description="the earliest op ids")


class DiagnosisAnswer(BaseModel):
    """What a diagnoser (model or heuristic) must answer; also the JSON schema sent to the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cause: Annotated[str, Field(min_length=1, max_length=MAX_CAUSE_CHARS, description="why the ops fail")]
    agent_adjustment: Annotated[
        str,
        Field(min_length=1, max_length=MAX_ADJUSTMENT_CHARS, description="what an agent should do instead"),
    ]
    avoid: bool = Field(description="whether agents should avoid this pattern altogether")
    category: Category
    confidence: Confidence


class Signature(BaseModel):
    """A failure signature and what the analyzer knows about it (kept in the analyzer's state
    object and exported whole as the ``signatures`` table after each run)."""

    model_config = ConfigDict(extra="ignore")

    signature_id: Id
    endpoint: Id
    error_type: str | None = None
    template: Annotated[str, Field(max_length=MAX_TEMPLATE_CHARS)]
    count: Annotated[int, Field(ge=0)] = 0
    agents: list[str] = Field(default_factory=list, description=f"up to {MAX_TRACKED_AGENTS} distinct agents")
    agent_count: Annotated[int, Field(ge=0)] = 0
    reporters: list[Annotated[str, Field(max_length=MAX_WITNESS_CHARS)]] = Field(
        default_factory=list,
        description=f"up to {MAX_TRACKED_AGENTS} independent reporters (see opslake.analysis.reporters)",
    )
    reporter_count: Annotated[int, Field(ge=0)] = Field(
        default=0, description="independent reporters behind the failures (API keys, not claimed agents)"
    )
    variants: list[str] = Field(default_factory=list, description="distinct input templates seen (capped)")
    first_seen: UtcMs
    last_seen: UtcMs
    sample_op_ids: list[Id] = Field(default_factory=list)
    # diagnosis bookkeeping: what the signature looked like when it was last diagnosed
    diagnosed_count: Annotated[int, Field(ge=0)] = 0
    diagnosed_variants: Annotated[int, Field(ge=0)] = 0
    diagnoses: Annotated[int, Field(ge=0)] = 0
    last_diagnosed_at: UtcMs | None = None
    last_diagnosis_id: str | None = None
    diagnosed_template: Annotated[str, Field(max_length=MAX_TEMPLATE_CHARS)] | None = Field(
        default=None,
        description="the template when last diagnosed: merging word variants changes it (re-diagnosed)",
    )


class Diagnosis(BaseModel):
    """One row of ``diagnoses``."""

    model_config = ConfigDict(frozen=True)

    diagnosis_id: Id
    signature_id: Id
    endpoint: Id
    template: str
    cause: str
    agent_adjustment: str
    avoid: bool
    category: Category
    confidence: Confidence
    diagnosed_by: Id = Field(description="the model's name, or 'heuristic'")
    failure_count: Annotated[int, Field(ge=0)]
    agent_count: Annotated[int, Field(ge=0)] = Field(description="distinct claimed agent_ids")
    reporter_count: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="independent reporters (API keys by trust level); None for a diagnosis made before it was counted",
    )
    reporters: list[Annotated[str, Field(max_length=MAX_WITNESS_CHARS)]] | None = Field(
        default=None, description="the signature's independent reporters when it was diagnosed"
    )
    evidence_op_ids: list[Id]
    created_at: UtcMs
