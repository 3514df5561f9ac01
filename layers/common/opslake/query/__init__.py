"""Query the lake: the QueryEngine interface (``base``), the Athena engine (``athena``), the
embedded DuckDB engine of the local stack (``embedded``, with ``dialect`` turning Athena SQL into
DuckDB's, ``partitions`` choosing the files a query reads from Glue's partitions and ``viewsql``
expanding Glue views), the engine chosen from settings (``factory``), the read-only SQL guard (``guard``), SQL
text opslake writes itself (``sqltext``: literals, window predicates) and a query run on behalf of
an API request with its 502/503 mapping (``api``).

Names resolve lazily: the embedded engine needs the ``local`` extra (duckdb, pyarrow), the guard
and the dialect need sqlglot, and none of them belongs on a request path's cold start.
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "base": (
            "Column",
            "QueryEngine",
            "QueryError",
            "QueryFailedError",
            "QueryResult",
            "QueryTimeoutError",
            "UnsupportedSqlError",
        ),
        "athena": ("AthenaEngine",),
        "factory": ("create_engine",),
        "guard": ("guard",),
        "sqltext": (
            "partitions_predicate",
            "sql_string",
            "sql_string_list",
            "timestamp_literal",
            "window_predicate",
        ),
        "api": ("ApiQueryConfig", "run_query"),
    },
)
