"""SqsOpsQueue against moto (issue 13): records packed per message, SendMessageBatch calls counted
by a botocore hook (calls, not timings), a message exactly at the queue's MaximumMessageSize."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from opslake.models import OpInput
from opslake.queue import SqsOpsQueue, unpack


def op_records(count: int, summary_chars: int = 1_500) -> list[str]:
    received = datetime(2026, 11, 21, 10, tzinfo=UTC)
    return [
        OpInput.model_validate(
            {
                "endpoint": "tool:query_db",
                "success": i % 3 > 0,
                "duration_ms": 12.5,
                "op_id": f"op-{i}",
                "input_summary": "x" * summary_chars,
                "attributes": {"attempt": str(i)},
            }
        )
        .to_queued(reporter_id="runtime-alpha", received_at=received)
        .to_message()
        for i in range(count)
    ]


@pytest.fixture
def moto_sqs() -> Iterator[tuple[Any, str, list[int]]]:
    """A moto queue with SQS's default 256 KiB MaximumMessageSize, and the sizes of the entries of
    every SendMessageBatch call (counted by a botocore hook on the client: calls, not timings)."""
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        url = client.create_queue(QueueName="ops", Attributes={"MaximumMessageSize": "262144"})["QueueUrl"]
        calls: list[int] = []
        client.meta.events.register(
            "before-parameter-build.sqs.SendMessageBatch",
            lambda params, **_: calls.append(len(params["Entries"])),
        )
        yield client, url, calls


def drain(client: Any, url: str) -> list[str]:
    bodies: list[str] = []
    while got := client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        bodies += [m["Body"] for m in got]
        client.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
        )
    return bodies


def test_500_ops_take_one_send_message_batch_call(moto_sqs: tuple[Any, str, list[int]]) -> None:
    client, url, calls = moto_sqs
    records = op_records(500)  # ~1.8 KB each: ~0.9 MB, the size of a full POST /events
    SqsOpsQueue(client, url).send(records)
    assert len(calls) == 1 and calls[0] <= 4  # one record per message made this 50 calls
    bodies = drain(client, url)
    assert all(len(body.encode()) <= 256 * 1024 for body in bodies)
    assert sorted(r for body in bodies for r in unpack(body)) == sorted(records)


def test_a_message_at_the_size_limit_is_accepted(moto_sqs: tuple[Any, str, list[int]]) -> None:
    client, url, calls = moto_sqs
    record = op_records(1)[0]
    big = "y" * (256 * 1024 - len(record.encode()) - 1)  # the queue sends any text: a filler record
    SqsOpsQueue(client, url).send([record, big])
    SqsOpsQueue(client, url).send([record, big, record])  # one byte more would not fit: two messages
    assert calls == [1, 2]
    bodies = drain(client, url)
    assert sorted(len(b.encode()) for b in bodies) == sorted([256 * 1024, 256 * 1024, len(record.encode())])
