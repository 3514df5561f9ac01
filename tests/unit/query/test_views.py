"""Glue views as Athena writes them (opslake.lake.views) and the view analysis the embedded
engine does before it pushes partition predicates through a view (opslake.query.viewsql)."""

from __future__ import annotations

import base64
import json
import sys

import pytest

from opslake.lake.views import ViewError, hive_type, presto_view_input, view_definition, view_sql
from opslake.query.dialect import Predicate
from opslake.query.partitions import hive_subtrees
from opslake.query.viewsql import coercible, joined_tables, passthrough_columns, push_down, qualify_tables

SQL = "SELECT endpoint, error, dt, hour FROM ops WHERE NOT success"
COLUMNS = [("endpoint", "varchar"), ("error", "varchar"), ("dt", "varchar"), ("hour", "varchar")]


def test_table_input_is_what_athena_writes_for_create_view() -> None:
    table = presto_view_input("failures", SQL, COLUMNS, schema="opslake")
    assert table["Name"] == "failures"
    assert table["TableType"] == "VIRTUAL_VIEW"
    assert table["Parameters"] == {"presto_view": "true", "comment": "Presto View"}
    assert table["ViewExpandedText"] == "/* Presto View */"
    text = table["ViewOriginalText"]
    assert text.startswith("/* Presto View: ") and text.endswith(" */")
    decoded = json.loads(base64.b64decode(text[len("/* Presto View: ") : -len(" */")]))
    assert decoded == {
        "originalSql": SQL,
        "catalog": "awsdatacatalog",
        "schema": "opslake",
        "columns": [{"name": n, "type": t} for n, t in COLUMNS],
    }
    assert table["StorageDescriptor"]["Columns"] == [{"Name": n, "Type": "string"} for n, _ in COLUMNS]
    assert view_sql(table) == SQL
    assert view_definition(table) == decoded


def test_view_text_of_other_tables_and_damaged_views() -> None:
    assert view_sql({"Name": "ops", "TableType": "EXTERNAL_TABLE"}) is None
    hive_view = {"Name": "v", "TableType": "VIRTUAL_VIEW", "ViewOriginalText": "SELECT 1"}
    assert view_sql(hive_view) is None  # a Hive view: not Athena's format
    damaged = presto_view_input("v", SQL, COLUMNS) | {"ViewOriginalText": "/* Presto View: !!! */"}
    with pytest.raises(ViewError):
        view_sql(damaged)


@pytest.mark.parametrize(
    ("trino", "hive"),
    [
        ("varchar", "string"),
        ("varchar(12)", "string"),
        ("integer", "int"),
        ("real", "float"),
        ("timestamp(3)", "timestamp"),
        ("decimal(10, 2)", "decimal(10,2)"),
        ("array(varchar)", "array<string>"),
        ("map(varchar, bigint)", "map<string,bigint>"),
        ("row(name varchar, n bigint)", "struct<name:string,n:bigint>"),
        ("array(row(a map(varchar, array(double))))", "array<struct<a:map<string,array<double>>>>"),
    ],
)
def test_hive_types(trino: str, hive: str) -> None:
    assert hive_type(trino) == hive


@pytest.mark.parametrize(
    ("sql", "passed"),
    [
        (SQL, {"dt", "hour"}),
        ("SELECT * FROM ops WHERE NOT success", {"dt", "hour"}),
        ("SELECT o.*, 1 AS one FROM ops AS o", {"dt", "hour"}),
        ("SELECT endpoint, o.dt AS dt FROM ops o", {"dt"}),
        ("SELECT endpoint, dt AS day, hour FROM ops", {"hour"}),  # renamed: not the same column
        ("SELECT dt, hour, count(*) AS n FROM ops GROUP BY dt, hour", {"dt", "hour"}),
        ("SELECT dt, hour, count(*) AS n FROM ops GROUP BY dt, hour, endpoint", {"dt", "hour"}),
        ("SELECT dt, max(hour) AS hour FROM ops GROUP BY dt", {"dt"}),
        ("SELECT dt, hour FROM ops LIMIT 10", set()),
        ("SELECT dt, hour, row_number() OVER (ORDER BY ts) AS n FROM ops", set()),
        ("SELECT a.dt, a.hour FROM ops a JOIN ops b ON a.op_id = b.op_id", set()),
        ("SELECT dt, hour FROM ops UNION ALL SELECT dt, hour FROM ops", set()),
        ("SELECT dt, hour FROM ops WHERE op_id IN (SELECT op_id FROM ops WHERE dt = 'x')", set()),
        ("WITH x AS (SELECT * FROM ops) SELECT dt, hour FROM x", {"dt", "hour"}),
        ("WITH x AS (SELECT dt FROM ops) SELECT dt, hour FROM x", {"dt"}),
        ("WITH x AS (SELECT dt, hour FROM ops LIMIT 5) SELECT dt, hour FROM x", set()),
        (
            "SELECT t, dt, hour FROM (SELECT upper(error) AS t, dt, hour FROM ops WHERE NOT success)",
            {"dt", "hour"},
        ),
        ("SELECT x.dt, hour FROM (SELECT dt, hour AS h, hour FROM ops) AS x", {"dt", "hour"}),
        ("SELECT dt, hour FROM (SELECT dt, hour, rank() OVER (ORDER BY ts) AS r FROM ops)", set()),
        ("SELECT dt, hour, count(*) OVER () AS n FROM (SELECT dt, hour FROM ops)", set()),
        ("SELECT dt, hour FROM (SELECT dt, hour FROM ops UNION ALL SELECT dt, hour FROM ops)", set()),
        # a LEFT JOIN that looks values up keeps every left row: the left side's own dt passes
        (
            "SELECT f.op_id, coalesce(m.s, f.s) AS s, f.dt, f.hour "
            "FROM (SELECT op_id, s, dt, hour FROM ops GROUP BY op_id, s, dt, hour) f LEFT JOIN t m ON m.k = f.s",
            {"dt", "hour"},
        ),
        ("SELECT o.* FROM ops o LEFT OUTER JOIN t m ON m.k = o.op_id", {"dt", "hour"}),
        ("SELECT o.dt, m.hour AS hour FROM ops o LEFT JOIN t m ON m.k = o.op_id", {"dt"}),
        ("SELECT dt, hour FROM ops o LEFT JOIN t m ON m.k = o.op_id", set()),  # whose dt? (t's?)
        ("SELECT * FROM ops o LEFT JOIN t m ON m.k = o.op_id", set()),
        ("SELECT o.dt, o.hour FROM ops o JOIN t m ON m.k = o.op_id", set()),
        ("SELECT o.dt, o.hour FROM ops o RIGHT JOIN t m ON m.k = o.op_id", set()),
        ("SELECT o.dt, o.hour FROM ops o LEFT JOIN (SELECT * FROM t) m ON m.k = o.op_id", set()),
        ("WITH c AS (SELECT * FROM t) SELECT o.dt, o.hour FROM ops o LEFT JOIN c ON c.k = o.op_id", set()),
        ("SELECT o.dt FROM ops o LEFT JOIN t m ON m.k IN (SELECT op_id FROM ops)", set()),
    ],
)
def test_passthrough_columns(sql: str, passed: set[str]) -> None:
    assert passthrough_columns(sql) == passed


def test_joined_tables_are_the_ones_a_view_looks_values_up_in() -> None:
    sql = "SELECT f.dt FROM (SELECT dt FROM ops) f LEFT JOIN lake.t m ON m.k = f.dt LEFT JOIN u ON u.k = f.dt"
    assert joined_tables(sql) == {("lake", "t"), ("", "u")}
    assert joined_tables("SELECT dt FROM ops") == frozenset()


def test_push_down_ands_outer_places_into_the_views_own() -> None:
    day = Predicate("dt", "=", ("2026-01-02",))
    hour = Predicate("hour", ">=", ("10",))
    inner = ((Predicate("dt", ">=", ("2026-01-01",)),),)
    outer = ((day, hour), (Predicate("dt", "=", ("2026-01-05",)),))
    assert push_down(outer, inner, frozenset({"dt"})) == (
        (inner[0][0], day),
        (inner[0][0], Predicate("dt", "=", ("2026-01-05",))),
    )
    assert push_down(outer, inner, frozenset()) == inner
    assert push_down(outer, ((),), frozenset({"dt", "hour"})) == ((day, hour), (outer[1][0],))


def test_qualify_tables_leaves_ctes_and_qualified_tables() -> None:
    sql = qualify_tables("WITH x AS (SELECT * FROM ops) SELECT * FROM x JOIN other.t ON true", "lake")
    assert "lake.ops" in sql and "lake.x" not in sql and "other.t" in sql


def test_hive_subtrees_follow_the_equalities_on_the_leading_keys() -> None:
    keys = ["dt", "hour"]
    day = Predicate("dt", "=", ("2026-01-02",))
    assert hive_subtrees("b/ops", keys, None) == ["b/ops"]
    assert hive_subtrees("b/ops", keys, ((day,),)) == ["b/ops/dt=2026-01-02"]
    assert hive_subtrees("b/ops", keys, ((day, Predicate("hour", "in", ("01", "02"))),)) == [
        "b/ops/dt=2026-01-02/hour=01",
        "b/ops/dt=2026-01-02/hour=02",
    ]
    assert hive_subtrees("b/ops", keys, ((Predicate("hour", "=", ("01",)),),)) == ["b/ops"]
    assert hive_subtrees("b/ops", keys, ((day,), ())) == ["b/ops"]
    assert hive_subtrees("b/ops", keys, ((Predicate("dt", "=", ("a/b",)),),)) == ["b/ops"]
    nested = ((day,), (day, Predicate("hour", "=", ("01",))))
    assert hive_subtrees("b/ops", keys, nested) == ["b/ops/dt=2026-01-02"]


def test_coercions_a_stored_view_column_allows() -> None:
    assert coercible("integer", "bigint") and coercible("varchar", "varchar(10)")
    assert coercible("timestamp", "timestamp(3)") and coercible("unknown", "array(varchar)")
    assert coercible("real", "double") and coercible("bigint", "double")
    assert coercible("array(varchar(3))", "array(varchar)")
    assert not coercible("bigint", "integer") and not coercible("varchar", "bigint")
    assert not coercible("double", "bigint")


def test_a_deeply_nested_view_parses_at_the_default_recursion_limit() -> None:
    """The failures view's masking nests ~60 regexp_replace calls: deeper than sqlglot parses
    within Python's default recursion limit (1000), which is all a fresh process has."""
    expression = "error"
    for i in range(100):
        expression = f"regexp_replace({expression}, '[0-9]{{{i % 9 + 1}}}', '#')"
    sql = f"SELECT {expression} AS masked, dt, hour FROM ops"
    original = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(1000)
        assert passthrough_columns(sql) == {"dt", "hour"}
        sys.setrecursionlimit(1000)
        assert "lake.ops" in qualify_tables(sql, "lake")
    finally:
        sys.setrecursionlimit(original)
