"""GET /stats and GET /profile logic: the SQL built, the answers shaped, the cache, the error mapping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cachetools import TTLCache

from opslake.errors import (
    BadRequestError,
    ConfigurationError,
    NotFoundError,
    QueryEngineFailedError,
    QueryUnavailableError,
)
from opslake.insights.stats import (
    get_profile,
    get_stats,
    parse_hours,
    profile_sql,
    stats_from_result,
    stats_sql,
    validate_agent_id,
)
from opslake.models.insights import MAX_ENDPOINTS, StatsAnswer
from opslake.models.window import Window
from opslake.query.api import ApiQueryConfig
from opslake.query.base import (
    Column,
    QueryError,
    QueryFailedError,
    QueryResult,
    QueryTimeoutError,
    UnsupportedSqlError,
)
from opslake.query.sqltext import sql_string, window_predicate

from ...fakes import FakeEngine

CONFIG = ApiQueryConfig(database="opslake_test", table="ops", timeout_s=20, retry_after_s=7)
NOW = datetime(2026, 11, 21, 1, 30, 12, 345678, tzinfo=UTC)

STATS_COLUMNS = ["kind", "source", "endpoint", "ops", "failures", "p95_duration_ms", "op_kind"]
PROFILE_COLUMNS = [
    "part", "ops", "successes", "p95_duration_ms", "op_id", "ts", "endpoint", "success", "duration_ms",
    "error_type", "error", "op_kind",
]  # fmt: skip


def result(columns: list[str], rows: list[tuple[Any, ...]], engine: str = "fake") -> QueryResult:
    """Rows name the first columns; the rest are NULL, as the SQL leaves the other parts' columns."""
    padded = [(*row, *(None,) * (len(columns) - len(row))) for row in rows]
    return QueryResult(
        columns=[Column(name, "varchar") for name in columns], rows=padded, engine=engine, query_id="q-1"
    )


# ---- parameters --------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "expected"), [(None, 24), ("", 24), ("1", 1), ("24", 24), ("168", 168)])
def test_hours_within_bounds(raw: str | None, expected: int) -> None:
    assert parse_hours(raw, default=24) == expected


@pytest.mark.parametrize("raw", ["0", "169", "-1", "1.5", "24h", " 24", "+24", "1e2", "9999999", "abc", "٣"])
def test_hours_out_of_bounds_or_not_a_whole_number_is_a_400_that_says_the_range(raw: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_hours(raw, default=24)
    assert "from 1 to 168" in caught.value.message
    assert caught.value.status == 400


@pytest.mark.parametrize("agent_id", ["agent-7", "a", "x" * 200, "o'brien", "agent 7", "ünï"])
def test_valid_agent_ids(agent_id: str) -> None:
    assert validate_agent_id(agent_id) == agent_id


@pytest.mark.parametrize("agent_id", [None, "", " agent", "agent ", "x" * 201, "a\nb", "\t"])
def test_invalid_agent_ids_are_a_400(agent_id: str | None) -> None:
    with pytest.raises(BadRequestError, match="1 to 200 characters"):
        validate_agent_id(agent_id)


def test_sql_string_doubles_single_quotes() -> None:
    assert sql_string("o'brien") == "'o''brien'"
    assert sql_string("''; DROP TABLE ops; --") == "'''''; DROP TABLE ops; --'"
    assert sql_string("back\\slash") == "'back\\slash'"


def test_config_refuses_table_names_that_are_not_plain_identifiers() -> None:
    with pytest.raises(ConfigurationError, match="OPSLAKE_GLUE_DATABASE"):
        ApiQueryConfig(database='x"; DROP')
    with pytest.raises(ConfigurationError, match="OPSLAKE_OPS_TABLE"):
        ApiQueryConfig(database="db", table="ops-1")


# ---- the window and its partition predicates ---------------------------------------------------
def test_window_is_utc_to_the_ms_and_holds_now() -> None:
    window = Window.last_hours(NOW, 24)
    assert window.end == datetime(2026, 11, 21, 1, 30, 12, 346000, tzinfo=UTC)
    assert window.start == window.end - timedelta(hours=24)
    assert window.hours == 24


def test_naive_now_is_taken_as_utc() -> None:
    assert Window.last_hours(NOW.replace(tzinfo=None), 1).end.tzinfo is UTC


def test_window_crossing_midnight_prunes_on_both_days() -> None:
    predicate = window_predicate(Window.last_hours(NOW, 2))  # 2026-11-20 23:30 → 2026-11-21 01:30
    assert predicate == (
        "dt >= '2026-11-20' AND dt <= '2026-11-21' "
        "AND ((dt = '2026-11-20' AND hour IN ('23')) OR (dt = '2026-11-21' AND hour IN ('00', '01'))) "
        "AND ingested_at >= TIMESTAMP '2026-11-20 23:30:12.346' "
        "AND ingested_at < TIMESTAMP '2026-11-21 01:30:12.346'"
    )


def test_window_within_one_day() -> None:
    window = Window.last_hours(datetime(2026, 11, 21, 18, 5, tzinfo=UTC), 3)
    assert window.partitions() == [("2026-11-21", h) for h in ("15", "16", "17", "18")]
    assert window_predicate(window).startswith(
        "dt >= '2026-11-21' AND dt <= '2026-11-21' AND ((dt = '2026-11-21' AND hour IN ('15', '16', '17', '18')))"
    )


def test_longest_window_spans_eight_days() -> None:
    window = Window.last_hours(NOW, 168)
    days = sorted({dt for dt, _ in window.partitions()})
    assert days == [f"2026-11-{d}" for d in range(14, 22)]
    predicate = window_predicate(window)
    # the days as a range (pruned by any engine), whole days by dt alone, the edge days by hour
    assert predicate.startswith("dt >= '2026-11-14' AND dt <= '2026-11-21' AND (")
    assert "(dt = '2026-11-14' AND hour IN ('01', " in predicate
    assert " OR dt = '2026-11-15' OR " in predicate
    assert "(dt = '2026-11-21' AND hour IN ('00', '01'))" in predicate


def test_window_crossing_a_year_boundary() -> None:
    predicate = window_predicate(Window.last_hours(datetime(2027, 1, 1, 0, 10, tzinfo=UTC), 1))
    assert predicate.startswith(
        "dt >= '2026-12-31' AND dt <= '2027-01-01' "
        "AND ((dt = '2026-12-31' AND hour IN ('23')) OR (dt = '2027-01-01' AND hour IN ('00')))"
    )


def test_stats_sql_prunes_partitions_and_groups_once() -> None:
    sql = stats_sql(CONFIG, Window.last_hours(NOW, 24))
    assert 'FROM "opslake_test"."ops"' in sql
    assert window_predicate(Window.last_hours(NOW, 24)) in sql
    assert "GROUPING SETS ((), (source), (endpoint), (op_kind))" in sql
    assert sql.count(CONFIG.table_ref) == 1  # one scan


def test_profile_sql_escapes_the_agent_id_and_prunes_partitions() -> None:
    sql = profile_sql(CONFIG, Window.last_hours(NOW, 168), "o'brien")
    assert "agent_id = 'o''brien'" in sql
    assert window_predicate(Window.last_hours(NOW, 168)) in sql
    assert sql.count('"opslake_test"."ops"') == 1  # one scan definition, shared by the three parts


def test_profile_sql_refuses_an_invalid_agent_id() -> None:
    with pytest.raises(BadRequestError):
        profile_sql(CONFIG, Window.last_hours(NOW, 1), " x")


# ---- /stats ------------------------------------------------------------------------------------
STATS_ROWS = [
    ("total", None, None, 13, 4, 1_500.0),
    ("source", "event", None, 4, 3, 900.0),
    ("source", "gateway", None, 6, 0, 120.0),
    ("source", "otlp", None, 3, 1, 4_000.0),
    ("endpoint", None, "/sql", 6, 0, 120.0),
    ("endpoint", None, "tool:query_db", 4, 3, 900.0),
    ("endpoint", None, "model:gpt-x", 2, 0, 800.0),
    ("endpoint", None, "agent:planner", 1, 1, 4_000.0),
    ("kind", None, None, 10, 3, 812.5, "tool"),
    ("kind", None, None, 2, 0, 800.0, "model"),
    ("kind", None, None, 1, 1, 4_000.0, "agent"),
]


def test_stats_answer_shaped_from_rows() -> None:
    engine = FakeEngine(result(STATS_COLUMNS, STATS_ROWS))
    answer = get_stats(engine, config=CONFIG, hours="6", now=NOW)
    # every op counted; the rates and the p95 are the tool calls' (the failed agent run is not one)
    assert (answer.ops, answer.successes, answer.failures, answer.failure_rate) == (13, 7, 3, 0.3)
    assert answer.p95_duration_ms == 812.5
    assert [(b.name, b.ops, b.failures) for b in answer.by_kind] == [
        ("tool", 10, 3),
        ("model", 2, 0),
        ("agent", 1, 1),
    ]
    assert [(b.name, b.ops, b.failures, b.failure_rate) for b in answer.by_source] == [
        ("gateway", 6, 0, 0.0),
        ("event", 4, 3, 0.75),
        ("otlp", 3, 1, 0.3333),
    ]
    assert [b.name for b in answer.by_endpoint] == ["/sql", "tool:query_db", "model:gpt-x", "agent:planner"]
    assert answer.by_endpoint[1].p95_duration_ms == 900.0
    assert answer.window.hours == 6
    assert answer.generated_at == NOW
    assert answer.cached is False
    assert answer.engine == "fake"
    assert engine.timeouts == [20]
    assert "(dt = '2026-11-20' AND hour IN ('19', '20', '21', '22', '23'))" in engine.sql[0]


def test_stats_of_an_empty_window_are_zeros() -> None:
    for rows in ([], [("total", None, None, 0, 0, None)]):
        answer = get_stats(FakeEngine(result(STATS_COLUMNS, rows)), config=CONFIG, hours=None, now=NOW)
        assert (answer.ops, answer.failures, answer.failure_rate, answer.p95_duration_ms) == (0, 0, 0.0, None)
        assert answer.by_source == answer.by_endpoint == []
        assert answer.window.hours == 24


def test_stats_keeps_the_busiest_endpoints_and_counts_the_rest() -> None:
    rows = [("total", None, None, 10_000, 0, 1.0)] + [
        ("endpoint", None, f"tool:t{i:03d}", i + 1, 0, 1.0) for i in range(MAX_ENDPOINTS + 20)
    ]
    answer = stats_from_result(result(STATS_COLUMNS, rows), Window.last_hours(NOW, 1), generated_at=NOW)
    assert len(answer.by_endpoint) == MAX_ENDPOINTS
    assert answer.endpoints_omitted == 20
    assert answer.by_endpoint[0].name == f"tool:t{MAX_ENDPOINTS + 19:03d}"


def test_bad_hours_never_reach_the_engine() -> None:
    engine = FakeEngine()
    with pytest.raises(BadRequestError):
        get_stats(engine, config=CONFIG, hours="500", now=NOW)
    assert engine.sql == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_stats_are_cached_per_window_for_the_ttl() -> None:
    clock = FakeClock()
    cache: TTLCache[int, StatsAnswer] = TTLCache(maxsize=32, ttl=30, timer=clock)
    engine = FakeEngine(*(result(STATS_COLUMNS, STATS_ROWS) for _ in range(3)))

    first = get_stats(engine, config=CONFIG, hours="24", cache=cache, now=NOW)
    clock.now += 29.9
    second = get_stats(engine, config=CONFIG, hours=None, cache=cache, now=NOW + timedelta(seconds=29))
    assert (first.cached, second.cached) == (False, True)
    assert second.generated_at == first.generated_at  # when the numbers were computed
    assert len(engine.sql) == 1

    get_stats(engine, config=CONFIG, hours="12", cache=cache, now=NOW)  # another window: a miss
    assert len(engine.sql) == 2

    clock.now += 0.1  # 30 s after the first answer: expired
    third = get_stats(engine, config=CONFIG, hours="24", cache=cache, now=NOW + timedelta(seconds=30))
    assert third.cached is False
    assert len(engine.sql) == 3


def test_cache_evicts_the_oldest_entry_beyond_its_size() -> None:
    cache: TTLCache[int, str] = TTLCache(maxsize=2, ttl=30, timer=FakeClock())
    cache[1] = "a"
    cache[2] = "b"
    cache[3] = "c"
    assert (cache.get(1), cache.get(2), cache.get(3)) == (None, "b", "c")


def test_failed_queries_are_not_cached() -> None:
    cache: TTLCache[int, StatsAnswer] = TTLCache(maxsize=32, ttl=30, timer=FakeClock())
    engine = FakeEngine(QueryTimeoutError("slow"), result(STATS_COLUMNS, STATS_ROWS))
    with pytest.raises(QueryUnavailableError):
        get_stats(engine, config=CONFIG, hours="24", cache=cache, now=NOW)
    assert get_stats(engine, config=CONFIG, hours="24", cache=cache, now=NOW).cached is False


# ---- /profile ----------------------------------------------------------------------------------
def _profile_rows() -> list[tuple[Any, ...]]:
    summary = ("summary", 14, 10, 900.0, None, None, None, None, None, None, None)
    errors = [
        ("error", 1, None, None, None, None, None, None, None, None, "no type given"),
        (
            "error",
            2,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            "UnknownColumn",
            'column "wrokers" does not exist',
        ),
    ]
    base = datetime(2026, 11, 21, 1, 0)  # naive, as Athena returns timestamps: UTC
    recent = [
        ("recent", None, None, None, f"op-{i}", base - timedelta(minutes=i), "/sql", i % 4 != 1, 10.0 * i,
         "UnknownColumn" if i % 4 == 1 else None, None)
        for i in range(10)
    ]  # fmt: skip
    kinds = [
        ("kind", 10, 7, 450.0, *(None,) * 7, "tool"),
        ("kind", 2, 2, 900.0, *(None,) * 7, "model"),  # the model calls and the runs succeeded:
        ("kind", 2, 1, 3_000.0, *(None,) * 7, "agent"),  # neither lifts the tool success rate
    ]
    return [recent[3], summary, *errors, *recent[:3], *kinds[:1], *recent[4:], *kinds[1:]]


def test_profile_answer_shaped_from_rows() -> None:
    engine = FakeEngine(result(PROFILE_COLUMNS, _profile_rows(), engine="athena"))
    answer = get_profile(engine, config=CONFIG, agent_id="agent-7", hours=None, now=NOW)
    assert (answer.agent_id, answer.ops, answer.successes, answer.failures) == ("agent-7", 14, 7, 3)
    assert answer.success_rate == 0.7  # 7 of 10 tool calls (with the model calls and runs: 10 of 14)
    assert answer.p95_duration_ms == 450.0
    assert [(k.name, k.ops, k.failures) for k in answer.by_kind] == [  # busiest first
        ("tool", 10, 3),
        ("agent", 2, 1),
        ("model", 2, 0),
    ]
    assert [(e.error_type, e.count, e.sample_error) for e in answer.top_errors] == [
        ("UnknownColumn", 2, 'column "wrokers" does not exist'),
        (None, 1, "no type given"),
    ]
    assert [op.op_id for op in answer.recent_ops] == [f"op-{i}" for i in range(10)]
    assert answer.recent_ops[0].ts == datetime(2026, 11, 21, 1, 0, tzinfo=UTC)
    assert answer.recent_ops[1].success is False and answer.recent_ops[1].error_type == "UnknownColumn"
    assert answer.window.hours == 168
    assert answer.engine == "athena"
    assert "agent_id = 'agent-7'" in engine.sql[0]


def test_profile_of_an_agent_without_ops_is_a_404_naming_the_window() -> None:
    rows = [("summary", 0, 0, None, None, None, None, None, None, None, None)]
    with pytest.raises(NotFoundError) as caught:
        get_profile(
            FakeEngine(result(PROFILE_COLUMNS, rows)), config=CONFIG, agent_id="ghost", hours="5", now=NOW
        )
    assert "no ops were found for agent 'ghost' in the last 5 hours" in caught.value.message
    assert caught.value.status == 404


def test_profile_validates_before_querying() -> None:
    engine = FakeEngine()
    with pytest.raises(BadRequestError):
        get_profile(engine, config=CONFIG, agent_id="x" * 201, hours=None, now=NOW)
    with pytest.raises(BadRequestError):
        get_profile(engine, config=CONFIG, agent_id="agent-7", hours="0", now=NOW)
    assert engine.sql == []


# ---- query failures ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "expected", "status"),
    [
        (QueryTimeoutError("did not finish", query_id="q-9"), QueryUnavailableError, 503),
        (QueryError("Athena is throttling requests"), QueryUnavailableError, 503),
        (QueryFailedError("HIVE_BAD_DATA", query_id="q-9"), QueryEngineFailedError, 502),
        (UnsupportedSqlError("map_agg"), QueryEngineFailedError, 502),
    ],
)
def test_query_failures_map_to_503_or_502(error: Exception, expected: type[Exception], status: int) -> None:
    with pytest.raises(expected) as caught:
        get_stats(FakeEngine(error), config=CONFIG, hours="1", now=NOW)
    assert caught.value.status == status  # type: ignore[attr-defined]
    if status == 503:
        assert caught.value.headers == {"Retry-After": "7"}  # type: ignore[attr-defined]
    assert "HIVE_BAD_DATA" not in str(caught.value)  # the engine's words are logged, not answered


# ---- the SQL on a real engine (DuckDB through sqlglot, as the embedded engine runs it) ----------
ENDPOINTS = ("/e0", "tool:e1", "model:m", "/e2", "agent:a")


def test_the_sql_computes_the_right_numbers_across_midnight() -> None:
    duckdb = pytest.importorskip("duckdb")
    sqlglot = pytest.importorskip("sqlglot")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE SCHEMA opslake_test")
    con.execute(
        "CREATE TABLE opslake_test.ops (op_id VARCHAR, ts TIMESTAMPTZ, ingested_at TIMESTAMPTZ, "
        "endpoint VARCHAR, source VARCHAR, agent_id VARCHAR, success BOOLEAN, duration_ms DOUBLE, "
        "error_type VARCHAR, error VARCHAR, dt VARCHAR, hour VARCHAR, reporter_id VARCHAR, event_kind VARCHAR)"
    )
    rows = []
    for i in range(40):  # one op every 7 minutes back from NOW: 4.5 hours, across midnight
        at = NOW - timedelta(minutes=7 * i)
        failed = i % 5 == 0
        rows.append((
            f"op-{i:02d}", at, at, ENDPOINTS[i % len(ENDPOINTS)], "event" if i % 2 else "gateway",
            "o'brien" if i % 4 else "other",
            not failed, float(i), f"E{i % 2}" if failed else None, f"error {i}" if failed else None,
            at.strftime("%Y-%m-%d"), at.strftime("%H"), "mallory" if i % 3 == 0 else "obrien-key",
            "log" if i % 7 == 3 else None,
        ))  # fmt: skip
    con.executemany("INSERT INTO opslake_test.ops VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def kind(row: tuple[Any, ...]) -> str:  # the endpoint's prefix first, then the event kind
        prefix = row[3].split(":")[0]
        return prefix if prefix in ("agent", "model") else "report" if row[13] == "log" else "tool"

    window = Window.last_hours(NOW, 2)
    inside = [r for r in rows if r[2] >= window.start]

    def run(sql: str) -> QueryResult:
        cursor = con.execute(sqlglot.transpile(sql, read="athena", write="duckdb")[0])
        names = [d[0] for d in cursor.description]
        return result(names, cursor.fetchall(), engine="duckdb")

    stats = stats_from_result(run(stats_sql(CONFIG, window)), window, generated_at=NOW)
    assert stats.ops == len(inside) == 18
    tools = [r for r in inside if kind(r) == "tool"]
    assert (
        stats.failures == sum(1 for r in tools if not r[6]) and stats.successes == len(tools) - stats.failures
    )
    assert {k.name: (k.ops, k.failures) for k in stats.by_kind} == {
        name: (
            sum(1 for r in inside if kind(r) == name),
            sum(1 for r in inside if kind(r) == name and not r[6]),
        )
        for name in {kind(r) for r in inside}
    }
    assert {kind(r) for r in inside} == {"tool", "model", "agent", "report"}
    assert {b.name: b.ops for b in stats.by_source} == {
        s: sum(1 for r in inside if r[4] == s) for s in ("event", "gateway")
    }

    engine = FakeEngine(run(profile_sql(CONFIG, Window.last_hours(NOW, 2), "o'brien")))
    profile = get_profile(engine, config=CONFIG, agent_id="o'brien", hours="2", now=NOW)
    mine = [r for r in inside if r[5] == "o'brien"]
    assert profile.ops == len(mine)
    assert profile.failures == sum(1 for r in mine if not r[6] and kind(r) == "tool")
    assert [op.op_id for op in profile.recent_ops] == [r[0] for r in mine[:10]]
    assert sum(e.count for e in profile.top_errors) == sum(1 for r in mine if not r[6])  # of every kind
    # the agent_id is a claim: each recent op names the key that posted it, and the profile says
    # how many keys stand behind the claimed agent (issue 12)
    assert [op.reporter_id for op in profile.recent_ops] == [r[12] for r in mine[:10]]
    by_key = {k: sum(1 for r in mine if r[12] == k) for k in ("mallory", "obrien-key")}
    assert profile.reporter_count == 2 and min(by_key.values()) > 0
    assert [(k.reporter_id, k.ops) for k in profile.reporters] == sorted(
        by_key.items(), key=lambda kv: -kv[1]
    )


def test_an_agent_with_no_tool_call_has_no_tool_success_rate() -> None:
    rows = [r for r in _profile_rows() if not (r[0] == "kind" and r[-1] == "tool")]
    engine = FakeEngine(result(PROFILE_COLUMNS, rows, engine="athena"))
    answer = get_profile(engine, config=CONFIG, agent_id="agent-7", hours=None, now=NOW)
    assert (answer.successes, answer.failures, answer.success_rate) == (0, 0, None)  # not 0.0: no call failed
    assert {k.name for k in answer.by_kind} == {"model", "agent"}


def test_each_op_is_one_kind_and_opslakes_own_model_calls_are_model_calls() -> None:
    import duckdb

    from opslake.insights.stats import op_kind_sql

    rows = [  # (endpoint, source, event_kind) -> kind
        ("tool:lookup", "runtime", None, "tool"),
        ("/sql", "gateway", None, "tool"),
        ("model:gpt-4o", "otlp", None, "model"),
        ("llm:chat.completions", "llm", None, "model"),  # the jobs' own model-call records
        ("agent:planner", "otlp", None, "agent"),
        ("log", "gateway", "log", "report"),
    ]
    values = ", ".join(f"('{e}', '{s}', {repr(k) if k else 'NULL'})" for e, s, k, _ in rows)
    sql = f"SELECT {op_kind_sql()} FROM (VALUES {values}) AS ops(endpoint, source, event_kind)"
    assert [kind for (kind,) in duckdb.sql(sql).fetchall()] == [kind for *_, kind in rows]
