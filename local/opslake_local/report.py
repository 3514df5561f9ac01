"""One self-contained HTML report of a lake: what agents did, how they failed, what was learnt.

:func:`build_report` reads any lake through the :class:`~opslake.query.base.QueryEngine`
interface (the embedded engine on the local stack, or Athena) with plain Athena SQL over the
tables ``ops``, ``signatures``, ``diagnoses`` and ``playbooks``. A table that does not exist yet,
or has no rows, gives its section a "no data yet" note instead of failing the report.

The page is the Jinja2 template ``templates/report.html`` (with ``report.css``), rendered with
autoescaping on: every value from the lake is escaped (op text is written by agents, so it is
untrusted); only the SVG charts, which :mod:`opslake_local.svg` builds from numbers and escaped
text, and the constant script below enter the page as markup. This module turns query results into
what the template shows: sections of charts, tables and notes, every cell already formatted.

The file needs nothing else: no CDN, no web fonts, no external URL; styles are inline and the
charts are inline SVG. One small inline script, allowed by the page's Content-Security-Policy
through its SHA-256 hash, only marks each chart with its rendered size (``data-rendered``), which
the browser test reads.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from opslake.query.base import QueryEngine, QueryError
from opslake_local import svg

TABLES = ("ops", "signatures", "diagnoses", "playbooks")
MAX_TEXT = 300  # characters of agent-written text shown in a table cell

SQL: dict[str, str] = {
    "overview": (
        "SELECT count(*) AS ops, count_if(NOT success) AS failures, count(DISTINCT agent_id) AS agents, "
        "count(DISTINCT endpoint) AS endpoints, min(ts) AS first_ts, max(ts) AS last_ts FROM ops"
    ),
    "hourly": (
        "SELECT dt, hour, count(*) AS ops, count_if(NOT success) AS failures FROM ops "
        "GROUP BY dt, hour ORDER BY dt, hour"
    ),
    "latency": (
        "SELECT endpoint, count(*) AS ops, approx_percentile(duration_ms, 0.5) AS p50, "
        "approx_percentile(duration_ms, 0.95) AS p95 FROM ops GROUP BY endpoint ORDER BY ops DESC, endpoint LIMIT 20"
    ),
    "signatures": (
        "SELECT signature_id, endpoint, error_type, template, count, agent_count, variant_count, "
        "first_seen, last_seen, diagnoses FROM signatures ORDER BY count DESC, signature_id LIMIT 20"
    ),
    "diagnoses": (
        "SELECT diagnosis_id, signature_id, endpoint, template, cause, agent_adjustment, avoid, category, "
        "confidence, diagnosed_by, failure_count, agent_count, cardinality(evidence_op_ids) AS evidence, "
        "created_at FROM diagnoses ORDER BY created_at DESC, diagnosis_id LIMIT 30"
    ),
    "playbooks": (
        "SELECT entry_id, kind, status, endpoint, task_class, trigger, action, confidence, "
        "evidence_agent_count, cardinality(evidence_op_ids) AS evidence, ops_before, failures_before, "
        "ops_after, failures_after, failure_rate_before, failure_rate_after, published_at, retired_at "
        "FROM playbooks ORDER BY status, confidence DESC, entry_id LIMIT 50"
    ),
}

# Runs once the page has laid out: each chart gets data-rendered="<width>x<height>" (the browser
# test's proof that it was drawn). Allowed by the page's CSP through its hash, nothing else is.
RENDER_MARK_SCRIPT = (
    "document.querySelectorAll('svg.chart').forEach(function(c){var b=c.getBoundingClientRect();"
    "c.setAttribute('data-rendered',Math.round(b.width)+'x'+Math.round(b.height));});"
    "document.body.setAttribute('data-charts',String(document.querySelectorAll('svg.chart').length));"
)


@dataclass(frozen=True)
class Fetched:
    """A query's rows, or why there are none (``missing``: the table does not exist yet)."""

    rows: list[dict[str, Any]]
    error: str | None = None
    missing: bool = False


def fetch(engine: QueryEngine, sql: str, *, timeout_s: float = 60.0) -> Fetched:
    """Run one report query; a missing table or a failing query becomes a note, never an exception."""
    try:
        return Fetched(engine.run(sql, timeout_s=timeout_s).records())
    except QueryError as exc:
        message = exc.message
        missing = "TABLE_NOT_FOUND" in message or "does not exist" in message
        return Fetched([], error=message, missing=missing)


# ---- what the template shows --------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One table cell: its text (escaped by the template), right-aligned when the value is a
    number, and shown as a coloured label when ``tag`` is set (the tag is its CSS class)."""

    text: str
    numeric: bool = False
    tag: str | None = None


@dataclass(frozen=True)
class Chart:
    """An SVG chart from :mod:`opslake_local.svg` (markup: numbers and escaped text only)."""

    svg: Markup
    kind: Literal["chart"] = "chart"


@dataclass(frozen=True)
class DataTable:
    headings: list[str]
    rows: list[list[Cell]]
    kind: Literal["table"] = "table"


@dataclass(frozen=True)
class KeyValues:
    items: list[tuple[str, str]]
    kind: Literal["key_values"] = "key_values"


@dataclass(frozen=True)
class NoData:
    """Why a section has nothing to show: ``table`` has no rows (``why``), or its query failed
    (``error``); without a table, ``why`` says it all."""

    why: str = ""
    table: str | None = None
    error: str | None = None
    kind: Literal["no_data"] = "no_data"


Block = Chart | DataTable | KeyValues | NoData


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    note: str = ""


# ---- formatting ---------------------------------------------------------------------------------
def text(value: Any, limit: int = MAX_TEXT) -> str:
    """A value as text for the page (long text is cut, with "…"); the template escapes it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    raw = str(value)
    if len(raw) > limit:
        raw = raw[: limit - 1] + "…"
    return raw


def rate(value: Any) -> str:
    return "" if value is None else f"{float(value) * 100:.1f}%"


def data_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    formats: Mapping[str, Callable[[Any], str]] | None = None,
    tags: Collection[str] = (),
) -> DataTable:
    """A table of ``rows`` with (key, heading) ``columns``; ``formats`` format some columns, and
    ``tags`` columns show their value as a label ("do" and "avoid" get their colour)."""
    formats = formats or {}
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            shown = formats[key](value) if key in formats else text(value)
            tag = (shown if shown in ("do", "avoid") else "") if key in tags else None
            cells.append(Cell(shown, isinstance(value, int | float) and not isinstance(value, bool), tag))
        body.append(cells)
    return DataTable([title for _, title in columns], body)


def no_data(table: str, fetched: Fetched | None = None) -> NoData:
    """The "no data yet" note of a section."""
    if fetched is not None and fetched.error and not fetched.missing:
        return NoData(table=table, error=text(fetched.error))
    why = "does not exist yet" if fetched is not None and fetched.missing else "has no rows yet"
    return NoData(why, table=table)


def _num(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


# ---- sections -----------------------------------------------------------------------------------
def overview_section(fetched: Fetched) -> Section:
    if not fetched.rows or not fetched.rows[0].get("ops"):
        return Section("overview", "Overview", [no_data("ops", fetched)])
    row = fetched.rows[0]
    ops, failures = int(row["ops"]), int(row["failures"] or 0)
    items = [
        ("op records", text(ops)),
        ("failures", f"{text(failures)} ({rate(failures / ops)})"),
        ("agents", text(row.get("agents"))),
        ("endpoints", text(row.get("endpoints"))),
        ("first op", text(row.get("first_ts"))),
        ("last op", text(row.get("last_ts"))),
    ]
    return Section("overview", "Overview", [KeyValues(items)])


def _arm(cycle: Mapping[str, Any]) -> str:
    if "arm" in cycle:
        return str(cycle["arm"])
    if "playbooks_enabled" in cycle:
        return "with playbooks" if cycle["playbooks_enabled"] else "without playbooks"
    return "agents"


def cycles_section(summary: Mapping[str, Any] | None) -> Section:
    """Failure rate per cycle, one line per arm (from the demo's summary)."""
    title = "Failure rate per cycle, with and without playbooks"
    cycles = [c for c in (summary or {}).get("cycles", []) if isinstance(c, Mapping)]
    if not cycles:
        return Section("cycles", title, [NoData("no demo summary was given to the report")])
    series: dict[str, list[tuple[float, float]]] = {}
    for cycle in cycles:
        series.setdefault(_arm(cycle), []).append((_num(cycle.get("cycle")), _num(cycle.get("failure_rate"))))
    chart = svg.line_chart(
        series,
        title="Failure rate of tool calls per cycle",
        x_label="cycle",
        y_label="failure rate",
        y_max=svg.nice_max(max(y for points in series.values() for _, y in points) or 0.1),
        percent=True,
    )
    facts = {
        k: v for k, v in (summary or {}).items() if k != "cycles" and isinstance(v, str | int | float | bool)
    }
    blocks: list[Block] = [Chart(chart)]
    if facts:
        blocks.append(KeyValues([(text(k), text(v)) for k, v in facts.items()]))
    columns = [("cycle", "cycle"), ("arm", "arm"), ("tool_calls", "tool calls"),
               ("tool_failures", "failed calls"), ("failure_rate", "failure rate")]  # fmt: skip
    shown = [{**c, "arm": _arm(c)} for c in cycles]
    blocks.append(data_table(shown, columns, {"failure_rate": rate}))
    return Section("cycles", title, blocks)


def hourly_section(fetched: Fetched) -> Section:
    title = "Failure rate per hour (all op records)"
    if not fetched.rows:
        return Section("hourly", title, [no_data("ops", fetched)])
    points = []
    labels = []
    for i, row in enumerate(fetched.rows):
        ops = _num(row.get("ops"))
        points.append((float(i + 1), _num(row.get("failures")) / ops if ops else 0.0))
        labels.append(f"{row.get('dt')} {row.get('hour')}:00")
    chart = svg.line_chart(
        {"failure rate": points},
        title="Failure rate per ingest hour",
        x_label=f"hour ({labels[0]} … {labels[-1]} UTC)",
        y_label="failure rate",
        y_max=svg.nice_max(max(y for _, y in points) or 0.1),
        percent=True,
    )
    return Section("hourly", title, [Chart(chart)])


def signatures_section(fetched: Fetched) -> Section:
    title = "Failures by signature"
    if not fetched.rows:
        return Section("signatures", title, [no_data("signatures", fetched)])
    labels = [
        f"{r.get('endpoint')} · {r.get('error_type') or '?'} · {r.get('signature_id')}" for r in fetched.rows
    ]
    chart = svg.bar_chart(
        labels,
        {
            "failures": [_num(r.get("count")) for r in fetched.rows],
            "agents": [_num(r.get("agent_count")) for r in fetched.rows],
        },
        title="Failures and distinct agents per signature",
        label_width=300,
    )
    columns = [("signature_id", "signature"), ("endpoint", "endpoint"), ("error_type", "error type"),
               ("template", "template"), ("count", "failures"), ("agent_count", "agents"),
               ("variant_count", "variants"), ("diagnoses", "diagnoses"), ("last_seen", "last seen")]  # fmt: skip
    return Section("signatures", title, [Chart(chart), data_table(fetched.rows, columns)])


def latency_section(fetched: Fetched) -> Section:
    title = "Latency by endpoint (p50 / p95, ms)"
    if not fetched.rows:
        return Section("latency", title, [no_data("ops", fetched)])
    labels = [str(r.get("endpoint")) for r in fetched.rows]
    chart = svg.bar_chart(
        labels,
        {
            "p50": [_num(r.get("p50")) for r in fetched.rows],
            "p95": [_num(r.get("p95")) for r in fetched.rows],
        },
        title="Latency per endpoint, p50 and p95 in milliseconds",
    )
    columns = [("endpoint", "endpoint"), ("ops", "ops"), ("p50", "p50 ms"), ("p95", "p95 ms")]
    return Section("latency", title, [Chart(chart), data_table(fetched.rows, columns)])


def playbooks_section(fetched: Fetched) -> Section:
    title = "Playbook entries: evidence and efficacy"
    if not fetched.rows:
        return Section("playbooks", title, [no_data("playbooks", fetched)])
    measured = [r for r in fetched.rows if r.get("failure_rate_before") is not None]
    blocks: list[Block] = []
    if measured:
        chart = svg.bar_chart(
            [f"{r.get('entry_id')} ({r.get('endpoint') or r.get('task_class') or 'any'})" for r in measured],
            {
                "before": [_num(r.get("failure_rate_before")) for r in measured],
                "after": [_num(r.get("failure_rate_after")) for r in measured],
            },
            title="Failure rate of the targeted ops before and after each entry was published",
            percent=True,
            label_width=280,
        )
        blocks.append(Chart(chart))
    columns = [("entry_id", "entry"), ("kind", "kind"), ("status", "status"), ("endpoint", "endpoint"),
               ("task_class", "task class"), ("trigger", "trigger"), ("action", "action"),
               ("confidence", "confidence"), ("evidence", "evidence ops"), ("evidence_agent_count", "agents"),
               ("ops_before", "ops before"), ("failure_rate_before", "failure rate before"),
               ("ops_after", "ops after"), ("failure_rate_after", "failure rate after"),
               ("published_at", "published")]  # fmt: skip
    formats = {"failure_rate_before": rate, "failure_rate_after": rate}
    blocks.append(data_table(fetched.rows, columns, formats, tags={"kind"}))
    note = "" if measured else "efficacy is not measured yet for any entry"
    return Section("playbooks", title, blocks, note)


def diagnoses_section(fetched: Fetched) -> Section:
    title = "Diagnoses"
    if not fetched.rows:
        return Section("diagnoses", title, [no_data("diagnoses", fetched)])
    columns = [("created_at", "when"), ("diagnosis_id", "diagnosis"), ("signature_id", "signature"),
               ("endpoint", "endpoint"),
               ("category", "category"), ("template", "template"), ("cause", "cause"),
               ("agent_adjustment", "adjustment"), ("avoid", "avoid"), ("confidence", "confidence"),
               ("diagnosed_by", "diagnosed by"), ("failure_count", "failures"), ("agent_count", "agents"),
               ("evidence", "evidence ops")]  # fmt: skip
    return Section("diagnoses", title, [data_table(fetched.rows, columns)])


# ---- the page -----------------------------------------------------------------------------------
def script_hash(script: str = RENDER_MARK_SCRIPT) -> str:
    """The CSP source that allows exactly this inline script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def _escape(value: Any) -> Markup:
    """How the template escapes a value: markup stays as it is, anything else goes through
    :func:`html.escape` (the entities the report has always written, e.g. ``&quot;``)."""
    return value if isinstance(value, Markup) else Markup(html.escape(str(value)))


@cache
def environment() -> Environment:
    """The report's Jinja2 environment: the package's templates, autoescaping always on, and an
    error (not an empty string) for a name the template uses but is not given."""
    return Environment(
        loader=PackageLoader("opslake_local", "templates"),
        autoescape=True,
        finalize=_escape,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def build_report(
    engine: QueryEngine,
    *,
    summary: Mapping[str, Any] | None = None,
    title: str = "opslake report",
    generated_at: datetime | None = None,
    timeout_s: float = 60.0,
) -> str:
    """The whole report as one HTML document (see the module docstring).

    ``summary`` is optional: a demo's summary with ``cycles``, a list of per-cycle dicts that have
    ``cycle``, ``failure_rate`` and ``arm`` (or ``playbooks_enabled``; :meth:`CycleStats.to_dict`
    fits); its other scalar keys are listed under the chart.
    """
    generated_at = generated_at or datetime.now(UTC)
    results = {name: fetch(engine, sql, timeout_s=timeout_s) for name, sql in SQL.items()}
    sections = [
        overview_section(results["overview"]),
        cycles_section(summary),
        hourly_section(results["hourly"]),
        signatures_section(results["signatures"]),
        latency_section(results["latency"]),
        playbooks_section(results["playbooks"]),
        diagnoses_section(results["diagnoses"]),
    ]
    return (
        environment()
        .get_template("report.html")
        .render(
            title=title,
            csp=f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src {script_hash()}",
            generated_at=generated_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            engine=engine.name,
            tables=", ".join(TABLES),
            sections=sections,
            script=Markup(RENDER_MARK_SCRIPT),  # a constant; the CSP allows exactly it by its hash
        )
    )


def write_report(path: Path, html: str) -> Path:
    """Write the report (creating its directory); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
