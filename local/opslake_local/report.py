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

from opslake.analysis.intervals import wilson
from opslake.query.base import QueryEngine, QueryError
from opslake_local import svg
from opslake_local.experiments import HELPDESK, fix_label, owner

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
        "SELECT entry_id, kind, status, endpoint, task_class, trigger, action, instead_of, fix_kind, fix_names, "
        "confidence, evidence_agent_count, cardinality(evidence_op_ids) AS evidence, experiment_stage, "
        "holdout_share, treatment_units, holdout_units, treatment_ops, treatment_failures, treatment_rate, "
        "treatment_rate_low, treatment_rate_high, holdout_ops, holdout_failures, holdout_rate, holdout_rate_low, "
        "holdout_rate_high, effect, effect_low, effect_high, design_effect, last_verdict, helpful_count, "
        "harmful_count, neutral_count, followed_treatment, followed_holdout, retired_reason, published_at, "
        "retired_at FROM playbooks ORDER BY status, confidence DESC, entry_id LIMIT 50"
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


def rate_interval(low: Any, high: Any) -> str:
    """``[1.8%, 20.7%]`` (empty when either end is missing)."""
    if low is None or high is None:
        return ""
    return f"[{_num(low) * 100:.1f}%, {_num(high) * 100:.1f}%]"


def points(value: Any, low: Any = None, high: Any = None) -> str:
    """A difference of rates in signed percentage points, with its interval when given."""
    if value is None:
        return ""
    shown = f"{_num(value) * 100:+.1f} pp"
    if low is not None and high is not None:
        shown += f" [{_num(low) * 100:+.1f}, {_num(high) * 100:+.1f}]"
    return shown


def arm(failures: Any, ops: Any, value: Any, low: Any, high: Any) -> str:
    """One arm of an experiment: ``2/31 6.5% [1.8%, 20.7%]`` (empty when not measured)."""
    if ops is None or failures is None:
        return ""
    return f"{text(failures)}/{text(ops)} {rate(value)} {rate_interval(low, high)}".rstrip()


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
    """Failure rate per cycle, one line per fleet (from the demo's summary), each cycle's Wilson
    interval, and the fleets' comparison beside the holdout estimates (``agreement``)."""
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
    blocks: list[Block] = [Chart(chart)]
    agreement = (summary or {}).get("agreement")
    if isinstance(agreement, Mapping):
        blocks.append(KeyValues(agreement_items(agreement)))
    facts = {
        k: v for k, v in (summary or {}).items() if k != "cycles" and isinstance(v, str | int | float | bool)
    }
    if facts:
        blocks.append(KeyValues([(text(k), text(v)) for k, v in facts.items()]))
    columns = [("cycle", "cycle"), ("arm", "arm"), ("tool_calls", "tool calls"), ("tool_failures", "failed calls"),
               ("failure_rate", "failure rate"), ("interval", "95% interval")]  # fmt: skip
    shown = [{**c, "arm": _arm(c), "interval": _cycle_interval(c)} for c in cycles]
    blocks.append(data_table(shown, columns, {"failure_rate": rate}))
    return Section("cycles", title, blocks)


def _cycle_interval(cycle: Mapping[str, Any]) -> str:
    calls, failures = int(_num(cycle.get("tool_calls"))), int(_num(cycle.get("tool_failures")))
    if calls <= 0 or not 0 <= failures <= calls:
        return ""
    return rate_interval(*wilson(failures, calls))


def _fleet(fleet: Any) -> str:
    if not isinstance(fleet, Mapping):
        return ""
    return (
        f"{rate(fleet.get('rate'))} {rate_interval(fleet.get('low'), fleet.get('high'))} "
        f"({text(fleet.get('failures'))} of {text(fleet.get('ops'))} tool calls)"
    )


def agreement_items(agreement: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The demo's closing note as key/values: the two fleets with intervals, their difference,
    the pooled holdout Δ and whether the two agree in sign."""
    first = agreement.get("fleet_first_cycle", 2)
    pooled = agreement.get("pooled_holdout_delta")
    items = [
        (f"fleet with playbooks, cycles {first}+", _fleet(agreement.get("fleet_with"))),
        (f"fleet without playbooks, cycles {first}+", _fleet(agreement.get("fleet_without"))),
        (
            "fleets Δ (without − with)",
            points(
                agreement.get("fleet_delta"),
                agreement.get("fleet_delta_low"),
                agreement.get("fleet_delta_high"),
            )
            + " (Newcombe; treats tool calls as independent)",
        ),
        (
            "pooled holdout Δ (holdout − treatment)",
            f"{points(pooled)} (Mantel–Haenszel over {text(agreement.get('judged_entries'))} judged entries)"
            if pooled is not None
            else "no entry judged yet",
        ),
        ("agree in sign", text(agreement.get("agree_in_sign"))),
        ("entries published", text(agreement.get("entries_published"))),
        ("entries refused by the quality gate", text(agreement.get("refused_by_quality_gate"))),
        ("groups with nothing specific to say (not drafted)", text(agreement.get("nothing_specific"))),
    ]
    return items


def helpdesk_section(summary: Mapping[str, Any] | None) -> Section | None:
    """The second world (the demo's service desk), from the demo summary's ``helpdesk``: its fleets'
    failure rate per cycle, the fleets beside the pooled holdout estimate, each of its entries' holdout
    experiment, and per cause of its failed tool calls the signatures, their purity, the entries that
    name its fix and how often they were followed. None when the summary has no second world."""
    world = (summary or {}).get("helpdesk")
    if not isinstance(world, Mapping):
        return None
    title = f"Second world: {HELPDESK.title}"
    cycles = [c for c in world.get("cycles", []) if isinstance(c, Mapping)]
    blocks: list[Block] = []
    series: dict[str, list[tuple[float, float]]] = {}
    for cycle in cycles:
        series.setdefault(_arm(cycle), []).append((_num(cycle.get("cycle")), _num(cycle.get("failure_rate"))))
    if series:
        blocks.append(
            Chart(
                svg.line_chart(
                    series,
                    title="Failure rate of the service desk's tool calls per cycle",
                    x_label="cycle",
                    y_label="failure rate",
                    y_max=svg.nice_max(max(y for points in series.values() for _, y in points) or 0.1),
                    percent=True,
                )
            )
        )
    agreement, card = world.get("agreement"), world.get("scorecard")
    items = agreement_items(agreement) if isinstance(agreement, Mapping) else []
    if isinstance(card, Mapping):
        items += [
            ("signatures of its failed tool calls", text(card.get("signatures"))),
            (
                "entries naming a planted mistake's fix or rule",
                text(len(card.get("entries_naming_fix") or [])),
            ),
            ("generic entries", text(", ".join(card.get("generic_entries") or []) or "0")),
        ]
    if items:
        blocks.append(KeyValues(items))
    entries = [
        {
            **e,
            "treatment": arm(e.get("treatment_failures"), e.get("treatment_ops"), e.get("treatment_rate"),
                             e.get("treatment_low"), e.get("treatment_high")),
            "holdout": arm(e.get("holdout_failures"), e.get("holdout_ops"), e.get("holdout_rate"),
                           e.get("holdout_low"), e.get("holdout_high")),
            "delta": points(e.get("effect"), e.get("effect_low"), e.get("effect_high")),
            "fleets": points(e.get("fleet_delta")),
        }
        for e in world.get("experiments", []) if isinstance(e, Mapping)
    ]  # fmt: skip
    if entries:
        columns = [("entry_id", "entry"), ("fix", "fix"), ("action", "action"),
                   ("treatment", "treatment failures/ops, rate [95%]"), ("holdout", "holdout failures/ops, rate [95%]"),
                   ("delta", "Δ holdout − treatment [95%]"), ("verdict", "verdict"), ("fleets", "fleets Δ"),
                   ("sign", "sign")]  # fmt: skip
        blocks.append(data_table(entries, columns))
    mistakes = [
        {
            **m,
            "made": f"{text(m.get('made_with'))} / {text(m.get('made_without'))}",
            "seen_by": ", ".join(m.get("contrasts") or []) or "—",
            "signature_ids": f"{len(m.get('signatures') or [])}: " + ", ".join(m.get("signatures") or []),
            "purity_shown": "—" if m.get("purity") is None else f"{_num(m.get('purity')):.2f}",
            "entries_shown": ", ".join(m.get("entries") or []) or "—",
        }
        for m in world.get("mistakes", []) if isinstance(m, Mapping)
    ]  # fmt: skip
    if mistakes:
        columns = [("cause", "cause"), ("tool", "tool"), ("planted", "planted"), ("seen_by", "contrasts that can see it"),
                   ("made", "made (with / without)"), ("avoided", "avoided"), ("failed_calls", "failed calls"),
                   ("signature_ids", "signatures"), ("purity_shown", "purity"),
                   ("entries_shown", "entries naming its fix"), ("followed", "followed")]  # fmt: skip
        blocks.append(data_table(mistakes, columns))
    if not blocks:
        blocks.append(NoData("the demo summary's second world is empty"))
    return Section("helpdesk", title, blocks)


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
    """Every entry with its holdout experiment as the consolidator computed it (table
    ``playbooks``): a dot-and-whisker chart of each measured entry's holdout and treatment failure
    rates with their intervals, and the columns."""
    title = "Playbook entries: evidence and holdout experiments"
    if not fetched.rows:
        return Section("playbooks", title, [no_data("playbooks", fetched)])
    measured = [
        r for r in fetched.rows if r.get("treatment_ops") is not None and r.get("holdout_ops") is not None
    ]
    blocks: list[Block] = []
    if measured:

        def estimate(row: Mapping[str, Any], prefix: str) -> tuple[float, float, float] | None:
            point, low, high = (row.get(f"{prefix}_rate{end}") for end in ("", "_low", "_high"))
            if point is None or low is None or high is None:
                return None
            return _num(point), _num(low), _num(high)

        chart = svg.interval_chart(
            [f"{r.get('entry_id')} ({fix_label(r)})" for r in measured],
            {
                "holdout (entry withheld)": [estimate(r, "holdout") for r in measured],
                "treatment (entry served)": [estimate(r, "treatment") for r in measured],
            },
            title="Failure rate of each entry's target ops: holdout vs treatment, 95% intervals",
            percent=True,
            label_width=280,
        )
        blocks.append(Chart(chart))
    shown = [
        {
            **r,
            "world": owner(r.get("endpoint"), r.get("task_class")).name,
            "fix": fix_label(r) if r.get("fix_kind") else "",
            "treatment": arm(r.get("treatment_failures"), r.get("treatment_ops"), r.get("treatment_rate"),
                             r.get("treatment_rate_low"), r.get("treatment_rate_high")),
            "holdout": arm(r.get("holdout_failures"), r.get("holdout_ops"), r.get("holdout_rate"),
                           r.get("holdout_rate_low"), r.get("holdout_rate_high")),
            "delta": points(r.get("effect"), r.get("effect_low"), r.get("effect_high")),
            "counts": f"{text(r.get('helpful_count') or 0)} / {text(r.get('harmful_count') or 0)}",
            "followed": f"{text(r.get('followed_treatment') or 0)} / {text(r.get('followed_holdout') or 0)}",
        }
        for r in fetched.rows
    ]  # fmt: skip
    columns = [("entry_id", "entry"), ("world", "world"), ("kind", "kind"), ("status", "status"),
               ("experiment_stage", "stage"), ("endpoint", "endpoint"), ("task_class", "task class"),
               ("trigger", "trigger"), ("action", "action"),
               ("instead_of", "instead of"), ("fix", "fix"), ("evidence", "evidence ops"),
               ("evidence_agent_count", "agents"), ("treatment", "treatment failures/ops, rate [95%]"),
               ("holdout", "holdout failures/ops, rate [95%]"), ("delta", "Δ holdout − treatment [95%]"),
               ("last_verdict", "verdict"), ("counts", "helpful / harmful"), ("design_effect", "design effect"),
               ("followed", "followed (treatment / holdout)"), ("published_at", "published")]  # fmt: skip
    blocks.append(data_table(shown, columns, tags={"kind"}))
    note = "" if measured else "no entry has a holdout experiment measured yet"
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
    second_world = helpdesk_section(summary)
    sections = [
        overview_section(results["overview"]),
        cycles_section(summary),
        *([second_world] if second_world is not None else []),
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
