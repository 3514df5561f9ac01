"""``GET /stats`` and ``GET /profile/{agent_id}``: the SQL they run on the lake and the answers they give.

Every query reads only the hour partitions of its window (``opslake.query.sqltext``), so Athena
prunes the rest. The SQL is built from validated values only: the window is an integer, an agent
id must satisfy the op record's ``Id`` rule and is embedded as a string literal, and table names
are checked identifiers. One query per answer: each Athena query is billed at least
10 MB and costs a round trip of a second or more.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any

from cachetools import TTLCache
from pydantic import TypeAdapter, ValidationError

from opslake.errors import (
    BadRequestError,
    NotFoundError,
)
from opslake.ingest.tool_errors import AGENT_ENDPOINT_PREFIX, MODEL_ENDPOINT_PREFIX
from opslake.models.insights import (
    DEFAULT_PROFILE_HOURS,
    DEFAULT_STATS_HOURS,
    MAX_ENDPOINTS,
    MAX_WINDOW_HOURS,
    PROFILE_REPORTERS,
    RECENT_OPS,
    TOOL_KIND,
    TOP_ERRORS,
    Breakdown,
    ErrorSummary,
    ProfileAnswer,
    RecentOp,
    ReporterShare,
    StatsAnswer,
)
from opslake.models.ops import LLM_SOURCE, MAX_ID_CHARS, Id, now_utc
from opslake.models.window import Window
from opslake.query.api import ApiQueryConfig, run_query
from opslake.query.base import QueryEngine, QueryResult
from opslake.query.sqltext import sql_string, sql_string_list, window_predicate

#: How long a /stats answer is served from the container's cache.
STATS_CACHE_TTL_S = 30.0

_WHOLE_NUMBER = re.compile(r"^[0-9]{1,6}$")
_ID_ADAPTER: TypeAdapter[str] = TypeAdapter(Id)


# ---- validated parameters -----------------------------------------------------------------------
def parse_hours(raw: str | None, *, default: int) -> int:
    """The ``hours`` query parameter: a whole number from 1 to 168, ``default`` when absent."""
    if raw is None or raw == "":
        return default
    if not _WHOLE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= MAX_WINDOW_HOURS:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise BadRequestError(
            f"hours must be a whole number of hours from 1 to {MAX_WINDOW_HOURS} (got {shown!r}); "
            f"leave it out for the default of {default}",
            detail={"parameter": "hours", "min": 1, "max": MAX_WINDOW_HOURS, "default": default},
        )
    return int(raw)


def validate_agent_id(raw: str | None) -> str:
    """An agent id as op records store it: 1–200 characters, no whitespace at either end."""
    try:
        return _ID_ADAPTER.validate_python(raw)
    except ValidationError:
        raise BadRequestError(
            f"agent_id must be 1 to {MAX_ID_CHARS} characters with no leading or trailing whitespace "
            "(the same rule as agent_id in an op)",
            detail={"parameter": "agent_id"},
        ) from None


# ---- SQL ----------------------------------------------------------------------------------------
#: Event kinds of a runtime's reports, not calls (as the playbooks' contrast counts them too), and
#: ``opslake doctor``'s probe (a deployment check is no agent's tool call).
PROBE_EVENT_KIND = "probe"
REPORT_EVENT_KINDS = ("log", "rescue", "correction", PROBE_EVENT_KIND)


def op_kind_sql() -> str:
    """An op's kind (:data:`~opslake.models.insights.OP_KINDS`) from its row: agent runs and model
    calls by the endpoint the OTLP mapping gives them (and opslake's own model calls by their
    source), reports by their event kind, the rest calls."""
    return (
        f"CASE WHEN substr(endpoint, 1, {len(AGENT_ENDPOINT_PREFIX)}) = {sql_string(AGENT_ENDPOINT_PREFIX)} "
        "THEN 'agent' "
        # opslake's own model calls (the jobs' records; a source no client may claim)
        f"WHEN source = {sql_string(LLM_SOURCE)} THEN 'model' "
        f"WHEN substr(endpoint, 1, {len(MODEL_ENDPOINT_PREFIX)}) = {sql_string(MODEL_ENDPOINT_PREFIX)} "
        "THEN 'model' "
        f"WHEN coalesce(event_kind, '') IN ({sql_string_list(REPORT_EVENT_KINDS)}) THEN 'report' "
        f"ELSE {sql_string(TOOL_KIND)} END"
    )


def stats_sql(config: ApiQueryConfig, window: Window) -> str:
    """One scan, four groupings: the total, each source, each endpoint, each kind of op."""
    return f"""SELECT
  CASE WHEN grouping(source) = 0 THEN 'source' WHEN grouping(endpoint) = 0 THEN 'endpoint'
    WHEN grouping(op_kind) = 0 THEN 'kind' ELSE 'total' END AS kind,
  source,
  endpoint,
  op_kind,
  count(*) AS ops,
  count_if(NOT success) AS failures,
  approx_percentile(duration_ms, 0.95) AS p95_duration_ms
FROM (
  SELECT source, endpoint, success, duration_ms, {op_kind_sql()} AS op_kind
  FROM {config.table_ref}
  WHERE {window_predicate(window)}
) AS scoped
GROUP BY GROUPING SETS ((), (source), (endpoint), (op_kind))"""


# Columns of the profile query, with the type each part leaves NULL.
_PROFILE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ops", "bigint"),
    ("successes", "bigint"),
    ("p95_duration_ms", "double"),
    ("op_id", "varchar"),
    ("ts", "timestamp"),
    ("endpoint", "varchar"),
    ("success", "boolean"),
    ("duration_ms", "double"),
    ("error_type", "varchar"),
    ("error", "varchar"),
    ("reporter_id", "varchar"),
    ("reporters", "bigint"),
    ("op_kind", "varchar"),
)


def _select(part: str, values: Mapping[str, str]) -> str:
    """A SELECT list of every profile column: the given expressions, typed NULLs elsewhere."""
    items = [f"'{part}' AS part"] + [
        f"{values[name]} AS {name}" if name in values else f"CAST(NULL AS {sql_type}) AS {name}"
        for name, sql_type in _PROFILE_COLUMNS
    ]
    return "SELECT " + ", ".join(items)


def profile_sql(config: ApiQueryConfig, window: Window, agent_id: str) -> str:
    """One query, five parts (``part`` says which): the summary, the top errors, the recent ops, the
    API keys (``reporter_id``) behind them (an agent_id is a claim any key can make) and each kind
    of op apart (a success rate is about tool calls, not model calls or agent runs)."""
    agent_id = validate_agent_id(agent_id)
    summary = _select(
        "summary",
        {
            "ops": "count(*)",
            "successes": "count_if(success)",
            "p95_duration_ms": "approx_percentile(duration_ms, 0.95)",
            "reporters": "count(DISTINCT reporter_id)",
        },
    )
    errors = _select("error", {"ops": "count(*)", "error_type": "error_type", "error": "max_by(error, ts)"})
    recent = _select(
        "recent",
        {c: c for c in ("op_id", "ts", "endpoint", "success", "duration_ms", "error_type", "reporter_id")},
    )
    keys = _select("reporter", {"ops": "count(*)", "reporter_id": "reporter_id"})
    kinds = _select(
        "kind",
        {
            "ops": "count(*)",
            "successes": "count_if(success)",
            "p95_duration_ms": "approx_percentile(duration_ms, 0.95)",
            "op_kind": "op_kind",
        },
    )
    return f"""WITH scoped AS (
  SELECT op_id, ts, endpoint, success, duration_ms, error_type, error, reporter_id, {op_kind_sql()} AS op_kind
  FROM {config.table_ref}
  WHERE {window_predicate(window)} AND agent_id = {sql_string(agent_id)}
)
{summary} FROM scoped
UNION ALL
SELECT * FROM ({errors} FROM scoped WHERE NOT success
  GROUP BY error_type ORDER BY count(*) DESC, error_type LIMIT {TOP_ERRORS})
UNION ALL
SELECT * FROM ({recent} FROM scoped ORDER BY ts DESC, op_id DESC LIMIT {RECENT_OPS})
UNION ALL
SELECT * FROM ({keys} FROM scoped
  GROUP BY reporter_id ORDER BY count(*) DESC, reporter_id LIMIT {PROFILE_REPORTERS})
UNION ALL
SELECT * FROM ({kinds} FROM scoped GROUP BY op_kind)"""


# ---- shaping answers ----------------------------------------------------------------------------
def _utc(value: Any) -> datetime:
    """A result timestamp as an aware UTC datetime (Athena returns naive UTC, DuckDB may return aware)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _ms(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def _breakdown(row: Mapping[str, Any], name_column: str) -> Breakdown:
    ops, failures = int(row["ops"]), int(row["failures"] or 0)
    return Breakdown(
        name=str(row[name_column]),
        ops=ops,
        failures=failures,
        failure_rate=_rate(failures, ops),
        p95_duration_ms=_ms(row["p95_duration_ms"]),
    )


def _busiest(b: Breakdown) -> tuple[int, int, str]:
    return (-b.ops, -b.failures, b.name)


def _tools(kinds: list[Breakdown]) -> Breakdown:
    """The tool calls' breakdown (zeros when there were none): what the headline rates are about."""
    none = Breakdown(name=TOOL_KIND, ops=0, failures=0, failure_rate=0.0, p95_duration_ms=None)
    return next((k for k in kinds if k.name == TOOL_KIND), none)


def stats_from_result(result: QueryResult, window: Window, *, generated_at: datetime) -> StatsAnswer:
    """The /stats answer from the stats query's rows (an empty lake gives zeros, not an error)."""
    total: Mapping[str, Any] = {"ops": 0}
    sources: list[Breakdown] = []
    endpoints: list[Breakdown] = []
    kinds: list[Breakdown] = []
    for row in result.records():
        if row["kind"] == "total":
            total = row
        elif row["kind"] == "source":
            sources.append(_breakdown(row, "source"))
        elif row["kind"] == "endpoint":
            endpoints.append(_breakdown(row, "endpoint"))
        elif row["kind"] == "kind":
            kinds.append(_breakdown(row, "op_kind"))

    tools = _tools(kinds)
    endpoints.sort(key=_busiest)
    return StatsAnswer(
        window=window,
        ops=int(total["ops"] or 0),
        successes=tools.ops - tools.failures,
        failures=tools.failures,
        failure_rate=tools.failure_rate,
        p95_duration_ms=tools.p95_duration_ms,
        by_kind=sorted(kinds, key=_busiest),
        by_source=sorted(sources, key=_busiest),
        by_endpoint=endpoints[:MAX_ENDPOINTS],
        endpoints_omitted=max(0, len(endpoints) - MAX_ENDPOINTS),
        engine=result.engine,
        generated_at=generated_at,
        cached=False,
    )


def profile_from_result(
    result: QueryResult, window: Window, agent_id: str, *, generated_at: datetime
) -> ProfileAnswer:
    """The /profile answer from the profile query's rows; 404 when the agent has no op in the window."""
    rows = result.records()
    summary = next((r for r in rows if r["part"] == "summary"), None)
    if summary is None or not summary["ops"]:
        raise NotFoundError(
            f"no ops were found for agent {agent_id!r} in the last {window.hours} hours "
            f"(since {window.start:%Y-%m-%dT%H:%M:%SZ}); check the id or ask for more hours "
            f"(up to {MAX_WINDOW_HOURS})",
            detail={"agent_id": agent_id, "hours": window.hours},
        )
    errors = sorted(
        (r for r in rows if r["part"] == "error"),
        key=lambda r: (-int(r["ops"]), r["error_type"] is None, r["error_type"] or ""),
    )
    recent = sorted(
        (r for r in rows if r["part"] == "recent"), key=lambda r: (_utc(r["ts"]), r["op_id"]), reverse=True
    )
    keys = sorted(
        (r for r in rows if r["part"] == "reporter" and r["reporter_id"] is not None),
        key=lambda r: (-int(r["ops"]), r["reporter_id"]),
    )
    kinds = sorted(
        (
            _breakdown({**r, "failures": int(r["ops"]) - int(r["successes"] or 0)}, "op_kind")
            for r in rows
            if r["part"] == "kind"
        ),
        key=_busiest,
    )
    tools = _tools(kinds)
    return ProfileAnswer(
        agent_id=agent_id,
        window=window,
        ops=int(summary["ops"]),
        successes=tools.ops - tools.failures,
        failures=tools.failures,
        # None, not 0.0, for an agent that made no tool call: no call is not every call failing
        success_rate=_rate(tools.ops - tools.failures, tools.ops) if tools.ops else None,
        p95_duration_ms=tools.p95_duration_ms,
        by_kind=kinds,
        top_errors=[
            ErrorSummary(error_type=r["error_type"], count=int(r["ops"]), sample_error=r["error"])
            for r in errors[:TOP_ERRORS]
        ],
        recent_ops=[
            RecentOp(
                op_id=r["op_id"],
                ts=_utc(r["ts"]),
                endpoint=r["endpoint"],
                success=bool(r["success"]),
                duration_ms=float(r["duration_ms"]),
                error_type=r["error_type"],
                reporter_id=r.get("reporter_id"),
            )
            for r in recent[:RECENT_OPS]
        ],
        reporter_count=int(summary.get("reporters") or 0),
        reporters=[
            ReporterShare(reporter_id=str(r["reporter_id"]), ops=int(r["ops"]))
            for r in keys[:PROFILE_REPORTERS]
        ],
        engine=result.engine,
        generated_at=generated_at,
    )


# ---- the two operations -------------------------------------------------------------------------
_CACHE_LOCK = threading.Lock()


def stats_cache(ttl_s: float = STATS_CACHE_TTL_S) -> MutableMapping[int, StatsAnswer]:
    """A container's cache of ``/stats`` answers by window hours (a few seconds old at most)."""
    return TTLCache(maxsize=32, ttl=ttl_s)


def get_stats(
    engine: QueryEngine,
    *,
    config: ApiQueryConfig,
    hours: str | None,
    cache: MutableMapping[int, StatsAnswer] | None = None,
    now: datetime | None = None,
) -> StatsAnswer:
    """``GET /stats?hours=N``: served from ``cache`` for a few seconds, else one query."""
    window_hours = parse_hours(hours, default=DEFAULT_STATS_HOURS)
    with _CACHE_LOCK:  # cachetools' caches are not thread-safe (the local stack serves threads)
        hit = cache.get(window_hours) if cache is not None else None
    if hit is not None:
        return hit.model_copy(update={"cached": True})
    now = now or now_utc()
    window = Window.last_hours(now, window_hours)
    result = run_query(engine, stats_sql(config, window), what="the stats", config=config)
    answer = stats_from_result(result, window, generated_at=now)
    if cache is not None:
        with _CACHE_LOCK:
            cache[window_hours] = answer
    return answer


def get_profile(
    engine: QueryEngine,
    *,
    config: ApiQueryConfig,
    agent_id: str | None,
    hours: str | None,
    now: datetime | None = None,
) -> ProfileAnswer:
    """``GET /profile/{agent_id}?hours=N``: one query; 404 for an agent with no ops in the window."""
    agent = validate_agent_id(agent_id)
    window_hours = parse_hours(hours, default=DEFAULT_PROFILE_HOURS)
    now = now or now_utc()
    window = Window.last_hours(now, window_hours)
    result = run_query(
        engine, profile_sql(config, window, agent), what=f"the profile of {agent!r}", config=config
    )
    return profile_from_result(result, window, agent, generated_at=now)
