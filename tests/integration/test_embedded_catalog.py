"""The embedded engine's catalog: Glue partitions listed once and kept fresh against the files
(issue 13: listing 720 partitions cost about a second per query), and Glue views (Athena's
"Presto views") expanded with the partition predicates pushed into the table underneath.

moto's Glue in process, Parquet files on the local filesystem (as bench/bench_embedded.py).
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow.fs as pafs
import pytest
from moto import mock_aws

from opslake.lake.layout import partition_of_millis
from opslake.lake.parquet import ops_table, to_parquet_bytes
from opslake.lake.schema import glue_columns
from opslake.lake.views import ensure_view, presto_view_input, view_sql
from opslake.models.ops import QueuedOp
from opslake.query import embedded
from opslake.query.base import QueryFailedError
from opslake.query.embedded import EmbeddedEngine

pytestmark = pytest.mark.integration

DATABASE = "lake"
START = datetime(2026, 3, 1, 22, tzinfo=UTC)
FAILURES_SQL = "SELECT op_id, endpoint, error, dt, hour FROM ops WHERE NOT success"
FAILURES_COLUMNS = [
    ("op_id", "varchar"),
    ("endpoint", "varchar"),
    ("error", "varchar"),
    ("dt", "varchar"),
    ("hour", "varchar"),
]


@dataclass
class Lake:
    root: Path
    glue: Any
    calls: Counter[str] = field(default_factory=Counter)
    listings: list[str] = field(default_factory=list)
    ops: dict[tuple[str, str], int] = field(default_factory=Counter)
    files: int = 0

    def engine(self, **options: Any) -> EmbeddedEngine:
        engine = EmbeddedEngine(self.glue, pafs.LocalFileSystem(), database=DATABASE, **options)
        lister = engine._partitions.list_tree

        def counted(path: str) -> list[tuple[str, int]]:
            self.listings.append(path)
            return lister(path)

        engine._partitions.list_tree = counted  # type: ignore[method-assign]
        return engine

    def write(self, hour: datetime, n: int, *, folder: Path | None = None, register: bool = True) -> Path:
        """n ops ingested in ``hour``, half of them failures, as the writer lands them: the
        partition registered first, then one Parquet file in its Hive folder."""
        ingested = int(hour.timestamp() * 1000) + 1000
        dt, hh = partition_of_millis(ingested)
        folder = folder or self.root / "ops" / f"dt={dt}" / f"hour={hh}"
        if register:
            with contextlib.suppress(self.glue.exceptions.AlreadyExistsException):
                self.glue.create_partition(
                    DatabaseName=DATABASE,
                    TableName="ops",
                    PartitionInput={
                        "Values": [dt, hh],
                        "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{folder}/"},
                    },
                )
        ops = [
            QueuedOp(
                op_id=f"op-{dt}-{hh}-{self.files}-{i}",
                ts=hour + timedelta(seconds=i),
                endpoint="tool:search" if i % 3 else "/sql",
                source="event",
                agent_id="agent",
                reporter_id="local-agent",
                success=i % 2 == 0,
                duration_ms=1.0,
                error=None if i % 2 == 0 else "boom",
            )
            for i in range(n)
        ]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"part-{self.files}.parquet"
        path.write_bytes(to_parquet_bytes(ops_table(ops, [ingested] * n)))
        self.files += 1
        self.ops[(dt, hh)] += n
        return path


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    with mock_aws():
        glue: Any = boto3.client("glue", region_name="us-east-1")
        glue.create_database(DatabaseInput={"Name": DATABASE})
        ops: dict[str, Any] = {
            "Name": "ops",
            "TableType": "EXTERNAL_TABLE",
            "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
            "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{tmp_path}/ops/"},
        }
        glue.create_table(DatabaseName=DATABASE, TableInput=ops)
        lake = Lake(tmp_path, glue)
        for operation in ("GetPartitions", "BatchGetPartition", "GetTable"):
            glue.meta.events.register(
                f"before-call.glue.{operation}",
                lambda operation=operation, **_: lake.calls.update([operation]),
            )
        for h in range(4):  # 22:00 → 01:00 spans two days
            lake.write(START + timedelta(hours=h), 10)
        yield lake


def count(engine: EmbeddedEngine, sql: str = "SELECT count(*) FROM ops") -> int:
    return int(engine.run(sql).rows[0][0])


# -- partitions: one Glue listing, one file listing, never stale ------------------------------
def test_a_second_query_lists_neither_glue_nor_each_partition(lake: Lake) -> None:
    engine = lake.engine()
    assert count(engine) == 40
    assert lake.calls["GetPartitions"] == 1
    assert lake.listings == [f"{lake.root}/ops"]  # one tree, not one listing per partition
    lake.listings.clear()
    assert count(engine) == 40
    assert lake.calls["GetPartitions"] == 1 and lake.calls["BatchGetPartition"] == 0
    assert lake.listings == [f"{lake.root}/ops"]


def test_a_partition_added_after_a_query_is_seen_by_the_next(lake: Lake) -> None:
    engine = lake.engine()
    assert count(engine) == 40
    lake.write(START + timedelta(hours=9), 7)
    assert count(engine) == 47
    assert count(engine, "SELECT count(*) FROM ops WHERE dt = '2026-03-02' AND hour = '07'") == 7
    assert lake.calls["GetPartitions"] == 1 and lake.calls["BatchGetPartition"] >= 1
    lake.write(START + timedelta(hours=10), 5)  # pruned queries see new partitions too
    assert count(engine, "SELECT count(*) FROM ops WHERE dt = '2026-03-02' AND hour = '08'") == 5
    assert count(engine) == 52


def test_a_folder_glue_does_not_know_is_not_read(lake: Lake) -> None:
    engine = lake.engine()
    assert count(engine) == 40
    lake.write(START + timedelta(hours=12), 3, register=False)  # Athena would not read it either
    assert count(engine) == 40
    assert count(engine, "SELECT count(*) FROM ops WHERE dt = '2026-03-02'") == 20


def test_a_swapped_location_is_followed_once_the_old_files_go(lake: Lake) -> None:
    """Compaction: new files elsewhere, the Glue location swapped, the old files deleted."""
    engine = lake.engine()
    assert count(engine) == 40
    old = lake.root / "ops" / "dt=2026-03-01" / "hour=22"
    compacted = lake.root / "ops-compacted" / "dt=2026-03-01" / "hour=22" / "gen=1"
    lake.write(START, 12, folder=compacted, register=False)
    lake.glue.update_partition(
        DatabaseName=DATABASE,
        TableName="ops",
        PartitionValueList=["2026-03-01", "22"],
        PartitionInput={
            "Values": ["2026-03-01", "22"],
            "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{compacted}/"},
        },
    )
    shutil.rmtree(old)
    lake.write(START, 1)  # a late file lands in the old folder: Glue's location still rules
    result = engine.run("SELECT count(*) FROM ops WHERE dt = '2026-03-01'")
    assert result.rows == [(12 + 10,)]
    assert any("ops-compacted" in path for path in result.files_read or [])
    assert count(engine) == 12 + 30


def test_the_cache_expires_and_follows_a_table_change(lake: Lake) -> None:
    engine = lake.engine(partition_cache_s=0)
    count(engine)
    count(engine)
    assert lake.calls["GetPartitions"] == 2
    engine = lake.engine()
    count(engine)
    lake.glue.delete_partition(DatabaseName=DATABASE, TableName="ops", PartitionValues=["2026-03-01", "22"])
    table = lake.glue.get_table(DatabaseName=DATABASE, Name="ops")["Table"]
    lake.glue.update_table(
        DatabaseName=DATABASE,
        TableInput={k: table[k] for k in ("Name", "TableType", "PartitionKeys", "StorageDescriptor")},
    )
    assert count(engine) == 30  # the table's new version dropped the listing


# -- views ------------------------------------------------------------------------------------
def test_ensure_view_creates_updates_and_leaves_alone(lake: Lake) -> None:
    assert ensure_view(lake.glue, DATABASE, "failures", FAILURES_SQL, FAILURES_COLUMNS) is True
    assert ensure_view(lake.glue, DATABASE, "failures", FAILURES_SQL, FAILURES_COLUMNS) is False
    versions = lake.glue.get_table_versions(DatabaseName=DATABASE, TableName="failures")["TableVersions"]
    assert len(versions) == 1
    changed = FAILURES_SQL + " AND endpoint <> '/health'"
    assert ensure_view(lake.glue, DATABASE, "failures", changed, FAILURES_COLUMNS) is True
    table = lake.glue.get_table(DatabaseName=DATABASE, Name="failures")["Table"]
    assert view_sql(table) == changed
    assert table["TableType"] == "VIRTUAL_VIEW"
    assert table["Parameters"] == {"presto_view": "true", "comment": "Presto View"}


def test_ensure_view_replaces_the_old_failures_table(lake: Lake) -> None:
    lake.glue.create_table(
        DatabaseName=DATABASE,
        TableInput={
            "Name": "failures",
            "TableType": "EXTERNAL_TABLE",
            "PartitionKeys": [{"Name": "dt", "Type": "string"}],
            "StorageDescriptor": {"Columns": [{"Name": "op_id", "Type": "string"}], "Location": "/x/"},
        },
    )
    lake.glue.create_partition(
        DatabaseName=DATABASE,
        TableName="failures",
        PartitionInput={"Values": ["2026-03-01"], "StorageDescriptor": {"Location": "/x/dt=2026-03-01/"}},
    )
    assert ensure_view(lake.glue, DATABASE, "failures", FAILURES_SQL, FAILURES_COLUMNS) is True
    table = lake.glue.get_table(DatabaseName=DATABASE, Name="failures")["Table"]
    assert table["TableType"] == "VIRTUAL_VIEW" and view_sql(table) == FAILURES_SQL
    assert lake.glue.get_partitions(DatabaseName=DATABASE, TableName="failures")["Partitions"] == []
    assert count(lake.engine(), "SELECT count(*) FROM failures") == 20


def test_a_view_is_queried_and_prunes_the_partitions_under_it(lake: Lake) -> None:
    ensure_view(lake.glue, DATABASE, "failures", FAILURES_SQL, FAILURES_COLUMNS)
    engine = lake.engine()
    result = engine.run("SELECT endpoint, count(*) AS n FROM failures GROUP BY endpoint ORDER BY endpoint")
    assert result.rows == [("/sql", 8), ("tool:search", 12)]
    assert len(result.files_read or []) == 4
    one_hour = engine.run("SELECT count(*) FROM failures WHERE dt = '2026-03-02' AND hour = '01'")
    assert one_hour.rows == [(5,)]
    assert [Path(p).parent.name for p in one_hour.files_read or []] == ["hour=01"]
    one_day = engine.run("SELECT count(*) FROM failures WHERE dt = '2026-03-01'")
    assert one_day.rows == [(10,)] and len(one_day.files_read or []) == 2
    # the view and its table in one query: the table's own places are kept (all partitions)
    both = engine.run(
        "SELECT (SELECT count(*) FROM failures WHERE dt = '2026-03-01'), (SELECT count(*) FROM ops)"
    )
    assert both.rows == [(10, 40)] and len(both.files_read or []) == 4


def test_a_view_that_mixes_partitions_is_read_whole(lake: Lake) -> None:
    sql = "SELECT dt, hour, count(*) OVER () AS total FROM ops"
    ensure_view(
        lake.glue, DATABASE, "totals", sql, [("dt", "varchar"), ("hour", "varchar"), ("total", "bigint")]
    )
    result = lake.engine().run("SELECT DISTINCT total FROM totals WHERE dt = '2026-03-02'")
    assert result.rows == [(40,)]  # the window counts every partition, as Athena's would
    assert len(result.files_read or []) == 4


def test_views_of_views_other_databases_and_cycles(lake: Lake) -> None:
    ensure_view(lake.glue, DATABASE, "failures", FAILURES_SQL, FAILURES_COLUMNS)
    ensure_view(
        lake.glue,
        DATABASE,
        "sql_failures",
        "SELECT op_id, dt, hour FROM failures WHERE endpoint = '/sql'",
        [("op_id", "varchar"), ("dt", "varchar"), ("hour", "varchar")],
    )
    engine = lake.engine()
    result = engine.run("SELECT count(*) FROM sql_failures WHERE dt = '2026-03-02' AND hour = '00'")
    assert result.rows == [(2,)] and len(result.files_read or []) == 1
    lake.glue.create_database(DatabaseInput={"Name": "reports"})
    ensure_view(lake.glue, "reports", "daily", "SELECT dt, count(*) AS n FROM lake.ops GROUP BY dt", [])
    ensure_view(lake.glue, "reports", "mine", "SELECT * FROM daily", [])  # unqualified: reports.daily
    result = engine.run("SELECT dt, n FROM reports.mine WHERE dt = '2026-03-02'")
    assert result.rows == [("2026-03-02", 20)] and len(result.files_read or []) == 2
    lake.glue.create_table(
        DatabaseName=DATABASE, TableInput=presto_view_input("a", "SELECT * FROM b", [], schema=DATABASE)
    )
    lake.glue.create_table(
        DatabaseName=DATABASE, TableInput=presto_view_input("b", "SELECT * FROM a", [], schema=DATABASE)
    )
    with pytest.raises(QueryFailedError, match="VIEW_IS_RECURSIVE"):
        engine.run("SELECT * FROM a")


def test_a_hive_view_is_refused(lake: Lake) -> None:
    lake.glue.create_table(
        DatabaseName=DATABASE,
        TableInput={"Name": "hv", "TableType": "VIRTUAL_VIEW", "ViewOriginalText": "SELECT 1"},
    )
    with pytest.raises(QueryFailedError, match="NOT_SUPPORTED"):
        lake.engine().run("SELECT * FROM hv")


def test_a_view_whose_columns_no_longer_match_its_query_is_stale(lake: Lake) -> None:
    """Athena (Trino) checks the stored columns against the view's query on every read; so does
    the local engine, so a view the analyzer writes with wrong types fails here first."""
    columns = [("endpoint", "varchar"), ("n", "bigint")]
    sql = "SELECT endpoint, count(*) AS n FROM ops GROUP BY endpoint"
    ensure_view(lake.glue, DATABASE, "per_endpoint", sql, columns)
    assert len(lake.engine().run("SELECT * FROM per_endpoint").rows) == 2
    ensure_view(lake.glue, DATABASE, "per_endpoint", sql, [("endpoint", "varchar"), ("n", "varchar")])
    with pytest.raises(QueryFailedError, match=r"VIEW_IS_STALE: .*column \[n\] of type bigint"):
        lake.engine().run("SELECT * FROM per_endpoint")
    ensure_view(lake.glue, DATABASE, "per_endpoint", sql, [("endpoint", "varchar")])
    with pytest.raises(QueryFailedError, match=r"VIEW_IS_STALE: .*column count \(1\)"):
        lake.engine().run("SELECT * FROM per_endpoint")
    narrow = "SELECT endpoint, CAST(count(*) AS integer) AS n, CAST(NULL AS varchar) AS x FROM ops GROUP BY 1"
    ensure_view(lake.glue, DATABASE, "per_endpoint", narrow, [*columns, ("x", "varchar(10)")])
    assert len(lake.engine().run("SELECT * FROM per_endpoint").rows) == 2  # coercible, as in Trino


def test_a_view_over_a_derived_table_prunes_and_is_transpiled_once(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failures view computes its template once in a subquery: pruning must see through it."""
    sql = (
        "SELECT op_id, upper(template) AS template, dt, hour "
        "FROM (SELECT op_id, endpoint || ':' || error AS template, dt, hour FROM ops WHERE NOT success) AS f"
    )
    columns = [("op_id", "varchar"), ("template", "varchar"), ("dt", "varchar"), ("hour", "varchar")]
    ensure_view(lake.glue, DATABASE, "templates", sql, columns)
    engine = lake.engine()
    transpiled: list[str] = []
    original = embedded.to_duckdb
    monkeypatch.setattr(embedded, "to_duckdb", lambda text: transpiled.append(text) or original(text))
    for _ in range(2):
        result = engine.run(
            "SELECT template, count(*) FROM templates WHERE dt = '2026-03-02' GROUP BY 1 ORDER BY 1"
        )
        assert result.rows == [("/SQL:BOOM", 4), ("TOOL:SEARCH:BOOM", 6)]
        assert len(result.files_read or []) == 2
    assert transpiled.count(sql) == 1


def test_fragments_are_reused_until_their_file_changes(lake: Lake) -> None:
    """A scanned fragment keeps its footer, so the next query reuses it (one S3 GET per file
    instead of two); a file rewritten in place (new size or mtime) is read anew."""
    engine = lake.engine()
    assert count(engine) == 40
    cached = dict(engine._fragments)
    assert len(cached) == 4
    assert count(engine) == 40
    assert engine._fragments == cached
    path = next(iter(sorted((lake.root / "ops" / "dt=2026-03-01" / "hour=22").glob("*.parquet"))))
    rewritten = lake.write(START, 25, register=False)
    path.write_bytes(rewritten.read_bytes())
    rewritten.unlink()
    assert count(engine) == 25 + 30
