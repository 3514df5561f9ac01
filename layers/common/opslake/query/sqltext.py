"""SQL text opslake writes itself: literals (built by sqlglot, the dialect layer we already
trust) and the partition-pruning predicates of a :class:`~opslake.models.window.Window`.

Athena and DuckDB both read these, and both push ``dt``/``hour`` terms down to the partitions.
sqlglot is imported on first use, so request handlers that never build SQL do not pay for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from opslake.models.window import Window


@cache
def _literal() -> Any:
    from sqlglot import exp

    return exp.Literal


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal (quotes doubled: Athena and DuckDB have no backslash escapes)."""
    return str(_literal().string(value).sql(dialect="athena"))


def sql_string_list(values: Iterable[str]) -> str:
    """``'a', 'b'`` for an ``IN (...)`` (sorted, unique); ``''`` when empty, which matches nothing."""
    return ", ".join(sql_string(v) for v in sorted(set(values))) or "''"


def timestamp_literal(value: datetime) -> str:
    """``TIMESTAMP '2026-11-21 10:00:00.000'``: UTC, millisecond precision (Athena's ``timestamp``)."""
    value = value.astimezone(UTC)
    return f"TIMESTAMP {sql_string(f'{value:%Y-%m-%d %H:%M:%S}.{value.microsecond // 1000:03d}')}"


def partitions_predicate(partitions: Sequence[tuple[str, str]]) -> str:
    """WHERE terms that prune to exactly these ``(dt, hour)`` partitions (a whole day as ``dt``).

    The ``dt`` range comes first as plain conjuncts: engines that prune only on top-level ANDs
    (the embedded engine's Glue look-up) still read just those days; the disjunction then names
    the exact hours (Athena prunes on it whole)."""
    if not partitions:
        return "FALSE"
    by_day: dict[str, list[str]] = {}
    for dt, hour in partitions:
        by_day.setdefault(dt, []).append(hour)
    terms = [
        f"dt = {sql_string(dt)}"
        if len(set(hours)) == 24
        else f"(dt = {sql_string(dt)} AND hour IN ({sql_string_list(hours)}))"
        for dt, hours in sorted(by_day.items())
    ]
    first, last = min(by_day), max(by_day)
    return f"dt >= {sql_string(first)} AND dt <= {sql_string(last)} AND (" + " OR ".join(terms) + ")"


def window_predicate(window: Window, *, from_start_of_hour: bool = False) -> str:
    """WHERE terms for ops ingested in the window, pruned to its partitions. With
    ``from_start_of_hour`` the window's first hour is read whole (a job that rewrites a whole
    partition of a derived table needs every row of the partition up to the window's end)."""
    start = window.start.replace(minute=0, second=0, microsecond=0) if from_start_of_hour else window.start
    return (
        f"{partitions_predicate(window.partitions())} "
        f"AND ingested_at >= {timestamp_literal(start)} AND ingested_at < {timestamp_literal(window.end)}"
    )
