"""Athena → DuckDB transpilation: every known gap answers as Athena does or is refused by name."""

from __future__ import annotations

from typing import Any

import duckdb
import pytest

from opslake.query.base import QueryFailedError, UnsupportedSqlError
from opslake.query.dialect import Predicate, TableRef, to_duckdb

pytestmark = pytest.mark.unit


def run(sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con.sql(to_duckdb(sql).sql).fetchall()


@pytest.mark.parametrize(
    ("sql", "athena"),
    [
        ("SELECT 7 / 2", 3),
        ("SELECT -7 / 2", -3),
        ("SELECT CAST(7 AS bigint) / CAST(2 AS integer)", 3),
        ("SELECT 7.0 / 2", 3.5),
        ("SELECT CAST(7 AS double) / 2", 3.5),
        ("SELECT try_cast('3.5' AS integer)", None),
        ("SELECT try_cast('1e3' AS bigint)", None),
        ("SELECT try_cast('0x10' AS integer)", None),
        ("SELECT try_cast('-42' AS integer)", -42),
        ("SELECT try_cast(3.5 AS integer)", 4),  # a double rounds in Athena too
        ("SELECT regexp_extract('abc', 'x')", None),
        ("SELECT regexp_extract('abc', 'b(x?)', 1)", ""),  # a real empty match stays ''
        ("SELECT regexp_extract('abc', 'b(c)', 1)", "c"),
        ("SELECT date_diff('hour', TIMESTAMP '2024-01-01 10:59:00', TIMESTAMP '2024-01-01 11:01:00')", 0),
        ("SELECT date_diff('day', DATE '2024-01-01', DATE '2024-01-31')", 30),
        ("SELECT count_if(x > 1) FROM (VALUES 1, 2, 3) AS t(x)", 2),
        (
            "SELECT date_add('hour', 2, TIMESTAMP '2024-01-01 23:00:00') = TIMESTAMP '2024-01-02 01:00:00'",
            True,
        ),
        ("SELECT json_extract_scalar('{\"a\": {\"b\": 7}}', '$.a.b')", "7"),
        ("SELECT to_unixtime(TIMESTAMP '2024-01-01 00:00:00.5')", 1704067200.5),
        ("SELECT to_unixtime(from_iso8601_timestamp('2024-01-01T01:00:00Z'))", 1704070800.0),
        (
            "SELECT sum(x) FROM t CROSS JOIN UNNEST(ARRAY[1, 2, 3]) AS u(x)".replace(
                " FROM t CROSS JOIN", " FROM"
            ),
            6,
        ),
        (
            "SELECT max(r) FROM (SELECT row_number() OVER (PARTITION BY x % 2 ORDER BY x) AS r "
            "FROM (VALUES 1, 2, 3, 4, 5) AS t(x))",
            3,
        ),
        ("SELECT (current_timestamp - interval '1' hour) < current_timestamp", True),
        # Trino's replacement syntax ($n groups, \\$ a dollar, \\\\ a backslash) and every match replaced
        ("SELECT regexp_replace('a1b2c3', '([a-z])([0-9])', '$2$1')", "1a2b3c"),
        ("SELECT regexp_replace('a1', '([a-z])([0-9])', '\\$1\\\\$2')", "$1\\1"),
        ("SELECT regexp_replace('a1 b2', '([a-z])[0-9]', '$10')", "a0 b0"),  # one group: $1 then '0'
        ("SELECT regexp_replace('x.y.z', '[.]', '/')", "x/y/z"),
        ("SELECT regexp_replace('x.y.z', '[.]')", "xyz"),
        ("SELECT regexp_replace('aaa', 'a', '$0$0')", "aaaaaa"),
    ],
)
def test_rewritten_answers_match_athena(sql: str, athena: Any) -> None:
    assert run(sql) == [(athena,)]


def test_date_trunc_and_timestamp_literal_keep_fractions() -> None:
    (row,) = run(
        "SELECT date_trunc('hour', TIMESTAMP '2024-01-01 10:59:00.5'), TIMESTAMP '2024-01-01 00:00:00.5'"
    )
    assert [v.isoformat() for v in row] == ["2024-01-01T10:00:00", "2024-01-01T00:00:00.500000"]


def test_approx_percentile_is_transpiled() -> None:
    (row,) = run("SELECT approx_percentile(x, 0.5) FROM (VALUES 1, 2, 3, 4, 5) AS t(x)")
    assert row[0] == pytest.approx(3, abs=1)


def test_cast_of_non_integer_string_fails_like_athena() -> None:
    with pytest.raises(duckdb.Error, match=r"Cannot cast '3\.5' to INTEGER"):
        run("SELECT CAST('3.5' AS integer)")
    assert run("SELECT CAST(' 35' AS integer)") == [(35,)]


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT format_datetime(ts, 'yyyy-MM-dd') FROM ops", "format_datetime"),
        ("SELECT map_agg(endpoint, duration_ms) FROM ops", "map_agg"),
        ("SELECT histogram(endpoint) FROM ops", "histogram"),
        ("DROP TABLE ops", "DROP"),
        ("SHOW TABLES", "SHOW"),
        ("SELECT 1; SELECT 2", "exactly one statement"),
        ("SELECT regexp_replace('ab', '(?<n>a)', '${n}')", "group references"),
        ("SELECT regexp_replace(endpoint, 'a', endpoint) FROM ops", "literal replacement"),
    ],
)
def test_refused_constructs_are_named(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedSqlError, match=construct):
        to_duckdb(sql)


def test_regexp_replace_reaches_duckdb_in_re2_syntax_with_the_global_option() -> None:
    sql = to_duckdb("SELECT regexp_replace(endpoint, '(a)(b)', '$2<x>$1') FROM ops").sql
    assert "'\\2<x>\\1', 'g')" in sql and "$" not in sql


def test_regexp_replace_with_a_missing_group_fails_like_athena() -> None:
    with pytest.raises(QueryFailedError, match="Illegal group reference"):
        to_duckdb("SELECT regexp_replace('ab', '(a)', '$2')")


def test_syntax_error_is_a_query_failure() -> None:
    with pytest.raises(QueryFailedError, match="SYNTAX_ERROR"):
        to_duckdb("SELECT FROM WHERE (")


def test_unnamed_outputs_are_named_like_athena() -> None:
    con = duckdb.connect()
    relation = con.sql(to_duckdb("SELECT 1, 2 AS two, count(*) FROM (VALUES 1) AS t(x)").sql)
    assert relation.columns == ["_col0", "two", "_col2"]


def test_tables_exclude_ctes_and_drop_the_catalog() -> None:
    query = to_duckdb(
        "WITH recent AS (SELECT * FROM ops), agg AS (SELECT endpoint FROM recent) "
        "SELECT * FROM agg JOIN awsdatacatalog.other_db.signatures s ON true"
    )
    assert set(query.tables) == {TableRef(None, "ops"), TableRef("other_db", "signatures")}
    assert "awsdatacatalog" not in query.sql and "other_db.signatures" in query.sql


def test_predicates_equality_in_range_between() -> None:
    query = to_duckdb(
        "SELECT * FROM ops WHERE dt = '2024-01-02' AND hour IN ('01', '02') AND success "
        "AND '03' > hour AND dt BETWEEN '2024-01-01' AND '2024-01-03'"
    )
    (places,) = query.predicates.values()
    assert places == (
        (
            Predicate("dt", "=", ("2024-01-02",)),
            Predicate("hour", "in", ("01", "02")),
            Predicate("hour", "<", ("03",)),
            Predicate("dt", ">=", ("2024-01-01",)),
            Predicate("dt", "<=", ("2024-01-03",)),
        ),
    )
    ops = TableRef(None, "ops")
    assert query.keeps(ops, {"dt": "2024-01-02", "hour": "01"})
    assert not query.keeps(ops, {"dt": "2024-01-02", "hour": "03"})
    assert not query.keeps(ops, {"dt": "2024-01-01", "hour": "01"})


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ops WHERE dt = '2024-01-01' OR hour = '01'",  # OR: no pruning
        "SELECT * FROM ops WHERE dt <> '2024-01-01'",
        "SELECT * FROM ops WHERE substr(dt, 1, 4) = '2024'",
        "SELECT * FROM ops",
        # the same table read twice, once without predicates: every partition is needed
        "SELECT * FROM ops a WHERE a.dt = '2024-01-01' UNION ALL SELECT * FROM ops",
        # an unqualified dt with two tables in FROM is ambiguous
        "SELECT * FROM ops a JOIN ops b ON a.op_id = b.op_id WHERE dt = '2024-01-01'",
    ],
)
def test_predicates_that_do_not_prune(sql: str) -> None:
    query = to_duckdb(sql)
    assert query.keeps(TableRef(None, "ops"), {"dt": "2023-05-05", "hour": "23"})


def test_qualified_predicates_prune_per_alias() -> None:
    query = to_duckdb(
        "SELECT * FROM ops a JOIN ops b ON a.op_id = b.op_id WHERE a.dt = '2024-01-01' AND b.dt = '2024-01-02'"
    )
    ops = TableRef(None, "ops")
    assert query.keeps(ops, {"dt": "2024-01-01", "hour": "00"})
    assert query.keeps(ops, {"dt": "2024-01-02", "hour": "00"})
    assert not query.keeps(ops, {"dt": "2024-01-03", "hour": "00"})


def test_partition_predicates_become_a_glue_expression() -> None:
    from opslake.query.embedded import glue_partition_expression

    query = to_duckdb("SELECT count(*) FROM ops WHERE dt = '2026-11-21' AND hour IN ('09', '10') AND success")
    (ref,) = query.tables
    expression = glue_partition_expression(query.predicates.get(ref))
    assert expression is not None
    assert "dt = '2026-11-21'" in expression and "hour IN ('09', '10')" in expression
    assert glue_partition_expression(to_duckdb("SELECT count(*) FROM ops").predicates.get(ref)) is None
    assert glue_partition_expression(((Predicate("dt", "=", ("it's",)),),)) == "(dt = 'it''s')"
