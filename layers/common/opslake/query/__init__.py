"""Query the lake: the QueryEngine interface, the Athena engine, the embedded (DuckDB) engine.

Only :mod:`opslake.query.base` and the Athena engine are meant for Lambda; the embedded engine
needs the ``local`` extra (duckdb, sqlglot, pyarrow) and is imported only when configured.
"""

from opslake.query.athena import AthenaEngine
from opslake.query.base import (
    Column,
    QueryEngine,
    QueryError,
    QueryFailedError,
    QueryResult,
    QueryTimeoutError,
    UnsupportedSqlError,
)
from opslake.query.factory import create_engine

__all__ = [
    "AthenaEngine",
    "Column",
    "QueryEngine",
    "QueryError",
    "QueryFailedError",
    "QueryResult",
    "QueryTimeoutError",
    "UnsupportedSqlError",
    "create_engine",
]
