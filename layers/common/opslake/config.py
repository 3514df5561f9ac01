"""Settings from the environment, read once per container and validated.

Nothing else in opslake reads ``os.environ``: handlers call :func:`get_settings` at import
(cold start) so a misconfigured function fails at once with a message that names the variable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from opslake.errors import ConfigurationError
from opslake.models.playbooks import HOLDOUT_GRADUATED, HOLDOUT_NEW, HOLDOUT_SALT

ENV_PREFIX = "OPSLAKE_"

#: How far an API key (reporter) is trusted as a witness of evidence (see opslake.analysis.reporters):
#: ``untrusted`` (its ops never count), ``reporter`` (one independent reporter, however many agent_ids
#: it claims) or ``runtime`` (it hosts many agents: each claimed agent_id counts, up to a cap).
TrustLevel = Literal["untrusted", "reporter", "runtime"]


class Settings(BaseModel):
    """Everything a function may need; each handler uses only what it needs."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    lake_bucket: str = Field(default="", description="S3 bucket holding ops/, rejects/ and derived tables")
    ops_queue_url: str = Field(default="", description="SQS queue the ingest path sends op records to")
    glue_database: str = Field(default="opslake", description="Glue database of the lake tables")
    ops_table: str = Field(default="ops", description="Glue table of op records")
    ops_prefix: str = Field(default="ops/", description="key prefix of the ops table in the lake bucket")
    rejects_prefix: str = Field(
        default="rejects/", description="key prefix for records that can never be written"
    )
    queue_retry_after_s: int = Field(default=5, ge=1, le=3600, description="Retry-After sent with a 503")
    ops_message_max_bytes: int = Field(
        default=256 * 1024,
        ge=64 * 1024,  # one record may be 64 KiB (MAX_RECORD_BYTES)
        le=1024 * 1024,
        description="op records are packed into SQS messages up to this size: the ops queue's MaximumMessageSize",
    )
    otlp_keep_all_spans: bool = Field(
        default=False,
        description="POST /v1/traces stores every span as an op, not only AI-agent work and failures",
    )
    resolve_key_names: bool = Field(
        default=True, description="look up API key names in API Gateway (else the key id is the identity)"
    )
    stage: str = Field(default="dev")
    query_engine: Literal["athena", "embedded"] = Field(
        default="athena", description="athena on AWS; embedded (DuckDB over the lake, local stack only)"
    )
    athena_workgroup: str = Field(
        default="", description="Athena workgroup (enforces result location, cutoff)"
    )
    datasets: str = Field(
        default="workers,placements",
        pattern=r"^[a-z][a-z0-9_]*(,[a-z][a-z0-9_]*)*$",
        description="comma-separated Glue tables of the sample datasets the gateway tools expose",
    )
    query_timeout_s: float = Field(default=60.0, gt=0, le=900, description="longest a query may run")
    embedded_memory_limit_mb: int = Field(
        default=1024, ge=64, le=64 * 1024, description="DuckDB memory_limit of one embedded-engine query"
    )
    embedded_threads: int = Field(
        default=2, ge=1, le=64, description="DuckDB threads of one embedded-engine query"
    )
    # -- scheduled jobs (analyzer every 5 min, consolidator every 30 min) --------------------------
    analyzer_settle_s: float = Field(
        default=120.0, ge=0, le=3600, description="the window ends this long before now (ops still queued)"
    )
    analyzer_initial_lookback_h: float = Field(
        default=24.0, gt=0, le=24 * 31, description="how far back the very first run reads"
    )
    analyzer_max_window_h: float = Field(
        default=24.0, gt=0, le=24 * 31, description="longest window one run reads (catching up takes runs)"
    )
    diagnosis_budget: int = Field(
        default=20, ge=0, le=1000, description="signatures diagnosed per run at most"
    )
    analyzer_lease_s: float = Field(default=600.0, gt=0, description="analyzer lease (2x its Lambda timeout)")
    analyzer_state_key: str = Field(default="state/analyzer.json")
    consolidator_lease_s: float = Field(
        default=1800.0, gt=0, description="consolidator lease (2x its timeout)"
    )
    consolidator_state_key: str = Field(default="state/consolidator.json")
    consolidator_max_window_h: float = Field(
        default=2.0, gt=0, le=24 * 31, description="longest window of evidence one consolidator run reads"
    )
    efficacy_lookback_h: float = Field(
        default=24.0, gt=0, le=24 * 31, description="an entry's holdout experiment's lookback"
    )
    playbooks_key: str = Field(
        default="playbooks/current.json",
        description="lake object holding the consolidator's current playbook snapshot (GET /playbooks)",
    )
    snapshot_cache_s: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="how long a container reuses a snapshot before re-checking S3",
    )
    llm_provider: str = Field(default="openai-compatible", description="kind of LLM API the analyzer calls")
    llm_base_url: str = Field(
        default="", description="base URL of the LLM API (e.g. https://host/v1); empty = not configured"
    )
    llm_model: str = Field(default="", description="model name the analyzer asks for")
    llm_api_key_parameter: str = Field(
        default="", description="SSM parameter or Secrets Manager secret holding the LLM API key"
    )
    llm_timeout_s: float = Field(default=30.0, gt=0, le=900, description="read timeout of one LLM request")
    llm_connect_timeout_s: float = Field(default=5.0, gt=0, le=60, description="connect timeout to the LLM")
    llm_max_retries: int = Field(default=3, ge=0, le=10, description="retries of a transient LLM failure")
    llm_retry_after_cap_s: float = Field(
        default=30.0, ge=0, le=900, description="longest wait between LLM retries (caps Retry-After)"
    )
    llm_breaker_failures: int = Field(
        default=3, ge=1, le=100, description="consecutive failed LLM calls that open the circuit breaker"
    )
    llm_breaker_cooldown_s: float = Field(
        default=900.0, ge=0, le=86_400, description="how long an open circuit waits before one trial call"
    )
    llm_max_output_tokens: int = Field(default=600, ge=1, le=100_000, description="max_tokens of an answer")
    llm_state_key: str = Field(
        default="state/llm.json", min_length=1, description="lake object holding the LLM client's state"
    )

    playbook_min_successes: int = Field(
        default=3, ge=1, le=10_000, description="ops a group needs before it may become a playbook entry"
    )
    playbook_min_agents: int = Field(
        default=2,
        ge=1,
        le=1_000,
        description="distinct claimed agent_ids a candidate's evidence must come from (claims, not identity)",
    )
    playbook_min_reporters: int = Field(
        default=2,
        ge=1,
        le=200,  # entries keep at most 200 reporters (MAX_TRACKED_AGENTS)
        description="independent reporters an entry's evidence needs to be published without approval",
    )
    playbook_free_text_min_reporters: int = Field(
        default=0,
        ge=0,
        le=200,
        description="independent reporters that publish an entry whose text an agent wrote (a /log "
        "operation and approach, or a model's rewording) without approval; 0: never, an operator approves",
    )
    reporter_trust: dict[str, TrustLevel] = Field(
        default_factory=dict,
        description='trust level per API key name, as JSON: {"key-name": "untrusted|reporter|runtime"}',
    )
    reporter_trust_default: TrustLevel = Field(
        default="reporter", description="trust level of a key reporter_trust does not name"
    )
    playbook_retire_below: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="ignored since holdout experiments decide retirement (kept so older settings validate)",
    )
    playbook_holdout_new: float = Field(
        default=HOLDOUT_NEW,
        gt=0,
        lt=1,
        description="share of readers a new playbook entry is withheld from (holdout)",
    )
    playbook_holdout_graduated: float = Field(
        default=HOLDOUT_GRADUATED,
        gt=0,
        lt=1,
        description="share of readers a graduated entry is still withheld from",
    )
    playbook_holdout_salt: str = Field(
        default=HOLDOUT_SALT,
        min_length=1,
        max_length=64,
        description="salt of the reader/entry arm hash (changing it reshuffles every arm)",
    )
    playbook_experiment_z: float = Field(
        default=1.96, gt=0, le=5, description="z of the experiments' intervals (1.96: 95 %)"
    )
    playbook_min_effect: float = Field(
        default=0.02,
        gt=0,
        lt=1,
        description="absolute failure-rate difference below which an entry does not matter (retired as no_effect)",
    )
    playbook_min_units: int = Field(
        default=2, ge=1, le=1000, description="API keys each arm needs before an experiment is judged"
    )
    playbook_graduate_after: int = Field(
        default=2, ge=1, le=100, description="helpful verdicts in a row before an entry graduates"
    )
    playbook_approval_mode: bool = Field(
        default=False, description="hold new playbook entries as proposed until approved"
    )
    playbook_min_ops_to_judge: int = Field(
        default=20,
        ge=1,
        le=1_000_000,
        description="target ops per arm (and new ones since) before a judgement",
    )
    # -- compaction of closed hours (consolidator; see opslake.lake.compaction) ------------------
    compact_after_hours: float = Field(
        default=3.0,
        ge=1.5,  # > the writer's redelivery window: maxReceiveCount 5 x visibility 900 s = 75 min
        le=24 * 31,
        description="an hour is compacted this many hours after it ends",
    )
    compaction_grace_s: float = Field(
        default=3600.0, ge=0, le=7 * 86_400, description="old files outlive the swap by this long"
    )
    compaction_target_bytes: int = Field(
        default=128 * 1024 * 1024, ge=1024 * 1024, le=1024**3, description="size of a compacted file"
    )
    compaction_max_partitions: int = Field(
        default=24, ge=1, le=1000, description="partitions compacted or cleaned per run at most"
    )

    @field_validator("reporter_trust", mode="before")
    @classmethod
    def _trust_from_json(cls, value: Any) -> Any:
        """The environment holds the mapping as JSON text."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(
                    'must be a JSON object such as {"runtime-a": "runtime", "scraper": "untrusted"}'
                ) from exc
        return value

    @property
    def dataset_tables(self) -> list[str]:
        return self.datasets.split(",")

    @property
    def allowed_tables(self) -> list[str]:
        """What agents may read with SQL and describe: the datasets and opslake's own tables."""
        return [*self.dataset_tables, self.ops_table]

    def require(self, *names: str) -> None:
        """Fail loudly when a function starts without a setting it cannot work without."""
        missing = [n for n in names if not getattr(self, n)]
        if missing:
            env = ", ".join(ENV_PREFIX + n.upper() for n in missing)
            raise ConfigurationError(f"missing required environment variable(s): {env}")


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings from ``OPSLAKE_*`` variables (``environ`` defaults to the process environment)."""
    env = os.environ if environ is None else environ
    values = {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in env.items()
        if key.startswith(ENV_PREFIX) and value != ""
    }
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{ENV_PREFIX}{str(err['loc'][0]).upper()}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigurationError(f"invalid configuration: {problems}") from exc


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, loaded on first use (cold start)."""
    return load_settings()
