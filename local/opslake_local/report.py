"""One self-contained HTML report of a lake: what agents did, how they failed, what was learnt.

:func:`build_report` reads any lake through the :class:`~opslake.query.base.QueryEngine`
interface (the embedded engine on the local stack, or Athena) with plain Athena SQL over the
tables ``ops``, ``signatures``, ``diagnoses`` and ``playbooks``. A table that does not exist yet,
or has no rows, gives its section a "no data yet" note instead of failing the report.

The file needs nothing else: no CDN, no web fonts, no external URL; styles are inline and the
charts are inline SVG (:mod:`opslake_local.svg`). Every value from the lake is HTML-escaped (op
text is written by agents, so it is untrusted). One small inline script, allowed by the page's
Content-Security-Policy through its SHA-256 hash, only marks each chart with its rendered size
(``data-rendered``), which the browser test reads.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

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
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1180px;color:#111827;
background:#f9fafb;padding:0 16px}
h1{font-size:24px;margin-bottom:4px}h2{font-size:18px;margin-top:0}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:16px 20px;margin:16px 0}
table{border-collapse:collapse;width:100%;font-size:12px}th,td{border-bottom:1px solid #e5e7eb;padding:4px 6px;
text-align:left;vertical-align:top}th{background:#f3f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#6b7280;font-style:italic}.nodata{color:#92400e;background:#fffbeb;border:1px solid #fde68a;
padding:8px 12px;border-radius:6px}.meta{color:#6b7280;font-size:12px}.kv td:first-child{width:220px;color:#374151}
.tag{display:inline-block;padding:0 6px;border-radius:4px;font-size:11px}.do{background:#dcfce7}.avoid{background:#fee2e2}
svg.chart{display:block;margin:8px 0;max-width:100%;height:auto}code{font-size:11px}
"""


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


# ---- formatting ---------------------------------------------------------------------------------
def text(value: Any, limit: int = MAX_TEXT) -> str:
    """A value as escaped HTML text (long text is cut, with the full length noted)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return escape(str(value))
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return escape(value.strftime("%Y-%m-%d %H:%M:%S"))
    raw = str(value)
    if len(raw) > limit:
        raw = raw[: limit - 1] + "…"
    return escape(raw)


def rate(value: Any) -> str:
    return "" if value is None else f"{float(value) * 100:.1f}%"


def html_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    formats: Mapping[str, Callable[[Any], str]] | None = None,
) -> str:
    """An HTML table of ``rows`` with (key, heading) ``columns``; every cell escaped."""
    formats = formats or {}
    head = "".join(f"<th>{escape(title)}</th>" for _, title in columns)
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            cell = formats[key](value) if key in formats else text(value)
            cells.append(f'<td class="num">{cell}</td>' if numeric else f"<td>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def no_data(table: str, fetched: Fetched | None = None) -> str:
    """The "no data yet" note of a section."""
    if fetched is not None and fetched.error and not fetched.missing:
        return f'<p class="nodata">no data: the query on <code>{escape(table)}</code> failed: {text(fetched.error)}</p>'
    why = "does not exist yet" if fetched is not None and fetched.missing else "has no rows yet"
    return f'<p class="nodata">no data yet: table <code>{escape(table)}</code> {why}.</p>'


def section(anchor: str, title: str, body: str, note: str = "") -> str:
    extra = f'<p class="note">{escape(note)}</p>' if note else ""
    return f'<section id="{escape(anchor)}"><h2>{escape(title)}</h2>{extra}{body}</section>'


def _num(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


# ---- sections -----------------------------------------------------------------------------------
def overview_section(fetched: Fetched) -> str:
    if not fetched.rows or not fetched.rows[0].get("ops"):
        return section("overview", "Overview", no_data("ops", fetched))
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
    rows = "".join(f"<tr><td>{escape(k)}</td><td>{v}</td></tr>" for k, v in items)
    return section("overview", "Overview", f'<table class="kv">{rows}</table>')


def _arm(cycle: Mapping[str, Any]) -> str:
    if "arm" in cycle:
        return str(cycle["arm"])
    if "playbooks_enabled" in cycle:
        return "with playbooks" if cycle["playbooks_enabled"] else "without playbooks"
    return "agents"


def cycles_section(summary: Mapping[str, Any] | None) -> str:
    """Failure rate per cycle, one line per arm (from the demo's summary)."""
    title = "Failure rate per cycle, with and without playbooks"
    cycles = [c for c in (summary or {}).get("cycles", []) if isinstance(c, Mapping)]
    if not cycles:
        return section(
            "cycles", title, '<p class="nodata">no data yet: no demo summary was given to the report.</p>'
        )
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
    table = ""
    if facts:
        rows = "".join(f"<tr><td>{text(k)}</td><td>{text(v)}</td></tr>" for k, v in facts.items())
        table = f'<table class="kv">{rows}</table>'
    columns = [("cycle", "cycle"), ("arm", "arm"), ("tool_calls", "tool calls"),
               ("tool_failures", "failed calls"), ("failure_rate", "failure rate")]  # fmt: skip
    shown = [{**c, "arm": _arm(c)} for c in cycles]
    return section("cycles", title, chart + table + html_table(shown, columns, {"failure_rate": rate}))


def hourly_section(fetched: Fetched) -> str:
    title = "Failure rate per hour (all op records)"
    if not fetched.rows:
        return section("hourly", title, no_data("ops", fetched))
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
    return section("hourly", title, chart)


def signatures_section(fetched: Fetched) -> str:
    title = "Failures by signature"
    if not fetched.rows:
        return section("signatures", title, no_data("signatures", fetched))
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
    return section("signatures", title, chart + html_table(fetched.rows, columns))


def latency_section(fetched: Fetched) -> str:
    title = "Latency by endpoint (p50 / p95, ms)"
    if not fetched.rows:
        return section("latency", title, no_data("ops", fetched))
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
    return section("latency", title, chart + html_table(fetched.rows, columns))


def playbooks_section(fetched: Fetched) -> str:
    title = "Playbook entries: evidence and efficacy"
    if not fetched.rows:
        return section("playbooks", title, no_data("playbooks", fetched))
    measured = [r for r in fetched.rows if r.get("failure_rate_before") is not None]
    chart = ""
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

    def kind(value: Any) -> str:
        label = text(value)
        return f'<span class="tag {label if label in ("do", "avoid") else ""}">{label}</span>'

    columns = [("entry_id", "entry"), ("kind", "kind"), ("status", "status"), ("endpoint", "endpoint"),
               ("task_class", "task class"), ("trigger", "trigger"), ("action", "action"),
               ("confidence", "confidence"), ("evidence", "evidence ops"), ("evidence_agent_count", "agents"),
               ("ops_before", "ops before"), ("failure_rate_before", "failure rate before"),
               ("ops_after", "ops after"), ("failure_rate_after", "failure rate after"),
               ("published_at", "published")]  # fmt: skip
    formats = {"kind": kind, "failure_rate_before": rate, "failure_rate_after": rate}
    note = "" if measured else "efficacy is not measured yet for any entry"
    return section("playbooks", title, chart + html_table(fetched.rows, columns, formats), note)


def diagnoses_section(fetched: Fetched) -> str:
    title = "Diagnoses"
    if not fetched.rows:
        return section("diagnoses", title, no_data("diagnoses", fetched))
    columns = [("created_at", "when"), ("diagnosis_id", "diagnosis"), ("signature_id", "signature"),
               ("endpoint", "endpoint"),
               ("category", "category"), ("template", "template"), ("cause", "cause"),
               ("agent_adjustment", "adjustment"), ("avoid", "avoid"), ("confidence", "confidence"),
               ("diagnosed_by", "diagnosed by"), ("failure_count", "failures"), ("agent_count", "agents"),
               ("evidence", "evidence ops")]  # fmt: skip
    return section("diagnoses", title, html_table(fetched.rows, columns))


# ---- the page -----------------------------------------------------------------------------------
def script_hash(script: str = RENDER_MARK_SCRIPT) -> str:
    """The CSP source that allows exactly this inline script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


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
    nav = " · ".join(
        f'<a href="#{a}">{escape(t)}</a>'
        for a, t in (
            ("overview", "overview"),
            ("cycles", "cycles"),
            ("hourly", "hourly"),
            ("signatures", "signatures"),
            ("latency", "latency"),
            ("playbooks", "playbooks"),
            ("diagnoses", "diagnoses"),
        )
    )
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src {script_hash()}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<p class="meta">generated {escape(generated_at.strftime("%Y-%m-%d %H:%M:%S UTC"))} · engine '
        f"{escape(engine.name)} · tables {escape(', '.join(TABLES))}</p><nav>{nav}</nav>"
        + "".join(sections)
        + f"<script>{RENDER_MARK_SCRIPT}</script></body></html>\n"
    )


def write_report(path: Path, html: str) -> Path:
    """Write the report (creating its directory); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
