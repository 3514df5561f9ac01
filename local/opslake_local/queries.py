"""The analyst queries in ``queries/``: load them, run them, print their results.

Each ``queries/<name>.sql`` starts with a comment header (``-- name:`` and ``-- description:``;
a description may continue on further ``--`` lines) followed by one Athena SQL statement.
template.yaml deploys each file verbatim as an ``AWS::Athena::NamedQuery``
(tests/infrastructure/test_named_queries.py keeps the two identical);
:func:`named_query_yaml` renders the resource to paste after editing a file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from opslake.query.base import QueryResult
from opslake_local.console import text_table

QUERIES_DIR = "queries"
FORMATS = ("table", "json", "csv")
_HEADER = re.compile(r"^--\s*(name|description)\s*:\s*(.*?)\s*$")


class QueryFileError(Exception):
    """A query file without the ``-- name:`` / ``-- description:`` header (says which file)."""


@dataclass(frozen=True)
class AnalystQuery:
    """One file of ``queries/``: ``sql`` is the file's text verbatim (header included)."""

    name: str
    description: str
    sql: str
    path: Path

    @property
    def logical_id(self) -> str:
        """The template resource id: ``failure_rate_by_endpoint_hour`` → ``QueryFailureRateByEndpointHour``."""
        return "Query" + "".join(part.capitalize() for part in self.name.split("_"))


def parse_query(path: Path) -> AnalystQuery:
    """Read one query file and its header."""
    text = path.read_text(encoding="utf-8")
    fields: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            break
        match = _HEADER.match(stripped)
        if match:
            last = match.group(1)
            fields[last] = match.group(2)
        elif last == "description":  # a continuation line of the description
            fields[last] = f"{fields[last]} {stripped[2:].strip()}".strip()
    missing = [k for k in ("name", "description") if not fields.get(k)]
    if missing:
        raise QueryFileError(f"{path}: header lacks -- {' and -- '.join(f'{m}:' for m in missing)}")
    if fields["name"] != path.stem:
        raise QueryFileError(f"{path}: -- name: {fields['name']} differs from the file name {path.stem}")
    return AnalystQuery(name=fields["name"], description=fields["description"], sql=text, path=path)


def load_queries(directory: Path) -> dict[str, AnalystQuery]:
    """Every ``*.sql`` in ``directory`` by name, sorted by name."""
    if not directory.is_dir():
        raise QueryFileError(f"no query directory {directory}")
    return {q.name: q for q in (parse_query(p) for p in sorted(directory.glob("*.sql")))}


def queries_dir(template_path: Path) -> Path:
    """``queries/`` next to template.yaml (the repository root)."""
    return template_path.parent / QUERIES_DIR


def normalize_sql(sql: str) -> str:
    """Whitespace-insensitive form used to compare a file with its NamedQuery."""
    return " ".join(sql.split())


def named_query_yaml(query: AnalystQuery, indent: int = 2) -> str:
    """The template.yaml resource for ``query`` (the SQL inlined verbatim as a literal block)."""
    pad = " " * indent
    body = "\n".join((pad * 4 + line) if line else "" for line in query.sql.rstrip("\n").splitlines())
    return (
        f"{pad}{query.logical_id}:\n"
        f"{pad * 2}Type: AWS::Athena::NamedQuery\n"
        f"{pad * 2}Properties:\n"
        f"{pad * 3}Name: {query.name}\n"
        f"{pad * 3}Description: {json.dumps(query.description)}\n"
        f"{pad * 3}Database: !Ref GlueDatabase\n"
        f"{pad * 3}WorkGroup: !Ref AthenaWorkGroup\n"
        f"{pad * 3}QueryString: |\n{body}\n"
    )


# ---- output -------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A JSON/CSV-friendly value: timestamps as ISO text (UTC), decimals as numbers."""
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def cell_text(value: Any) -> str:
    """How a value reads in a text table (:func:`opslake_local.console.text_table`)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value.is_integer():
            return f"{value:,.0f}"
        return (
            f"{value:,.{1 if abs(value) >= 100 else 2 if abs(value) >= 1 else 4}f}"  # ~4 significant digits
        )
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(_plain(value))


def render(result: QueryResult, fmt: str = "table") -> str:
    """A query result as a text table, JSON (a list of objects) or CSV with a header row."""
    names = [c.name for c in result.columns]
    if fmt == "table":
        footer = f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''}, {result.engine})"
        return text_table(names, result.rows, cell=cell_text) + "\n" + footer
    if fmt == "json":
        records = [{n: _plain(v) for n, v in zip(names, row, strict=True)} for row in result.rows]
        return json.dumps(records, indent=2, default=str)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([_plain(v) for v in row] for row in result.rows)
        return buffer.getvalue().rstrip("\n")
    raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
