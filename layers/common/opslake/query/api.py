"""Queries run on behalf of an API request (``/stats``, ``/profile``, ``/worker``, ``/match``).

:class:`ApiQueryConfig` says where the ops table is and how long a request may wait (below API
Gateway's 29 s); :func:`run_query` runs one query and maps engine failures to the answers a
client can act on: 502 when the engine failed, 503 with ``Retry-After`` when it did not answer in
time or throttled.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from opslake.config import Settings
from opslake.errors import ConfigurationError, QueryEngineFailedError, QueryUnavailableError
from opslake.observability import logger
from opslake.query.base import QueryEngine, QueryError, QueryFailedError, QueryResult, UnsupportedSqlError

#: API Gateway gives up after 29 s; a request's query is cancelled before that.
API_QUERY_TIMEOUT_S = 25.0
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


@dataclass(frozen=True)
class ApiQueryConfig:
    """What the insight queries need from the settings: where the ops table is, how long to wait."""

    database: str
    table: str = "ops"
    timeout_s: float = API_QUERY_TIMEOUT_S
    retry_after_s: int = 5

    def __post_init__(self) -> None:
        for what, name in (("OPSLAKE_GLUE_DATABASE", self.database), ("OPSLAKE_OPS_TABLE", self.table)):
            if not _IDENTIFIER.match(name):
                raise ConfigurationError(
                    f"{what} must be a plain identifier (letters, digits, _), got {name!r}"
                )

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiQueryConfig:
        return cls(
            database=settings.glue_database,
            table=settings.ops_table,
            timeout_s=min(settings.query_timeout_s, API_QUERY_TIMEOUT_S),
            retry_after_s=settings.queue_retry_after_s,
        )

    @property
    def table_ref(self) -> str:
        return f'"{self.database}"."{self.table}"'


def run_query(engine: QueryEngine, sql: str, *, what: str, config: ApiQueryConfig) -> QueryResult:
    """Run ``sql``; engine failures become 502, timeouts and throttling 503 with Retry-After."""
    started = time.monotonic()
    try:
        result = engine.run(sql, timeout_s=config.timeout_s)
    except (QueryFailedError, UnsupportedSqlError) as exc:
        logger.error(
            "insight query failed", what=what, engine=engine.name, query_id=exc.query_id, reason=exc.message
        )
        raise QueryEngineFailedError(
            f"the query engine failed while computing {what}; this is a service problem, not your request",
            detail={"query_id": exc.query_id} if exc.query_id else None,
        ) from exc
    except QueryError as exc:  # timed out, throttled or unreachable: worth retrying
        logger.warning("insight query unavailable", what=what, engine=engine.name, reason=exc.message)
        raise QueryUnavailableError(
            f"the query engine did not answer {what} in time; retry in {config.retry_after_s} s "
            "or ask for fewer hours",
            retry_after_s=config.retry_after_s,
            detail={"query_id": exc.query_id} if exc.query_id else None,
        ) from exc
    logger.info(
        "insight query done",
        what=what,
        engine=result.engine,
        query_id=result.query_id,
        rows=len(result.rows),
        bytes_scanned=result.bytes_scanned,
        elapsed_ms=round((time.monotonic() - started) * 1000),
    )
    return result
