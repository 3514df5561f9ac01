"""Compaction against moto: merge + dedupe + verify + Glue swap + grace deletes, crash after every
step and rerun, readers during compaction, two compactors, faults, and partitions left alone.

The embedded engine reads the in-process moto S3 through a small pyarrow filesystem over boto3,
so every check of "exactly once" is the same SQL an analyst would run.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from opslake.config import load_settings
from opslake.lake.catalog import GlueCatalog
from opslake.lake.compaction import CRASH_POINTS, CompactionOptions, Compactor, Journal
from opslake.lake.layout import ops_object_key
from opslake.lake.parquet import ROW_GROUP_ROWS, ops_table, to_parquet_bytes
from opslake.models.ops import QueuedOp
from opslake.query.embedded import EmbeddedEngine

from .conftest import BUCKET, DATABASE, Aws

HOUR = datetime(2026, 3, 1, 5, tzinfo=UTC)
DT, HH = "2026-03-01", "05"
NOW = HOUR + timedelta(hours=4, minutes=1)  # the hour ended 3 h 1 min ago
LEASE_S, GRACE_S = 1800.0, 3600.0
HOUR_MS = int(HOUR.timestamp() * 1000)


class Crash(BaseException):
    """Stops a compactor like a killed Lambda: not an Exception, so nothing catches it."""


class Clock:
    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Boto3FileSystem(pafs.FileSystemHandler):
    """Read-only pyarrow filesystem over a boto3 S3 client (so the engine reads moto's mock)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def get_type_name(self) -> str:
        return "boto3"

    def normalize_path(self, path: str) -> str:
        return path

    def _split(self, path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        infos = []
        for path in paths:
            bucket, key = self._split(path)
            try:
                head = self.client.head_object(Bucket=bucket, Key=key)
                infos.append(pafs.FileInfo(path, pafs.FileType.File, size=head["ContentLength"]))
            except ClientError:
                infos.append(pafs.FileInfo(path, pafs.FileType.NotFound))
        return infos

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        bucket, key = self._split(selector.base_dir)
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/")
        return [
            pafs.FileInfo(f"{bucket}/{obj['Key']}", pafs.FileType.File, size=obj["Size"])
            for page in pages
            for obj in page.get("Contents", [])
        ]

    def open_input_file(self, path: str) -> pa.NativeFile:
        bucket, key = self._split(path)
        return pa.BufferReader(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def _read_only(self, *args: Any) -> Any:
        raise NotImplementedError("read-only test filesystem")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def engine(aws: Aws) -> EmbeddedEngine:
    return EmbeddedEngine(aws.glue, pafs.PyFileSystem(Boto3FileSystem(aws.s3)), database=DATABASE)


def make_op(op_id: str, minute: int, hour: datetime = HOUR) -> tuple[QueuedOp, int]:
    ts = hour + timedelta(minutes=minute % 60, seconds=7)
    op = QueuedOp(
        op_id=op_id,
        ts=ts,
        endpoint="/sql",
        source="gateway",
        agent_id="agent-a",
        reporter_id="agent-a",
        success=minute % 5 != 0,
        duration_ms=float(minute),
        attributes={"n": str(minute)},
    )
    return op, int((ts + timedelta(milliseconds=300)).timestamp() * 1000)


def put_file(aws: Aws, ops: list[tuple[QueuedOp, int]], name: str, hour: datetime = HOUR) -> str:
    dt, hh = hour.strftime("%Y-%m-%d"), hour.strftime("%H")
    key = ops_object_key("ops/", dt, hh, [name])
    body = to_parquet_bytes(ops_table([o for o, _ in ops], [ms for _, ms in ops]))
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    GlueCatalog(aws.glue, DATABASE, "ops").ensure_partitions([(dt, hh)])
    return key


def make_hour(
    aws: Aws, *, files: int = 12, rows: int = 50, dups: int = 40, hour: datetime = HOUR, tag: str = "op"
) -> set[str]:
    """``files`` writer-style files; ``dups`` rows repeat op_ids of earlier files (redeliveries)."""
    ids: list[str] = []
    for f in range(files):
        batch = [make_op(f"{tag}-{f:03d}-{i:03d}", f * 3 + i, hour) for i in range(rows)]
        ids += [op.op_id for op, _ in batch]
        if f and dups:
            per_file = -(-dups // (files - 1))
            taken = min(per_file, dups - per_file * (f - 1))
            batch += [make_op(ids[j], j, hour) for j in range(max(0, taken))]
        put_file(aws, batch, f"{tag}-batch-{f}", hour)
    return set(ids)


def compactor(aws: Aws, clock: Clock, hook: Callable[[str, str, str], None] | None = None, **options: Any):
    s3 = options.pop("s3", aws.s3)
    glue = options.pop("glue", aws.glue)
    opts = CompactionOptions(**{"lease_s": LEASE_S, "grace_s": GRACE_S, **options})
    return Compactor(s3, glue, bucket=BUCKET, database=DATABASE, clock=clock, options=opts, hook=hook)


def counts(aws: Aws, dt: str = DT, hour: str = HH) -> tuple[int, int, list[str]]:
    result = engine(aws).run(
        f"SELECT count(*), count(DISTINCT op_id) FROM ops WHERE dt = '{dt}' AND hour = '{hour}'"
    )
    (total, distinct), *_ = result.rows
    return total, distinct, result.files_read or []


def assert_exactly_once(aws: Aws, expected: set[str], dt: str = DT, hour: str = HH) -> None:
    rows = engine(aws).run(f"SELECT op_id FROM ops WHERE dt = '{dt}' AND hour = '{hour}'").rows
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == len(expected)
    assert set(ids) == expected


def location(aws: Aws, dt: str = DT, hour: str = HH) -> str:
    partition = aws.glue.get_partition(DatabaseName=DATABASE, TableName="ops", PartitionValues=[dt, hour])
    return str(partition["Partition"]["StorageDescriptor"]["Location"])


def journal(aws: Aws, dt: str = DT, hour: str = HH) -> Journal:
    return Journal.from_json(json.loads(aws.read(f"state/compaction/ops/dt={dt}/hour={hour}.json")))


def finish(aws: Aws, clock: Clock, runs: int = 4) -> None:
    """Rerun (after the lease and the grace period) until the journal is done."""
    for _ in range(runs):
        clock.advance(max(LEASE_S, GRACE_S) + 1)
        compactor(aws, clock).run()
        if journal(aws).state == "done":
            return
    raise AssertionError(f"journal stuck at {journal(aws).state}")


def test_merges_dedupes_swaps_and_deletes_after_grace(aws: Aws) -> None:
    expected = make_hour(aws)
    source_keys = aws.keys("ops/")
    total, distinct, _ = counts(aws)
    assert (total, distinct) == (len(expected) + 40, len(expected))  # at-least-once before compaction
    clock = Clock()

    report = compactor(aws, clock).run()

    assert report.errors == {}
    (result,) = report.compacted
    assert (result.files_in, result.files_out) == (12, 1)
    assert (result.rows_in, result.rows_out, result.duplicates_dropped) == (640, 600, 40)
    assert result.bytes_in == sum(
        aws.s3.head_object(Bucket=BUCKET, Key=k)["ContentLength"] for k in source_keys
    )
    state = journal(aws)
    assert state.state == "swapped" and state.rows_out == state.distinct_ops == 600
    assert location(aws) == f"s3://{BUCKET}/ops-compacted/dt={DT}/hour={HH}/gen={state.generation}/"
    (out_key,) = aws.keys("ops-compacted/")
    assert out_key.endswith(f"gen={state.generation}/part-00000.parquet")
    meta = pq.ParquetFile(io.BytesIO(aws.read(out_key))).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    written = pq.read_table(io.BytesIO(aws.read(out_key)))
    assert written.column("ingested_at").to_pylist() == sorted(written.column("ingested_at").to_pylist())
    assert aws.keys("ops/") == source_keys  # old files kept for the grace period
    assert_exactly_once(aws, expected)
    assert all("ops-compacted/" in path for path in counts(aws)[2])

    clock.advance(GRACE_S + 1)
    report = compactor(aws, clock).run()
    (result,) = report.partitions
    assert (result.status, result.files_deleted) == ("cleaned", 12)
    assert aws.keys("ops/") == [] and journal(aws).state == "done"
    assert_exactly_once(aws, expected)
    assert compactor(aws, clock).run().partitions == []  # nothing left to do


def test_two_keys_ops_with_one_op_id_both_survive_and_one_keys_redelivery_collapses(aws: Aws) -> None:
    """issue 12: a forged op (another key, same op_id, ingested EARLIER) used to win compaction's
    "earliest copy" rule and replace the real op. One row per (reporter_id, op_id) keeps both."""
    forged, forged_ms = make_op("bob-run-1", 1)
    forged = forged.model_copy(update={"reporter_id": "mallory", "agent_id": "bob", "error_type": "forged"})
    real, real_ms = make_op("bob-run-1", 2)
    real = real.model_copy(update={"reporter_id": "bob", "agent_id": "bob", "error_type": "real"})
    redelivered = (real, real_ms + 60_000)  # the same key's op again, in a later batch
    put_file(aws, [(forged, forged_ms)], "forged-batch")
    put_file(aws, [(real, real_ms), make_op("other", 3)], "real-batch")
    put_file(aws, [redelivered], "redelivery-batch")

    report = compactor(aws, Clock()).run()

    assert report.errors == {}
    (result,) = report.compacted
    assert (result.rows_in, result.rows_out, result.duplicates_dropped) == (4, 3, 1)
    assert journal(aws).distinct_ops == 3
    rows = (
        engine(aws)
        .run(
            f"SELECT reporter_id, op_id, error_type, ingested_at FROM ops WHERE dt = '{DT}' AND hour = '{HH}' "
            "AND op_id = 'bob-run-1' ORDER BY reporter_id"
        )
        .rows
    )
    assert [r[:3] for r in rows] == [("bob", "bob-run-1", "real"), ("mallory", "bob-run-1", "forged")]
    assert int(rows[0][3].timestamp() * 1000) == real_ms  # bob's earliest copy is the one kept


def test_small_target_gives_several_even_files(aws: Aws) -> None:
    expected = make_hour(aws, files=10, rows=100, dups=0)
    report = compactor(aws, Clock(), target_file_bytes=20_000).run()
    (result,) = report.compacted
    assert result.files_out > 1
    sizes = [pq.ParquetFile(io.BytesIO(aws.read(k))).metadata.num_rows for k in aws.keys("ops-compacted/")]
    assert sum(sizes) == 1000 and max(sizes) - min(sizes) <= 1
    assert all(
        aws.s3.head_object(Bucket=BUCKET, Key=k)["ContentLength"] <= 20_000
        for k in aws.keys("ops-compacted/")
    )
    assert_exactly_once(aws, expected)


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_after_each_step_then_rerun(aws: Aws, point: str) -> None:
    expected = make_hour(aws)
    clock = Clock()

    def crash(at: str, dt: str, hour: str) -> None:
        if at == point:
            raise Crash(at)

    with pytest.raises(Crash):
        compactor(
            aws, clock, hook=crash, grace_s=0 if "delete" in point or point == "done" else GRACE_S
        ).run()

    # Whatever state the crash left, a reader sees every op, and one copy of each (plus the raw
    # redelivered duplicates while the old files are still the partition's location).
    total, distinct, _ = counts(aws)
    assert distinct == len(expected) and total in (len(expected), len(expected) + 40)
    if point in ("planned", "outputs_put", "written", "verified", "glue_updated"):
        busy = compactor(aws, clock).run().partitions  # the crashed run's lease still holds
        assert [p.status for p in busy] == ["busy"]

    finish(aws, clock)

    state = journal(aws)
    assert state.state == "done"
    assert aws.keys("ops/") == []
    assert all(f"gen={state.generation}/" in k for k in aws.keys("ops-compacted/"))  # abandoned ones deleted
    assert location(aws).endswith(f"gen={state.generation}/")
    assert_exactly_once(aws, expected)


def test_queries_during_compaction_count_each_op_once(aws: Aws) -> None:
    expected = make_hour(aws, dups=0)
    seen: dict[str, tuple[int, int, list[str]]] = {}

    def query(at: str, dt: str, hour: str) -> None:
        if at in ("outputs_put", "verified", "glue_updated", "swapped", "old_generations_deleted"):
            seen[at] = counts(aws)

    clock = Clock()
    compactor(aws, clock, hook=query).run()
    clock.advance(GRACE_S + 1)
    compactor(aws, clock, hook=query).run()

    assert set(seen) == {"outputs_put", "verified", "glue_updated", "swapped", "old_generations_deleted"}
    for at, (total, distinct, files) in seen.items():
        assert total == distinct == len(expected), at
        old = at in ("outputs_put", "verified")
        assert all(("/ops/" in f) == old and ("ops-compacted" in f) != old for f in files), at
    assert_exactly_once(aws, expected)


def test_old_files_stay_until_grace_has_passed(aws: Aws) -> None:
    make_hour(aws, files=3, dups=0)
    sources = aws.keys("ops/")
    clock = Clock()
    compactor(aws, clock).run()
    clock.advance(GRACE_S - 1)
    (result,) = compactor(aws, clock).run().partitions
    assert result.status == "waiting" and aws.keys("ops/") == sources
    clock.advance(2)
    (result,) = compactor(aws, clock).run().partitions
    assert result.status == "cleaned" and aws.keys("ops/") == []


def test_second_compactor_backs_off_while_the_first_holds_the_lease(aws: Aws) -> None:
    expected = make_hour(aws)
    clock = Clock()
    second: list[Any] = []

    def meanwhile(at: str, dt: str, hour: str) -> None:
        if at == "written":
            second.append(compactor(aws, clock).run())

    report = compactor(aws, clock, hook=meanwhile).run()
    assert [p.status for p in second[0].partitions] == ["busy"]
    assert [p.status for p in report.partitions] == ["compacted"]
    assert_exactly_once(aws, expected)


def test_a_stalled_compactor_loses_its_lease_and_stops_at_its_next_step(aws: Aws) -> None:
    expected = make_hour(aws)
    clock, later = Clock(), Clock(NOW + timedelta(seconds=LEASE_S + 1))
    taken_over: list[Any] = []

    def stall(at: str, dt: str, hour: str) -> None:
        if at == "planned" and not taken_over:  # the first run stalls past its lease here
            taken_over.append(compactor(aws, later).run())

    report = compactor(aws, clock, hook=stall).run()

    assert [p.status for p in taken_over[0].partitions] == ["compacted"]
    (stalled,) = report.partitions
    assert stalled.status == "busy" and "took the partition over" in stalled.reason
    winner = journal(aws).generation
    assert location(aws).endswith(f"gen={winner}/")
    assert_exactly_once(aws, expected)
    later.advance(GRACE_S + 1)
    compactor(aws, later).run()
    assert journal(aws).state == "done"
    assert all(f"gen={winner}/" in k for k in aws.keys("ops-compacted/"))  # the stalled one's files too
    assert_exactly_once(aws, expected)


class Failing:
    """A boto3 client whose ``method`` raises while ``armed`` and ``when(kwargs)`` holds."""

    def __init__(self, client: Any, method: str, when: Callable[[dict[str, Any]], bool]) -> None:
        self._client, self._method, self._when, self.armed = client, method, when, True

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if name != self._method:
            return real

        def call(**kwargs: Any) -> Any:
            if self.armed and self._when(kwargs):
                raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, name)
            return real(**kwargs)

        return call


def test_s3_put_failure_is_reported_and_the_next_run_succeeds(aws: Aws) -> None:
    expected = make_hour(aws)
    other = make_hour(aws, hour=HOUR - timedelta(hours=1), tag="early", files=3, dups=0)
    s3 = Failing(aws.s3, "put_object", lambda kw: kw["Key"].startswith(f"ops-compacted/dt={DT}/hour={HH}/"))
    clock = Clock()
    report = compactor(aws, clock, s3=s3).run()
    assert list(report.errors) == [f"{DT}/{HH}"] and "InternalError" in report.errors[f"{DT}/{HH}"]
    assert [p.hour for p in report.compacted] == ["04"]  # the other partition went ahead
    assert_exactly_once(aws, other, hour="04")
    assert counts(aws)[1] == len(expected) and location(aws).endswith(f"/ops/dt={DT}/hour={HH}/")

    s3.armed = False
    report = compactor(aws, clock, s3=s3).run()  # the failed run released its lease
    assert report.errors == {} and [p.hour for p in report.compacted] == [HH]
    finish(aws, clock)
    assert_exactly_once(aws, expected)


def test_glue_update_failure_is_reported_and_the_next_run_succeeds(aws: Aws) -> None:
    expected = make_hour(aws)
    glue = Failing(aws.glue, "update_partition", lambda kw: True)
    clock = Clock()
    report = compactor(aws, clock, glue=glue).run()
    assert "InternalError" in report.errors[f"{DT}/{HH}"]
    assert journal(aws).state == "verified" and location(aws).endswith(f"/ops/dt={DT}/hour={HH}/")
    assert counts(aws)[1] == len(expected)
    glue.armed = False
    assert [p.status for p in compactor(aws, clock, glue=glue).run().partitions] == ["compacted"]
    finish(aws, clock)
    assert_exactly_once(aws, expected)


def test_late_file_before_the_swap_is_included(aws: Aws) -> None:
    expected = make_hour(aws, files=4, dups=0)
    late = [make_op("late-1", 59), make_op("op-000-000", 0)]

    def redeliver(at: str, dt: str, hour: str) -> None:
        if at == "verified" and not aws.keys("ops/dt=2026-03-01/hour=05/late"):
            put_file(aws, late, "late-batch")

    report = compactor(aws, Clock(), hook=redeliver).run()
    (result,) = report.compacted
    assert result.files_in == 5 and result.duplicates_dropped == 1
    assert_exactly_once(aws, expected | {"late-1"})


def test_late_file_after_the_swap_gets_a_new_generation(aws: Aws) -> None:
    expected = make_hour(aws, files=4, dups=0)
    clock = Clock()
    compactor(aws, clock).run()
    first = journal(aws).generation
    late_key = put_file(aws, [make_op("late-1", 59), make_op("op-000-000", 0)], "late-batch")
    clock.advance(GRACE_S + 1)
    compactor(aws, clock).run()  # deletes the planned files only
    assert aws.keys("ops/") == [late_key]
    compactor(aws, clock).run()  # the late file's hour is compacted again, with the first generation
    state = journal(aws)
    assert state.generation != first and state.state == "swapped"
    assert_exactly_once(aws, expected | {"late-1"})
    finish(aws, clock)
    assert aws.keys("ops/") == [] and all(f"gen={state.generation}/" in k for k in aws.keys("ops-compacted/"))
    assert_exactly_once(aws, expected | {"late-1"})


def test_young_hours_and_single_files_are_left_alone(aws: Aws) -> None:
    young_hour = HOUR + timedelta(hours=1)  # 06:00-07:00 ended 2 h 1 min before NOW: too young
    make_hour(aws, files=3, dups=0, hour=young_hour, tag="young")
    put_file(aws, [make_op("single", 1, HOUR - timedelta(hours=2))], "single", HOUR - timedelta(hours=2))
    before = aws.keys("ops/")
    report = compactor(aws, Clock()).run()
    assert [(p.hour, p.status) for p in report.partitions] == [("03", "skipped")]
    assert "single file" in report.skipped[f"{DT}/03"]
    assert aws.keys("ops/") == before and aws.keys("state/") == [] and aws.keys("ops-compacted/") == []


def test_max_partitions_defers_the_rest(aws: Aws) -> None:
    for back in range(3):
        make_hour(aws, files=2, dups=0, hour=HOUR - timedelta(hours=back), tag=f"h{back}")
    report = compactor(aws, Clock(), max_partitions=2).run()
    assert [p.hour for p in report.compacted] == ["03", "04"] and report.deferred == 1  # oldest first


def test_from_settings_reads_the_compaction_block(aws: Aws) -> None:
    settings = load_settings(
        {**aws.env(), "OPSLAKE_COMPACT_AFTER_HOURS": "5", "OPSLAKE_COMPACTION_MAX_PARTITIONS": "2"}
    )
    built = Compactor.from_settings(settings, aws.s3, aws.glue, Clock())
    assert built.options.min_age_hours == 5 and built.options.max_partitions == 2
    assert built.options.grace_s == 3600 and built.options.target_file_bytes == 128 * 1024 * 1024
    assert (built.bucket, built.database, built.table) == (BUCKET, DATABASE, "ops")


def test_compacted_files_have_bounded_row_groups(aws: Aws) -> None:
    # one source holding more rows than a row group may (written as pyarrow would by default: one group)
    rows = ROW_GROUP_ROWS + 1000
    table = ops_table(
        [make_op(f"big-{i:06d}", i)[0] for i in range(rows)], [HOUR_MS + i for i in range(rows)]
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    dt, hh = HOUR.strftime("%Y-%m-%d"), HOUR.strftime("%H")
    aws.s3.put_object(
        Bucket=BUCKET, Key=ops_object_key("ops/", dt, hh, ["big"]), Body=sink.getvalue().to_pybytes()
    )
    put_file(aws, [make_op("small-1", 1)], "small")
    assert len(compactor(aws, Clock()).run().compacted) == 1
    (key,) = aws.keys("ops-compacted/")
    metadata = pq.ParquetFile(io.BytesIO(aws.read(key))).metadata
    assert metadata.num_rows == rows + 1
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [ROW_GROUP_ROWS, 1001]
