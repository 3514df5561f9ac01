"""The embedded engine against a moto LocalStack: a lake written by the real writer code
(ops_table/to_parquet_bytes + GlueCatalog), queried in Athena SQL, checked against Python."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow.dataset as ds
import pytest

from opslake.config import load_settings
from opslake.lake.catalog import GlueCatalog
from opslake.lake.layout import ops_object_key, partition_of_millis
from opslake.lake.parquet import ops_table, to_parquet_bytes
from opslake.models.ops import QueuedOp
from opslake.query import embedded
from opslake.query.base import QueryFailedError, QueryTimeoutError, UnsupportedSqlError
from opslake.query.embedded import MAX_SEQUENCE_ENTRIES, EmbeddedEngine
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = pytest.mark.integration

ENDPOINTS = ["tool:query_db", "tool:search", "/sql", "tool:fetch", "scenario:fill"]
CITIES = ["paris", "lima", "oslo", None]
START = datetime(2026, 3, 1, 21, tzinfo=UTC)  # 21:00 → 02:00 spans two days
HOURS = 5
PER_HOUR = 600


@dataclass
class Op:
    op: QueuedOp
    ingested_ms: int
    dt: str
    hour: str


@dataclass
class Lake:
    stack: LocalStack
    engine: EmbeddedEngine
    ops: list[Op]
    keys: dict[tuple[str, str], list[str]]


def _generate() -> list[Op]:
    rng = random.Random(7)
    ops = []
    for h in range(HOURS):
        for i in range(PER_HOUR):
            ts = START + timedelta(hours=h, seconds=rng.randrange(3600))
            endpoint = rng.choice(ENDPOINTS)
            city = rng.choice(CITIES)
            op = QueuedOp(
                op_id=f"op-{h}-{i}",
                ts=ts,
                endpoint=endpoint,
                source="event",
                agent_id=f"agent-{i % 3}",
                reporter_id="local-agent",
                success=rng.random() > 0.2 + 0.1 * ENDPOINTS.index(endpoint),
                duration_ms=round(rng.expovariate(1 / (50 + 40 * ENDPOINTS.index(endpoint))), 3),
                attributes={"city": city} if city else {},
            )
            ingested_ms = int((ts + timedelta(milliseconds=rng.randrange(500))).timestamp() * 1000)
            ingested_ms = min(ingested_ms, int((START + timedelta(hours=h + 1)).timestamp() * 1000) - 1)
            dt, hour = partition_of_millis(ingested_ms)
            ops.append(Op(op, ingested_ms, dt, hour))
    return ops


@pytest.fixture(scope="module")
def lake() -> Iterator[Lake]:
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        settings = load_settings()
        ops = _generate()
        by_partition: dict[tuple[str, str], list[Op]] = defaultdict(list)
        for op in ops:
            by_partition[(op.dt, op.hour)].append(op)
        s3 = stack.client("s3")
        keys: dict[tuple[str, str], list[str]] = {}
        for (dt, hour), members in sorted(by_partition.items()):
            half = len(members) // 2
            for chunk in (members[:half], members[half:]):  # two files per partition
                key = ops_object_key(settings.ops_prefix, dt, hour, [o.op.op_id for o in chunk])
                body = to_parquet_bytes(ops_table([o.op for o in chunk], [o.ingested_ms for o in chunk]))
                s3.put_object(Bucket=settings.lake_bucket, Key=key, Body=body)
                keys.setdefault((dt, hour), []).append(key)
        GlueCatalog(stack.client("glue"), settings.glue_database, settings.ops_table).ensure_partitions(
            by_partition
        )
        engine = EmbeddedEngine.from_settings(settings)
        yield Lake(stack, engine, ops, keys)


def _all_keys(lake: Lake) -> list[str]:
    return sorted(f"{lake.stack.bucket}/{k}" for keys in lake.keys.values() for k in keys)


def test_counts_by_endpoint(lake: Lake) -> None:
    result = lake.engine.run("SELECT endpoint, count(*) AS n FROM ops GROUP BY endpoint ORDER BY endpoint")
    assert [(c.name, c.type) for c in result.columns] == [("endpoint", "varchar"), ("n", "bigint")]
    expected = sorted(Counter(o.op.endpoint for o in lake.ops).items())
    assert result.rows == expected
    assert result.files_read == _all_keys(lake)
    assert result.bytes_scanned and result.bytes_scanned > 0


def test_failure_rate_per_hour_and_integer_division(lake: Lake) -> None:
    result = lake.engine.run(
        "SELECT dt, hour, count_if(NOT success) / count(*) AS int_rate, "
        "CAST(count_if(NOT success) AS double) / count(*) AS rate FROM ops GROUP BY dt, hour ORDER BY 1, 2"
    )
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for o in lake.ops:
        groups[(o.dt, o.hour)].append(o.op.success)
    expected = [
        (dt, hour, 0, pytest.approx(sum(not s for s in v) / len(v)))
        for (dt, hour), v in sorted(groups.items())
    ]
    assert result.rows == expected
    assert len({r[0] for r in result.rows}) == 2
    assert [c.type for c in result.columns] == ["varchar", "varchar", "bigint", "double"]


def test_approx_percentile_by_endpoint(lake: Lake) -> None:
    result = lake.engine.run(
        "SELECT endpoint, approx_percentile(duration_ms, 0.95) AS p95 FROM ops GROUP BY endpoint"
    )
    durations: dict[str, list[float]] = defaultdict(list)
    for o in lake.ops:
        durations[o.op.endpoint].append(o.op.duration_ms)
    assert len(result.rows) == len(ENDPOINTS)
    for endpoint, p95 in result.rows:
        ranked = sorted(durations[endpoint])
        low, high = ranked[int(0.93 * len(ranked))], ranked[int(0.97 * len(ranked))]
        assert low <= p95 <= high, endpoint  # an approximate percentile: within ±2 rank percent


def test_date_trunc_count_if_and_map_subscript(lake: Lake) -> None:
    result = lake.engine.run(
        "SELECT date_trunc('hour', ts) AS h, attributes['city'] AS city, count(*) AS n, "
        "count_if(success) AS ok FROM ops GROUP BY 1, 2 ORDER BY 1, 2 NULLS LAST"
    )
    expected: dict[tuple[datetime, str | None], list[int]] = defaultdict(lambda: [0, 0])
    for o in lake.ops:
        key = (o.op.ts.replace(minute=0, second=0, microsecond=0, tzinfo=None), o.op.attributes.get("city"))
        expected[key][0] += 1
        expected[key][1] += o.op.success
    ordered = sorted(expected.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or ""))
    assert result.rows == [(h, city, n, ok) for (h, city), (n, ok) in ordered]
    assert result.columns[0].type == "timestamp"


def test_order_by_limit(lake: Lake) -> None:
    result = lake.engine.run(
        "SELECT endpoint, max(duration_ms) AS worst FROM ops WHERE NOT success "
        "GROUP BY endpoint ORDER BY worst DESC LIMIT 2"
    )
    worst: dict[str, float] = {}
    for o in lake.ops:
        if not o.op.success:
            worst[o.op.endpoint] = max(worst.get(o.op.endpoint, 0.0), o.op.duration_ms)
    assert result.rows == sorted(worst.items(), key=lambda kv: -kv[1])[:2]


def test_partition_predicates_prune_files(lake: Lake) -> None:
    (dt, hour), keys = sorted(lake.keys.items())[1]
    result = lake.engine.run(f"SELECT count(*) FROM ops WHERE dt = '{dt}' AND hour = '{hour}'")
    assert result.columns[0].name == "_col0"
    assert result.rows == [(sum(1 for o in lake.ops if (o.dt, o.hour) == (dt, hour)),)]
    assert result.files_read == sorted(f"{lake.stack.bucket}/{k}" for k in keys)
    day = lake.ops[-1].dt
    result = lake.engine.run(f"SELECT count(*) FROM ops WHERE dt >= '{day}'")
    assert result.rows == [(sum(1 for o in lake.ops if o.dt == day),)]
    assert len(result.files_read or []) < len(_all_keys(lake))


def test_unknown_column_is_named(lake: Lake) -> None:
    with pytest.raises(QueryFailedError, match="Column 'wrokers' cannot be resolved"):
        lake.engine.run("SELECT wrokers FROM ops")


def test_unknown_table(lake: Lake) -> None:
    with pytest.raises(QueryFailedError, match=r"Table '.*\.no_such_table' does not exist"):
        lake.engine.run("SELECT * FROM no_such_table")


def test_try_cast_and_division_over_lake_values(lake: Lake) -> None:
    result = lake.engine.run(
        "SELECT try_cast('3.5' AS integer) AS a, try_cast(hour AS integer) AS h, 7 / 2 AS q, -7 / 2 AS r, "
        "regexp_extract(endpoint, 'zzz') AS none FROM ops WHERE dt = '2026-03-02' AND hour = '01' LIMIT 1"
    )
    assert result.rows == [(None, 1, 3, -3, None)]


def test_glue_table_without_partitions_is_empty(lake: Lake) -> None:
    glue = lake.stack.client("glue")
    database = lake.engine.database
    table = glue.get_table(DatabaseName=database, Name="ops")["Table"]
    glue.create_table(
        DatabaseName=database,
        TableInput={
            "Name": "ops_empty",
            "PartitionKeys": table["PartitionKeys"],
            "StorageDescriptor": {
                **table["StorageDescriptor"],
                "Location": f"s3://{lake.stack.bucket}/empty/",
            },
        },
    )
    result = lake.engine.run(f"SELECT endpoint, dt FROM {database}.ops_empty")
    assert result.rows == [] and [c.name for c in result.columns] == ["endpoint", "dt"]
    assert result.files_read == [] and result.bytes_scanned == 0


# ---- limits (issue 12): what anyone's SQL may make the engine do ------------------------------


def test_a_long_query_is_interrupted_at_its_timeout(lake: Lake) -> None:
    # 3,000 rows cubed: hours of work; the timer interrupts DuckDB and the connection is closed
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match="time limit of 1 s"):
        lake.engine.run("SELECT count(*) FROM ops a CROSS JOIN ops b CROSS JOIN ops c", timeout_s=1)
    assert time.monotonic() - started < 20  # it stopped: left running, it would take hours
    assert lake.engine.run("SELECT count(*) AS n FROM ops").rows == [(len(lake.ops),)]  # still serving


def test_a_huge_sequence_is_refused_like_athena_before_it_is_built(lake: Lake) -> None:
    # DuckDB builds a list in one scalar call that interrupt() cannot stop and memory_limit does not
    # count (150M entries: 79 s and 14 GB); Athena refuses more than 10,000 entries, and so do we
    with pytest.raises(QueryFailedError, match=r"INVALID_FUNCTION_ARGUMENT: .*10000 entries"):
        lake.engine.run("SELECT cardinality(sequence(1, 20000000))", timeout_s=1)
    with pytest.raises(QueryFailedError, match="INVALID_FUNCTION_ARGUMENT"):
        lake.engine.run("SELECT cardinality(sequence(20000000, 1, -1))", timeout_s=1)
    with pytest.raises(QueryFailedError, match="INVALID_FUNCTION_ARGUMENT"):
        lake.engine.run("SELECT sequence(date '2026-01-01', date '2099-01-01', interval '1' day)")
    for builder in ("repeat('x', 2000000000)", "lpad('', 1000000000, 'x')", "rpad('a', 1000000000, 'x')"):
        with pytest.raises(QueryFailedError, match="INVALID_FUNCTION_ARGUMENT"):
            lake.engine.run(f"SELECT {builder} AS built", timeout_s=1)
    assert lake.engine.run("SELECT repeat('ab', 2), lpad('7', 3, '0'), rpad('ab', 1, '-')").rows == [
        ("abab", "007", "a")
    ]
    ((n, stepped, days),) = lake.engine.run(
        f"SELECT cardinality(sequence(1, {MAX_SEQUENCE_ENTRIES})), sequence(10, 1, -4), "
        "cardinality(sequence(date '2026-01-01', date '2026-01-31', interval '1' day))"
    ).rows
    assert (n, stepped, days) == (MAX_SEQUENCE_ENTRIES, [10, 6, 2], 31)


def test_functions_athena_does_not_have_are_not_found_like_in_athena(lake: Lake) -> None:
    # DuckDB's own functions: some build gigabytes in one uninterruptible call (list_resize of 1e8
    # entries: 19 s, 7 GB; printf or a {:>n} format width: any size of string), some read the host
    for call in (
        "range(20000000)",
        "list_resize([1], 100000000)",
        "printf('%0999999999d', 1)",
        "getenv('HOME')",
    ):
        name = call.split("(")[0]
        with pytest.raises(QueryFailedError, match=f"FUNCTION_NOT_FOUND: Function '{name}' not registered"):
            lake.engine.run(f"SELECT {call} AS built", timeout_s=1)
    with pytest.raises(UnsupportedSqlError, match="format is not supported"):
        lake.engine.run("SELECT format('{:>999999999}', 'x')", timeout_s=1)
    # Athena functions sqlglot does not model still run when DuckDB has them
    assert lake.engine.run("SELECT url_decode('a%20b')").rows == [("a b",)]


def test_connections_are_bounded_and_locked() -> None:
    engine = EmbeddedEngine(None, None, database="opslake", memory_limit_mb=256, threads=1)
    con = engine.connect()
    try:
        (settings,) = con.sql(
            "SELECT current_setting('memory_limit'), current_setting('threads'), "
            "current_setting('enable_external_access'), current_setting('autoinstall_known_extensions'), "
            "current_setting('autoload_known_extensions'), current_setting('lock_configuration')"
        ).fetchall()
        assert settings == ("244.1 MiB", 1, False, False, False, True)  # 256 MB in DuckDB's MiB
        for statement in ("SET memory_limit = '10GB'", "SET threads = 64", "SET lock_configuration = false",
                          "SET enable_external_access = true", "RESET memory_limit"):  # fmt: skip
            with pytest.raises(duckdb.Error, match="configuration has been locked"):
                con.execute(statement)
        for statement in ("INSTALL httpfs", "LOAD httpfs", "SELECT * FROM read_csv('/etc/passwd')",
                          "SELECT * FROM read_parquet('s3://lake/ops/x.parquet')", "ATTACH '/tmp/x.db'"):  # fmt: skip
            with pytest.raises(duckdb.Error, match="disabled"):
                con.execute(statement)
    finally:
        con.close()


def test_the_settings_reach_the_engine() -> None:
    settings = load_settings({"OPSLAKE_EMBEDDED_MEMORY_LIMIT_MB": "512", "OPSLAKE_EMBEDDED_THREADS": "3"})
    engine = EmbeddedEngine.from_settings(settings, glue_client=object())
    assert (engine.memory_limit_mb, engine.threads) == (512, 3)
    defaults = load_settings({})
    assert (defaults.embedded_memory_limit_mb, defaults.embedded_threads) == (1024, 2)


def test_scans_read_ahead_within_bounds_and_keep_projection(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB asks the registered dataset for its scanner; pyarrow's defaults would decode 4 files and 16
    batches ahead (memory growing with the lake's file size). The engine's scanner gets the bounds,
    read ahead by file size, and keeps DuckDB's projection pushdown."""
    seen: list[dict[str, object]] = []

    class Recording(ds.FileSystemDataset):
        def scanner(self, *args: object, **kwargs: object) -> ds.Scanner:
            seen.append(kwargs)
            return super().scanner(*args, **kwargs)

    class Spied(embedded._BoundedScanDataset, Recording):
        pass

    monkeypatch.setattr(embedded, "_BoundedScanDataset", Spied)
    query = "SELECT endpoint, count(*) FROM ops GROUP BY endpoint"
    expected = sorted(Counter(o.op.endpoint for o in lake.ops).items())
    assert sorted(lake.engine.run(query).rows) == expected
    (small,) = seen
    assert small["columns"] == ["endpoint"]
    # the lake's files are kilobytes: as many files ahead as pyarrow would, one batch within a file
    assert (small["fragment_readahead"], small["batch_readahead"]) == (embedded.MAX_FRAGMENT_READAHEAD, 1)
    monkeypatch.setattr(embedded, "SCAN_READAHEAD_BYTES", 1)  # every file now counts as large
    assert sorted(lake.engine.run(query).rows) == expected
    assert (seen[1]["fragment_readahead"], seen[1]["batch_readahead"]) == (1, 1)


def test_files_read_ahead_shrink_as_files_grow() -> None:
    mib = 1024 * 1024
    assert embedded.fragment_readahead([]) == embedded.MAX_FRAGMENT_READAHEAD
    assert embedded.fragment_readahead([40_000, 700_000]) == 4
    assert embedded.fragment_readahead([2 * mib, 10]) == 2
    assert embedded.fragment_readahead([5 * mib]) == 1
    assert embedded.fragment_readahead([128 * mib]) == 1
