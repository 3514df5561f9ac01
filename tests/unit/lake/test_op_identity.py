"""One op is one key's op_id (issue 12): the shared Arrow helper, and the analyzer's dedupe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from opslake.analysis.reporters import ReporterTrust
from opslake.jobs.analyzer import aggregates_sql
from opslake.lake.opkey import OP_KEY, first_of_each_key
from opslake.models.window import Window
from opslake.query.dialect import to_duckdb


def test_first_of_each_key_marks_a_new_key_when_any_key_column_changes() -> None:
    rows = pa.table(
        {
            "reporter_id": ["b", "a", "a", "b", "a"],
            "op_id": ["x", "x", "y", "x", "x"],
            "n": [0, 1, 2, 3, 4],
        }
    )
    order = pc.sort_indices(
        rows, sort_keys=[("reporter_id", "ascending"), ("op_id", "ascending"), ("n", "ascending")]
    )
    first = first_of_each_key(rows, OP_KEY, order)
    kept = rows.take(pc.filter(order, first)).to_pylist()
    assert [(r["reporter_id"], r["op_id"], r["n"]) for r in kept] == [
        ("a", "x", 1),
        ("a", "y", 2),
        ("b", "x", 0),
    ]
    assert first_of_each_key(rows, OP_KEY, pa.array([], pa.int64())).to_pylist() == []
    assert first_of_each_key(rows, OP_KEY, pa.array([3], pa.int64())).to_pylist() == [True]


def test_the_analyzer_keeps_one_failure_per_key_and_op_id() -> None:
    """The engine dedupes per (reporter_id, op_id) (issue 13: in the aggregate SQL): another key's
    op with the same op_id is counted, a copy of the same key's op is not."""
    at = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        "CREATE TABLE ops AS SELECT * FROM (VALUES"
        " ('mallory', 'run-1', TIMESTAMP '2026-11-21 08:00:01'), ('bob', 'run-1', TIMESTAMP '2026-11-21 08:00:02'),"
        " ('bob', 'run-1', TIMESTAMP '2026-11-21 08:00:03')) AS t(reporter_id, op_id, ingested_at)"
    )
    con.execute(
        "CREATE TABLE failures AS SELECT reporter_id, op_id, ingested_at, ingested_at AS ts, '/sql' AS endpoint,"
        " 'agent' AS agent_id, false AS success, 'boom' AS error, CAST(NULL AS VARCHAR) AS error_type,"
        " CAST(NULL AS VARCHAR) AS input_summary, '2026-11-21' AS dt, '08' AS hour FROM ops"
    )
    window = Window(at, at + timedelta(hours=1))
    sql = aggregates_sql(
        "failures", window, read_until=window.end, count_until=window.end, trust=ReporterTrust()
    )
    (row,) = con.sql(to_duckdb(sql).sql).fetchall()
    assert row[5] == 2  # count
