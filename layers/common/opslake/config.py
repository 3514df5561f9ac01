"""Settings from the environment, read once per container and validated.

Nothing else in opslake reads ``os.environ``: handlers call :func:`get_settings` at import
(cold start) so a misconfigured function fails at once with a message that names the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from opslake.errors import ConfigurationError

ENV_PREFIX = "OPSLAKE_"


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
    playbooks_key: str = Field(
        default="playbooks/current.json",
        description="lake object holding the consolidator's current playbook snapshot (GET /playbooks)",
    )
    llm_provider: str = Field(default="openai-compatible", description="kind of LLM API the analyzer calls")
    llm_base_url: str = Field(
        default="", description="base URL of the LLM API (e.g. https://host/v1); empty = not configured"
    )
    llm_model: str = Field(default="", description="model name the analyzer asks for")
    llm_api_key_parameter: str = Field(
        default="", description="SSM parameter or Secrets Manager secret holding the LLM API key"
    )

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
