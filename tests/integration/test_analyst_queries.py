"""Every analyst query in queries/ runs on the embedded engine over a lake written by the real
writer code (Parquet + Glue partitions in the local stack's moto), and answers what Python
computes independently from the seeded records. Records ingested three days ago must not count:
each query reads only the partitions of its window."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from opslake.config import load_settings
from opslake.lake.catalog import GlueCatalog
from opslake.lake.layout import ops_object_key, partition_values
from opslake.lake.parquet import ops_table, to_parquet_bytes
from opslake.models.ops import OpRecord, QueuedOp
from opslake.query.base import QueryEngine, QueryResult
from opslake.query.factory import create_engine
from opslake_local.queries import AnalystQuery, load_queries
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENDPOINTS = ("tool:query_db", "/sql", "tool:search", "scenario:fill", "model:gpt-x", "agent:planner")
ERRORS = (
    ("Timeout", "timed out"),
    ("UndefinedColumn", 'column "x" does not exist'),
    ("NotFound", "404"),
    (None, "?"),
)
SOURCES = (("runtime", "runtime-a"), ("runtime", "runtime-b"), ("gateway", "agent-3"), ("event", "runtime-a"))


# ---- the seeded lake ----------------------------------------------------------------------------
def seed_records(now: datetime) -> list[OpRecord]:
    """150 recent ops over the last ~5 hours (unique durations and times) + 12 from three days ago."""
    records = []
    for i in range(150):
        ts = now - timedelta(minutes=5) - timedelta(seconds=(i * 113) % 18_000, milliseconds=i)
        lag_ms = -1500 + i * 17 if i % 25 == 0 else (i * 389) % 9000  # a few clocks run ahead
        endpoint = ENDPOINTS[(i * 7) % len(ENDPOINTS)]
        failed = i % 3 == 0 or (endpoint == "/sql" and i % 2 == 0)
        error_type, error = ERRORS[(i // 3) % len(ERRORS)] if failed else (None, None)
        source, reporter = SOURCES[i % len(SOURCES)]
        records.append(
            _record(
                i,
                ts,
                ts + timedelta(milliseconds=lag_ms),
                endpoint,
                failed,
                error_type,
                error,
                agent=f"agent-{1 + (i * 5) % 4}",
                source=source,
                reporter=reporter,
                duration=round(5 + (i * 7919) % 2000 + i / 1000, 3),
            )
        )
    old = now - timedelta(days=3)
    for i in range(12):
        ts = old + timedelta(minutes=i)
        records.append(
            _record(
                1000 + i,
                ts,
                ts + timedelta(seconds=1),
                "tool:ancient",
                True,
                "AncientError",
                "old",
                agent="agent-old",
                source="ancient",
                reporter="runtime-old",
                duration=900_000.0 + i,
            )
        )
    return records


def _record(
    i: int,
    ts: datetime,
    ingested: datetime,
    endpoint: str,
    failed: bool,
    error_type: str | None,
    error: str | None,
    *,
    agent: str,
    source: str,
    reporter: str,
    duration: float,
) -> OpRecord:
    return OpRecord(
        op_id=f"op-{i:04d}",
        ts=ts,
        ingested_at=ingested,
        endpoint=endpoint,
        source=source,
        agent_id=agent,
        reporter_id=reporter,
        success=not failed,
        duration_ms=duration,
        error_type=error_type,
        error=error,
        session_id=f"s-{i % 7}",
    )


def write_lake(stack: LocalStack, records: list[OpRecord]) -> None:
    """What the writer does for one batch: one Parquet object per partition, Glue partitions."""
    by_partition: dict[tuple[str, str], list[OpRecord]] = defaultdict(list)
    for record in records:
        by_partition[partition_values(record.ingested_at)].append(record)
    s3 = stack.client("s3")
    env = stack.environment
    for (dt, hour), group in by_partition.items():
        queued = [QueuedOp.model_validate(r.model_dump(exclude={"ingested_at"})) for r in group]
        millis = [int(r.ingested_at.timestamp() * 1000) for r in group]
        key = ops_object_key(env.get("OPSLAKE_OPS_PREFIX", "ops/"), dt, hour, [r.op_id for r in group])
        s3.put_object(Bucket=stack.bucket, Key=key, Body=to_parquet_bytes(ops_table(queued, millis)))
    GlueCatalog(
        stack.client("glue"), env["OPSLAKE_GLUE_DATABASE"], env["OPSLAKE_OPS_TABLE"]
    ).ensure_partitions(by_partition)


@dataclass
class Lake:
    engine: QueryEngine
    records: list[OpRecord]  # those in the queries' window
    queries: dict[str, AnalystQuery]

    def run(self, name: str) -> list[dict[str, Any]]:
        result: QueryResult = self.engine.run(self.queries[name].sql)
        return [{k: _utc(v) for k, v in row.items()} for row in result.records()]


@pytest.fixture(scope="module")
def lake() -> Iterator[Lake]:
    now = datetime.now(UTC).replace(microsecond=0)
    records = seed_records(now)
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        write_lake(stack, records)
        settings = load_settings(stack.environment)
        assert settings.query_engine == "embedded"  # what LocalStack gives the functions
        engine = create_engine(settings, glue_client=stack.client("glue"))
        window_start = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
        recent = [r for r in records if r.dt >= window_start]
        assert len(recent) == 150
        yield Lake(engine, recent, load_queries(ROOT / "queries"))


# ---- helpers ------------------------------------------------------------------------------------
def _utc(value: Any) -> Any:
    """Timestamps as naive UTC datetimes (Athena's ``timestamp``), whatever the engine returns."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)


def _near_quantile(got: float, values: list[float], q: float) -> bool:
    """An approximate percentile is acceptable between the order statistics around rank q·(n-1)."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low, high = max(0, math.floor(rank) - 1), min(len(ordered) - 1, math.ceil(rank) + 1)
    return ordered[low] <= got <= ordered[high]


def _close(got: float, expected: float, places: int) -> bool:
    return abs(got - expected) <= 0.5 * 10**-places + 1e-9


def _rate(part: int, total: int) -> float:
    return part / total


def _lag_ms(r: OpRecord) -> int:
    return int((r.ingested_at - r.ts) / timedelta(milliseconds=1))


# ---- the expected answers (plain Python over the seeded records) ---------------------------------
def check_failure_rate_by_endpoint_hour(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    groups: dict[tuple[str, datetime], list[OpRecord]] = defaultdict(list)
    for r in records:
        groups[(r.endpoint, _naive(r.ts).replace(minute=0, second=0, microsecond=0))].append(r)
    expected = sorted(
        (
            {
                "endpoint": e,
                "hour_start": h,
                "ops": len(g),
                "failures": sum(not r.success for r in g),
                "failure_rate": _rate(sum(not r.success for r in g), len(g)),
            }
            for (e, h), g in groups.items()
        ),
        key=lambda row: (-row["hour_start"].timestamp(), -row["failure_rate"], row["endpoint"]),
    )
    assert [{k: v for k, v in row.items() if k != "failure_rate"} for row in rows] == [
        {k: v for k, v in row.items() if k != "failure_rate"} for row in expected
    ]
    assert all(_close(g["failure_rate"], e["failure_rate"], 4) for g, e in zip(rows, expected, strict=True))


def check_latency_p50_p95_by_endpoint(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    durations: dict[str, list[float]] = defaultdict(list)
    for r in records:
        durations[r.endpoint].append(r.duration_ms)
    assert sorted(row["endpoint"] for row in rows) == sorted(durations)
    for row in rows:
        values = durations[row["endpoint"]]
        assert row["ops"] == len(values) and row["max_ms"] == max(values)
        assert _near_quantile(row["p50_ms"], values, 0.5), (row, sorted(values))
        assert _near_quantile(row["p95_ms"], values, 0.95), (row, sorted(values))
    assert [row["p95_ms"] for row in rows] == sorted((row["p95_ms"] for row in rows), reverse=True)


def check_top_error_types(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    groups: dict[str, list[OpRecord]] = defaultdict(list)
    for r in records:
        if not r.success:
            groups[r.error_type or "(none)"].append(r)
    expected = [
        {
            "error_type": t,
            "failures": len(g),
            "endpoints": len({r.endpoint for r in g}),
            "agents": len({r.agent_id for r in g}),
            "last_seen": max(_naive(r.ts) for r in g),
        }
        for t, g in groups.items()
    ]
    expected.sort(key=lambda row: (-row["failures"], row["error_type"]))
    assert rows == expected[:20]
    assert "(none)" in groups and "AncientError" not in groups


def check_agent_success_rate(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    groups: dict[str, list[OpRecord]] = defaultdict(list)
    for r in records:
        if not r.endpoint.startswith(("agent:", "model:")):  # tool calls only: runs and model calls apart
            groups[r.agent_id].append(r)
    assert len(groups) < len({r.agent_id for r in records}) or len(records) > sum(map(len, groups.values()))
    expected = [
        {
            "agent_id": a,
            "ops": len(g),
            "successes": sum(r.success for r in g),
            "success_rate": _rate(sum(r.success for r in g), len(g)),
            "avg_ms": sum(r.duration_ms for r in g) / len(g),
        }
        for a, g in groups.items()
    ]
    expected.sort(key=lambda row: (row["success_rate"], -row["ops"], row["agent_id"]))
    assert [(r["agent_id"], r["ops"], r["successes"]) for r in rows] == [
        (e["agent_id"], e["ops"], e["successes"]) for e in expected
    ]
    for got, want in zip(rows, expected, strict=True):
        assert _close(got["success_rate"], want["success_rate"], 4) and _close(
            got["avg_ms"], want["avg_ms"], 1
        )


def check_slowest_ops(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    expected = [
        {
            "op_id": r.op_id,
            "ts": _naive(r.ts),
            "endpoint": r.endpoint,
            "agent_id": r.agent_id,
            "success": r.success,
            "duration_ms": r.duration_ms,
            "error_type": r.error_type,
        }
        for r in sorted(records, key=lambda r: (-r.duration_ms, r.op_id))[:20]
    ]
    assert rows == expected


def check_ops_by_source(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    groups: dict[tuple[str, str], list[OpRecord]] = defaultdict(list)
    for r in records:
        groups[(r.source, r.reporter_id)].append(r)
    expected = [
        {
            "source": s,
            "reporter_id": rep,
            "ops": len(g),
            "failures": sum(not r.success for r in g),
            "agents": len({r.agent_id for r in g}),
            "first_ts": min(_naive(r.ts) for r in g),
            "last_ts": max(_naive(r.ts) for r in g),
        }
        for (s, rep), g in groups.items()
    ]
    expected.sort(key=lambda row: (-row["ops"], row["source"], row["reporter_id"]))
    assert rows == expected


def check_ingestion_lag(rows: list[dict[str, Any]], records: list[OpRecord]) -> None:
    lags: dict[str, list[int]] = defaultdict(list)
    for r in records:
        lags[r.reporter_id].append(_lag_ms(r))
    assert sorted(row["reporter_id"] for row in rows) == sorted(lags)
    for row in rows:
        values = lags[row["reporter_id"]]
        assert row["ops"] == len(values)
        assert (row["min_lag_ms"], row["max_lag_ms"]) == (min(values), max(values))
        assert _near_quantile(row["p50_lag_ms"], values, 0.5), (row, sorted(values))
        assert _near_quantile(row["p95_lag_ms"], values, 0.95), (row, sorted(values))
    assert min(row["min_lag_ms"] for row in rows) < 0  # clocks running ahead show up as negative lag
    assert [row["p95_lag_ms"] for row in rows] == sorted((row["p95_lag_ms"] for row in rows), reverse=True)


CHECKS: dict[str, Callable[[list[dict[str, Any]], list[OpRecord]], None]] = {
    name[len("check_") :]: check for name, check in globals().items() if name.startswith("check_")
}


# ---- tests --------------------------------------------------------------------------------------
def test_every_query_file_has_an_expected_answer() -> None:
    assert sorted(CHECKS) == sorted(load_queries(ROOT / "queries"))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_query_answers_what_python_computes(lake: Lake, name: str) -> None:
    rows = lake.run(name)
    assert rows, f"{name} returned no rows"
    CHECKS[name](rows, lake.records)


def test_the_window_excludes_old_partitions(lake: Lake) -> None:
    everything = lake.engine.run(
        "SELECT count(*) AS n, count_if(source = 'ancient') AS old FROM ops"
    ).records()
    assert everything == [{"n": 162, "old": 12}]
    for name in ("slowest_ops", "ops_by_source"):
        assert all("ancient" not in str(row.values()) for row in lake.run(name))
