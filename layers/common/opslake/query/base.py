"""The QueryEngine interface: one SQL dialect (Athena's), several engines.

Results carry typed Python rows, so the request path (Athena from a gateway Lambda) needs no
pyarrow; :meth:`QueryResult.to_arrow` converts when the caller has pyarrow (analysis, CLI, tests).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """A result column: its name and its Athena (Trino) type name, e.g. ``varchar``, ``bigint``."""

    name: str
    type: str


@dataclass(frozen=True)
class QueryResult:
    columns: list[Column]
    rows: list[tuple[Any, ...]]
    engine: str
    query_id: str
    bytes_scanned: int | None = None
    files_read: list[str] | None = field(default=None)

    def records(self) -> list[dict[str, Any]]:
        names = [c.name for c in self.columns]
        return [dict(zip(names, row, strict=True)) for row in self.rows]

    def to_arrow(self) -> pa.Table:
        import pyarrow as pa

        return pa.table({c.name: [row[i] for row in self.rows] for i, c in enumerate(self.columns)})


class QueryError(Exception):
    """Base class of every query failure; ``message`` is safe to show to the SQL's author."""

    def __init__(self, message: str, *, query_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.query_id = query_id


class QueryFailedError(QueryError):
    """The engine refused or failed the query (unknown column, syntax, ...): Athena's reason."""

    def __init__(self, message: str, *, state: str = "FAILED", query_id: str | None = None) -> None:
        super().__init__(message, query_id=query_id)
        self.state = state


class QueryTimeoutError(QueryError):
    """The query did not finish in time (it was cancelled where the engine allows)."""


class UnsupportedSqlError(QueryError):
    """The SQL uses a construct the engine would answer differently from Athena: refused, named."""


class QueryEngine(ABC):
    """Runs Athena SQL over the lake's Glue tables."""

    name: str

    @abstractmethod
    def run(self, sql: str, *, timeout_s: float = 60.0) -> QueryResult:
        """Run one statement to completion and return all its rows."""
