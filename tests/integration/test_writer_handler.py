"""The SQS writer handler against moto: objects, partitions, rejects, retries, idempotency."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
import pytest
from moto.sqs.responses import SQSResponse

from opslake.models import OpInput

from ..conftest import api_event, load_event, shared_fixture, sqs_record
from .conftest import DATABASE, Aws

T0 = datetime(2026, 11, 21, 23, 59, 59, 500000, tzinfo=UTC)


@pytest.fixture
def writer(aws: Aws, load_handler):
    return load_handler("functions/observer/writer.py", **aws.env())


def op_json(op_id: str, **fields: Any) -> str:
    raw = {"endpoint": "/sql", "success": True, "duration_ms": 4.5, "op_id": op_id, **fields}
    return OpInput.model_validate(raw).to_queued(reporter_id="rt", received_at=T0).to_message()


def at(delta_s: float) -> int:
    return int((T0 + timedelta(seconds=delta_s)).timestamp() * 1000)


def lake_rows(aws: Aws) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for key in aws.keys("ops/"):
        rows += pq.read_table(io.BytesIO(aws.read(key))).to_pylist()
    return rows


def failures(response: dict[str, Any]) -> list[str]:
    return sorted(item["itemIdentifier"] for item in response["batchItemFailures"])


def partitions(aws: Aws) -> list[list[str]]:
    return sorted(
        p["Values"] for p in aws.glue.get_partitions(DatabaseName=DATABASE, TableName="ops")["Partitions"]
    )


def test_sample_event_lands_as_parquet_with_glue_partition(aws: Aws, writer, lambda_context) -> None:
    event = load_event("writer_sqs.json")
    response = writer.handler(event, lambda_context)
    assert response == {"batchItemFailures": []}
    (key,) = aws.keys("ops/")
    assert key.startswith("ops/dt=2026-11-21/hour=") and key.endswith(".parquet")
    rows = lake_rows(aws)
    assert sorted(r["op_id"] for r in rows) == sorted(
        json.loads(r["body"])["op_id"] for r in event["Records"]
    )
    dt, hour = key.split("/")[1][3:], key.split("/")[2][5:]
    assert partitions(aws) == [[dt, hour]]
    location = aws.glue.get_partition(DatabaseName=DATABASE, TableName="ops", PartitionValues=[dt, hour])
    assert (
        location["Partition"]["StorageDescriptor"]["Location"]
        == f"s3://opslake-test-lake/ops/dt={dt}/hour={hour}/"
    )


def test_published_sqs_fixture_bodies_become_rejects(aws: Aws, writer, lambda_context) -> None:
    event = shared_fixture("sqsEvent.json")
    if event is None:
        pytest.skip("../shared/fixtures/aws-events/ is not beside this clone (it is in CI)")
    assert writer.handler(event, lambda_context) == {"batchItemFailures": []}
    assert aws.keys("ops/") == []
    (key,) = aws.keys("rejects/")
    lines = [json.loads(line) for line in aws.read(key).decode().splitlines()]
    assert {line["message_id"] for line in lines} == {r["messageId"] for r in event["Records"]}
    assert all(line["reason"] for line in lines)


def test_same_batch_delivered_twice_gives_one_object_and_no_duplicate_rows(
    aws: Aws, writer, lambda_context
) -> None:
    event = {
        "Records": [sqs_record(op_json(f"op-{i}"), message_id=f"m-{i}", sent_ms=at(-10)) for i in range(5)]
    }
    writer.handler(event, lambda_context)
    writer.handler(json.loads(json.dumps(event)), lambda_context)
    assert len(aws.keys("ops/")) == 1
    assert sorted(r["op_id"] for r in lake_rows(aws)) == [f"op-{i}" for i in range(5)]


def test_hour_and_day_boundary_split_into_partitions(aws: Aws, writer, lambda_context) -> None:
    event = {
        "Records": [sqs_record(op_json("old"), sent_ms=at(0)), sqs_record(op_json("new"), sent_ms=at(1))]
    }
    writer.handler(event, lambda_context)
    assert partitions(aws) == [["2026-11-21", "23"], ["2026-11-22", "00"]]
    keys = aws.keys("ops/")
    assert [k.split("/")[1:3] for k in keys] == [["dt=2026-11-21", "hour=23"], ["dt=2026-11-22", "hour=00"]]


def test_s3_failure_reports_items_then_succeeds_on_retry(
    aws: Aws, writer, lambda_context, fail_aws_calls
) -> None:
    injected = fail_aws_calls("s3", "PutObject", times=1, code="SlowDown")
    event = {
        "Records": [
            sqs_record(op_json("a"), message_id="m-a", sent_ms=at(0)),  # partition 23 is written first: fails
            sqs_record(op_json("b"), message_id="m-b", sent_ms=at(1)),  # partition 00 succeeds
        ]
    }
    response = writer.handler(event, lambda_context)
    assert injected["injected"] == 1 and failures(response) == ["m-a"]
    assert [r["op_id"] for r in lake_rows(aws)] == ["b"]
    retry = {"Records": [r for r in event["Records"] if r["messageId"] == "m-a"]}
    assert writer.handler(retry, lambda_context) == {"batchItemFailures": []}
    assert sorted(r["op_id"] for r in lake_rows(aws)) == ["a", "b"]


def test_glue_failure_reports_items_and_writes_nothing(
    aws: Aws, writer, lambda_context, fail_aws_calls
) -> None:
    fail_aws_calls("glue", "BatchCreatePartition", times=1, code="ThrottlingException")
    event = {"Records": [sqs_record(op_json("a"), message_id="m-a", sent_ms=at(0))]}
    assert failures(writer.handler(event, lambda_context)) == ["m-a"]
    assert aws.keys("ops/") == [] and partitions(aws) == []
    assert writer.handler(event, lambda_context) == {"batchItemFailures": []}
    assert partitions(aws) == [["2026-11-21", "23"]]


def test_a_batch_in_which_everything_fails_is_reported_not_raised(
    aws: Aws, writer, lambda_context, fail_aws_calls
) -> None:
    fail_aws_calls("s3", "PutObject", times=5, code="InternalError")
    event = {"Records": [sqs_record(op_json(f"x{i}"), message_id=f"m{i}", sent_ms=at(0)) for i in range(3)]}
    assert failures(writer.handler(event, lambda_context)) == ["m0", "m1", "m2"]


def test_poison_message_goes_to_rejects_and_is_not_retried(aws: Aws, writer, lambda_context) -> None:
    event = {
        "Records": [
            sqs_record("{truncated", message_id="poison", sent_ms=at(0)),
            sqs_record(json.dumps({"op_id": "x", "success": "maybe"}), message_id="schema", sent_ms=at(0)),
            sqs_record(op_json("fine"), message_id="fine", sent_ms=at(0)),
        ]
    }
    assert writer.handler(event, lambda_context) == {"batchItemFailures": []}
    (key,) = aws.keys("rejects/dt=2026-11-21/")
    reasons = {
        line["message_id"]: line["reason"] for line in map(json.loads, aws.read(key).decode().splitlines())
    }
    assert reasons["poison"].startswith("not valid JSON")
    assert "success" in reasons["schema"]
    assert [r["op_id"] for r in lake_rows(aws)] == ["fine"]


def test_batch_near_the_6_mb_lambda_payload_limit(aws: Aws, writer, lambda_context) -> None:
    filler = "e" * 3_900
    records = [
        sqs_record(
            op_json(f"big-{i}", error=filler, input_summary="i" * 1_900), message_id=f"m{i}", sent_ms=at(-5)
        )
        for i in range(900)
    ]
    event = {"Records": records}
    size = len(json.dumps(event).encode())
    assert 5_500_000 < size < 6 * 1024 * 1024
    assert writer.handler(event, lambda_context) == {"batchItemFailures": []}
    (key,) = aws.keys("ops/")
    assert pq.ParquetFile(io.BytesIO(aws.read(key))).metadata.num_rows == 900


def test_events_to_lake_round_trip(aws: Aws, load_handler, writer, lambda_context) -> None:
    """POST /events → SQS (moto) → writer → Parquet: what a client sent is what Athena will read."""
    events = load_handler("functions/observer/events.py", **aws.env())
    ops = [
        {"endpoint": "tool:search", "success": True, "duration_ms": 1.5, "attributes": {"city": "Austin"}},
        {"endpoint": "/sql", "success": False, "duration_ms": 30.0, "error": "password=hunter2 rejected"},
    ]
    response = events.handler(
        api_event("POST", "/events", json.dumps({"ops": ops}), key_id=aws.key_id), lambda_context
    )
    accepted = json.loads(response["body"])["accepted"]
    messages = aws.receive_all()
    records = [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m["Attributes"],
            "messageAttributes": {},
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:opslake-ops",
            "awsRegion": "us-east-1",
        }
        for m in messages
    ]
    assert writer.handler({"Records": records}, lambda_context) == {"batchItemFailures": []}
    rows = {r["op_id"]: r for r in lake_rows(aws)}
    assert sorted(rows) == sorted(accepted)
    first, second = (rows[i] for i in accepted)
    assert first["attributes"] == [("city", "Austin")] and first["reporter_id"] == "runtime-alpha"
    assert second["error"] == "password=[REDACTED] rejected" and second["success"] is False
    sent = min(int(m["Attributes"]["SentTimestamp"]) for m in messages)
    assert first["ingested_at"] >= datetime.fromtimestamp(sent / 1000, tz=UTC) - timedelta(milliseconds=1)


def test_500_ops_are_one_send_call_and_land_once_even_when_redelivered(
    aws: Aws, load_handler, writer, lambda_context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: POST /events packs ops per message (one SendMessageBatch call for 500 ops, where one
    message per op made 50), and the writer unpacks them; a redelivered batch adds no rows."""
    calls: list[int] = []
    send_message_batch = SQSResponse.send_message_batch

    def counted(self: SQSResponse) -> Any:  # moto's side of the wire: every call, whatever the client
        calls.append(1)
        return send_message_batch(self)

    monkeypatch.setattr(SQSResponse, "send_message_batch", counted)
    events = load_handler("functions/observer/events.py", **aws.env())
    ops = [
        {"endpoint": "tool:search", "success": i % 2 == 0, "duration_ms": 1.5, "input_summary": "q" * 1500}
        for i in range(500)
    ]
    response = events.handler(
        api_event("POST", "/events", json.dumps({"ops": ops}), key_id=aws.key_id), lambda_context
    )
    assert response["statusCode"] == 202
    accepted = json.loads(response["body"])["accepted"]
    assert len(accepted) == 500 and len(calls) == 1
    messages = aws.receive_all()
    assert 1 < len(messages) <= 4  # ~0.8 MB of records in messages of at most 256 KiB
    event = {
        "Records": [
            sqs_record(m["Body"], message_id=m["MessageId"], sent_ms=int(m["Attributes"]["SentTimestamp"]))
            for m in messages
        ]
    }
    assert writer.handler(event, lambda_context) == {"batchItemFailures": []}
    keys = aws.keys("ops/")
    assert writer.handler(event, lambda_context) == {"batchItemFailures": []}  # redelivered
    assert aws.keys("ops/") == keys
    assert sorted(r["op_id"] for r in lake_rows(aws)) == sorted(accepted)
