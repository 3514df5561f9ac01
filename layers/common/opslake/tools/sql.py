"""The logic of ``POST /sql``: guard, run with a row cap, answer JSON-safe rows, name failures.

Engine failures become errors with a *stable* code the analyzer can group on, derived from the
engine's error name (Athena's ``COLUMN_NOT_FOUND: …``; the embedded engine speaks the same
names): the agent's mistakes are 400s carrying the engine's message so it can correct itself,
the engine's own failures are 502s, timeouts and throttling 503s with ``Retry-After``.

Values: timestamps and dates as ISO 8601 text (lake timestamps are UTC and carry no zone),
decimals as strings (exact), non-finite doubles as ``"NaN"``/``"Infinity"``/``"-Infinity"``,
binary as hex, arrays as lists, maps and rows as objects.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from opslake.errors import OpslakeError, SqlEngineError, SqlError, SqlUnavailableError
from opslake.query.base import (
    QueryEngine,
    QueryError,
    QueryFailedError,
    QueryTimeoutError,
    UnsupportedSqlError,
)
from opslake.query.guard import guard

#: Lambda refuses a response over 6 MB (API Gateway then answers 502); the answer's JSON, as it
#: travels inside Lambda's response, must stay below this with room for the envelope and headers.
MAX_ANSWER_BYTES = 5 * 1024 * 1024


class SqlAnswerTooLargeError(SqlError):
    """The query ran but its answer is too large to send: a 400 like the agent's other SQL mistakes
    (not 413, which says the *request* was too large), telling it how to ask for less."""

    code = "sql_answer_too_large"


# The engine's error name → the stable error_type of an agent's mistake (answered 400).
AGENT_ERRORS: dict[str, str] = {
    "COLUMN_NOT_FOUND": "sql_column_not_found",
    "MISSING_COLUMN_NAME": "sql_column_not_found",
    "TABLE_NOT_FOUND": "sql_table_not_found",
    "MISSING_TABLE": "sql_table_not_found",
    "SCHEMA_NOT_FOUND": "sql_table_not_found",
    "SYNTAX_ERROR": "sql_syntax_error",
    "FUNCTION_NOT_FOUND": "sql_function_not_found",
    "TYPE_MISMATCH": "sql_type_mismatch",
    "INVALID_CAST_ARGUMENT": "sql_type_mismatch",
    "INVALID_FUNCTION_ARGUMENT": "sql_invalid_argument",
    "DIVISION_BY_ZERO": "sql_invalid_argument",
    "NUMERIC_VALUE_OUT_OF_RANGE": "sql_invalid_argument",
    "EXPRESSION_NOT_AGGREGATE": "sql_invalid_query",
    "MUST_BE_AGGREGATE_OR_GROUP_BY": "sql_invalid_query",
    "AMBIGUOUS_NAME": "sql_invalid_query",
    "DUPLICATE_COLUMN_NAME": "sql_invalid_query",
    "NOT_SUPPORTED": "sql_not_supported",
    "EXCEEDED_TIME_LIMIT": "sql_too_expensive",
    "EXCEEDED_LOCAL_MEMORY_LIMIT": "sql_too_expensive",
    "EXCEEDED_GLOBAL_MEMORY_LIMIT": "sql_too_expensive",
    "EXCEEDED_MEMORY_LIMIT": "sql_too_expensive",
}
# Names of failures that are the engine's (storage, internals): answered 502.
ENGINE_ERROR_PREFIXES = ("HIVE_", "ICEBERG_", "GENERIC_INTERNAL_ERROR", "INTERNAL_ERROR", "PERMISSION_DENIED")
_ERROR_NAME = re.compile(r"\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")


def classify(message: str) -> tuple[str | None, str]:
    """(the engine's error name or None, the stable error_type) of an engine failure message."""
    name = next(
        (m for m in _ERROR_NAME.findall(message) if m in AGENT_ERRORS or m.startswith(ENGINE_ERROR_PREFIXES)),
        None,
    )
    if name == "SYNTAX_ERROR":  # Athena engine v2 reports unknown columns and tables as syntax errors
        if re.search(r"Column '[^']*' cannot be resolved", message):
            return name, "sql_column_not_found"
        if re.search(r"Table '[^']*' does not exist", message):
            return name, "sql_table_not_found"
    if name is None:
        if "Bytes scanned limit was exceeded" in message:
            return None, "sql_scan_limit_exceeded"
        if "mismatched input" in message or "extraneous input" in message:
            return None, "sql_syntax_error"
        return None, "sql_failed"
    if name.startswith(ENGINE_ERROR_PREFIXES):
        return name, "sql_engine_failed"
    return name, AGENT_ERRORS[name]


def engine_error(exc: QueryError, *, retry_after_s: int) -> OpslakeError:
    """The HTTP error for a failed agent query (see the module docstring)."""
    detail: dict[str, Any] = {"query_id": exc.query_id} if exc.query_id else {}
    if isinstance(exc, QueryTimeoutError):
        return SqlUnavailableError(
            f"{exc.message}; add a filter on dt/hour or aggregate less, then retry",
            retry_after_s=retry_after_s,
            code="sql_timeout",
            detail=detail or None,
        )
    if isinstance(exc, UnsupportedSqlError):
        return SqlError(exc.message, code="sql_not_supported", detail=detail or None)
    if not isinstance(exc, QueryFailedError):  # throttled or unreachable
        return SqlUnavailableError(
            f"the query engine is unavailable: {exc.message}",
            retry_after_s=retry_after_s,
            code="sql_throttled" if "throttl" in exc.message.lower() else "sql_unavailable",
            detail=detail or None,
        )
    name, code = classify(exc.message)
    if name:
        detail["engine_error"] = name
    if code == "sql_engine_failed":
        return SqlEngineError(
            "the query engine failed while running the query (not a problem with the SQL); "
            "retry later or report it",
            detail=detail or None,
        )
    if code == "sql_scan_limit_exceeded":
        return SqlError(
            f"{exc.message}; the workgroup limits bytes scanned per query: filter on the partition "
            "columns dt and hour",
            code=code,
            detail=detail or None,
        )
    return SqlError(exc.message, code=code, detail=detail or None)


def json_value(value: Any) -> Any:
    """A query value as JSON can carry it (see the module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(json_value(k)): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [json_value(v) for v in value]
    return str(value)


def run_sql(
    engine: QueryEngine,
    sql: str,
    *,
    limit: int,
    allowed_tables: Iterable[str],
    database: str,
    timeout_s: float,
    retry_after_s: int,
) -> dict[str, Any]:
    """Guard ``sql``, run it asking for at most ``limit + 1`` rows, and build the answer."""
    query = guard(sql, allowed_tables=allowed_tables, database=database, limit=limit)
    try:
        result = engine.run(query.sql, timeout_s=timeout_s)
    except QueryError as exc:
        raise engine_error(exc, retry_after_s=retry_after_s) from exc
    rows = result.rows[:limit]
    answer = {
        "columns": [{"name": c.name, "type": c.type} for c in result.columns],
        "rows": [[json_value(v) for v in row] for row in rows],
        "row_count": len(rows),
        "truncated": len(result.rows) > limit,
        "engine": result.engine,
        "query_id": result.query_id,
        "bytes_scanned": result.bytes_scanned,
        "tables": list(query.tables),
    }
    size = answer_bytes(answer)
    if size > MAX_ANSWER_BYTES:
        raise SqlAnswerTooLargeError(
            f"the answer of {len(rows)} rows is {size:,} bytes, more than the {MAX_ANSWER_BYTES:,} bytes "
            "an answer may have; aggregate (GROUP BY, count, approx_percentile), select fewer columns, "
            "or page with a smaller limit and a WHERE or ORDER BY that moves on",
            detail={"answer_bytes": size, "max_answer_bytes": MAX_ANSWER_BYTES, "rows": len(rows)},
        )
    return answer


def answer_bytes(answer: dict[str, Any]) -> int:
    """The size of ``answer`` inside Lambda's response: serialized as the handler does, then once more
    as the ``body`` string of the response (every quote and backslash gains a backslash)."""
    text = json.dumps(answer, separators=(",", ":"), default=str)
    return len(text) + text.count('"') + text.count("\\")
