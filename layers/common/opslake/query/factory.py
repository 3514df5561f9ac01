"""Choose the query engine from settings: Athena on AWS, embedded (DuckDB) on the local stack.

The embedded engine is imported only when configured: it needs the ``local`` extra (duckdb and
pyarrow), which the request path's Lambda layer does not ship.
"""

from __future__ import annotations

from typing import Any

from opslake.config import Settings
from opslake.errors import ConfigurationError
from opslake.query.athena import AthenaEngine
from opslake.query.base import QueryEngine


def create_engine(settings: Settings, *, athena_client: Any = None, glue_client: Any = None) -> QueryEngine:
    """The engine ``settings.query_engine`` names; AWS clients are built only when none is given."""
    if settings.query_engine == "athena":
        settings.require("athena_workgroup")
        if athena_client is None:
            from opslake import runtime

            athena_client = runtime.new_client("athena")
        return AthenaEngine(
            athena_client, workgroup=settings.athena_workgroup, database=settings.glue_database
        )
    if settings.query_engine == "embedded":
        from opslake.query.embedded import EmbeddedEngine

        engine: QueryEngine = EmbeddedEngine.from_settings(settings, glue_client=glue_client)
        return engine
    raise ConfigurationError(
        f"unknown query engine {settings.query_engine!r}: set OPSLAKE_QUERY_ENGINE to athena or embedded"
    )
