"""LakeWriter on in-memory fakes: partitions, dedupe, deterministic names, rejects, failures."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from opslake.lake.layout import batch_name, ops_object_key
from opslake.lake.schema import OPS_SCHEMA
from opslake.lake.writer import LakeWriter, QueueMessage
from opslake.models import OpInput

from ...fakes import MemoryCatalog, MemoryStore

T0 = datetime(2026, 11, 21, 23, 59, 59, 900000, tzinfo=UTC)  # just before an hour and a day boundary


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def op_body(op_id: str, **fields: object) -> str:
    raw = {"endpoint": "/sql", "success": True, "duration_ms": 3, "op_id": op_id, **fields}
    return OpInput.model_validate(raw).to_queued(reporter_id="rt", received_at=T0).to_message()


def message(
    op_id: str, sent_at: datetime = T0, message_id: str | None = None, **fields: object
) -> QueueMessage:
    return QueueMessage(message_id or f"m-{op_id}", op_body(op_id, **fields), millis(sent_at))


def writer() -> tuple[LakeWriter, MemoryStore, MemoryCatalog]:
    store, catalog = MemoryStore(), MemoryCatalog()
    return LakeWriter(store, catalog, ops_prefix="ops/", rejects_prefix="rejects/"), store, catalog


def rows(store: MemoryStore, key: str) -> list[dict]:
    table = pq.read_table(io.BytesIO(store.objects[key]))
    assert table.schema.equals(OPS_SCHEMA, check_metadata=False)
    return table.to_pylist()


def test_records_straddling_hour_and_day_go_to_their_partitions() -> None:
    lake, store, catalog = writer()
    later = T0 + timedelta(milliseconds=200)  # 2026-11-22 00:00:00.100
    report = lake.write_batch([message("a"), message("b", later), message("c", later)])
    assert report.records_written == 3 and report.failed_message_ids == []
    assert catalog.partitions == {("2026-11-21", "23"), ("2026-11-22", "00")}
    old = ops_object_key("ops/", "2026-11-21", "23", ["m-a"])
    new = ops_object_key("ops/", "2026-11-22", "00", ["m-b", "m-c"])
    assert sorted(store.objects) == sorted([old, new])
    assert [r["op_id"] for r in rows(store, new)] == ["b", "c"]
    assert rows(store, old)[0]["ingested_at"] == T0.replace(microsecond=900000)


def test_object_names_are_deterministic_and_order_free() -> None:
    assert batch_name(["m2", "m1"]) == batch_name(["m1", "m2"]) != batch_name(["m1"])
    first, store1, _ = writer()
    second, store2, _ = writer()
    first.write_batch([message("a"), message("b")])
    second.write_batch([message("b"), message("a")])
    assert list(store1.objects) == list(store2.objects)


def test_duplicate_op_ids_keep_the_earliest_copy() -> None:
    lake, store, _ = writer()
    report = lake.write_batch(
        [
            message("dup", T0 + timedelta(seconds=-1), "m-late", error_type="first"),
            message("dup", T0 + timedelta(seconds=-5), "m-early", error_type="kept"),
            message("solo"),
        ]
    )
    assert report.records_written == 2 and report.duplicates_dropped == 1
    (key,) = store.objects
    by_id = {r["op_id"]: r for r in rows(store, key)}
    assert by_id["dup"]["error_type"] == "kept"


def test_poison_messages_go_to_rejects_with_reasons_and_are_not_failed() -> None:
    lake, store, _ = writer()
    report = lake.write_batch(
        [
            message("ok"),
            QueueMessage("m-garbage", "Test message.", millis(T0)),
            QueueMessage("m-schema", json.dumps({"message": "foo1"}), millis(T0)),
        ]
    )
    assert report.rejects_written == 2 and report.failed_message_ids == [] and report.records_written == 1
    (reject_key,) = [k for k in store.objects if k.startswith("rejects/dt=2026-11-21/")]
    lines = [json.loads(line) for line in store.objects[reject_key].decode().splitlines()]
    reasons = {line["message_id"]: line["reason"] for line in lines}
    assert reasons["m-garbage"].startswith("not valid JSON")
    assert "op_id: field required" in reasons["m-schema"]
    assert {line["body"] for line in lines} == {"Test message.", '{"message": "foo1"}'}


def test_a_failed_partition_fails_only_its_messages_and_their_duplicates() -> None:
    lake, store, _ = writer()
    later = T0 + timedelta(seconds=1)
    store.fail_keys_containing = "hour=00"
    report = lake.write_batch(
        [message("a"), message("b", later), message("b", later + timedelta(seconds=1), "m-b-again")]
    )
    assert report.failed_message_ids == ["m-b", "m-b-again"]
    assert report.records_written == 1 and len(store.objects) == 1
    store.fail_keys_containing = None  # the retry (SQS redelivery of the failed ones) succeeds
    retry = lake.write_batch([message("b", later), message("b", later + timedelta(seconds=1), "m-b-again")])
    assert retry.failed_message_ids == [] and retry.records_written == 1


def test_catalog_failure_fails_the_partition_before_any_object_is_written() -> None:
    lake, store, catalog = writer()
    catalog.fail = True
    report = lake.write_batch([message("a")])
    assert report.failed_message_ids == ["m-a"] and store.objects == {}


def test_rejects_write_failure_is_retried_not_dropped() -> None:
    lake, store, _ = writer()
    store.fail_keys_containing = "rejects/"
    report = lake.write_batch([QueueMessage("m-poison", "{", millis(T0)), message("ok")])
    assert report.failed_message_ids == ["m-poison"] and report.records_written == 1


# ---- packed messages (issue 13): several op records per SQS message, one per line ----------------
def packed(message_id: str, *bodies: str, sent_at: datetime = T0) -> QueueMessage:
    return QueueMessage(message_id, "\n".join(bodies), millis(sent_at))


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_packed_message_lands_every_op_in_it(fast_path: bool) -> None:
    store, catalog = MemoryStore(), MemoryCatalog()
    lake = LakeWriter(store, catalog, ops_prefix="ops/", rejects_prefix="rejects/", fast_path=fast_path)
    report = lake.write_batch([packed("m1", *(op_body(f"op-{i}") for i in range(5)))])
    assert report.records_written == 5 and report.failed_message_ids == [] and report.rejects_written == 0
    (key,) = store.objects
    assert key == ops_object_key("ops/", "2026-11-21", "23", [f"m1#{i}" for i in range(5)])
    assert [r["op_id"] for r in rows(store, key)] == [f"op-{i}" for i in range(5)]


def test_a_bad_op_inside_a_packed_message_is_rejected_alone() -> None:
    lake, store, _ = writer()
    bad = json.dumps({"endpoint": "/sql", "success": "perhaps"})
    report = lake.write_batch([packed("m1", op_body("a"), bad, op_body("c"), "not json")])
    assert report.records_written == 2 and report.rejects_written == 2
    assert report.failed_message_ids == []  # the neighbours landed: nothing to redeliver
    (ops_key,) = [k for k in store.objects if k.startswith("ops/")]
    assert [r["op_id"] for r in rows(store, ops_key)] == ["a", "c"]
    (reject_key,) = [k for k in store.objects if k.startswith("rejects/")]
    lines = {line["message_id"]: line for line in map(json.loads, store.objects[reject_key].splitlines())}
    assert set(lines) == {"m1#1", "m1#3"}
    assert "not a valid op record" in lines["m1#1"]["reason"] and lines["m1#1"]["body"] == bad
    assert lines["m1#3"]["reason"].startswith("not valid JSON")


def test_a_redelivered_packed_message_adds_no_rows() -> None:
    lake, store, _ = writer()
    batch = [packed("m1", op_body("a"), op_body("b")), message("c")]
    first = lake.write_batch(batch)
    objects = dict(store.objects)
    again = lake.write_batch(list(reversed(batch)))  # SQS redelivers, in any order
    assert first.records_written == again.records_written == 3
    assert store.objects == objects  # the same object names, overwritten with the same rows
    (key,) = store.objects
    assert sorted(r["op_id"] for r in rows(store, key)) == ["a", "b", "c"]


def test_old_one_op_messages_are_still_written_beside_packed_ones() -> None:
    lake, store, _ = writer()
    report = lake.write_batch([message("old"), packed("m-new", op_body("p1"), op_body("p2"))])
    assert report.records_written == 3 and report.failed_message_ids == []
    (key,) = store.objects
    assert key == ops_object_key("ops/", "2026-11-21", "23", ["m-old", "m-new#0", "m-new#1"])


def test_a_failure_of_any_op_fails_the_whole_packed_message_by_its_sqs_id() -> None:
    lake, store, _ = writer()
    later = T0 + timedelta(seconds=1)  # the next hour: another partition
    store.fail_keys_containing = "hour=00"
    report = lake.write_batch([packed("m1", op_body("a"), op_body("b")), message("c", later)])
    # a packed message's ops all share its SentTimestamp, so its partition fails as a whole
    assert report.failed_message_ids == ["m-c"] and report.records_written == 2
    store.fail_keys_containing = "hour=23"
    report = lake.write_batch([packed("m1", op_body("a"), op_body("b")), message("c", later)])
    assert report.failed_message_ids == ["m1"]  # SQS item identifiers, never "m1#0"


def test_duplicates_across_and_inside_packed_messages_collapse() -> None:
    lake, store, _ = writer()
    report = lake.write_batch(
        [packed("m1", op_body("a"), op_body("a")), packed("m2", op_body("a"), op_body("b"))]
    )
    assert report.records_written == 2 and report.duplicates_dropped == 2
    (key,) = store.objects
    assert sorted(r["op_id"] for r in rows(store, key)) == ["a", "b"]
