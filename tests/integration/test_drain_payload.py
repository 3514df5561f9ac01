"""The local event source mapping keeps Lambda's 6 MB payload bound: with ops packed many to a
message (up to 256 KiB each), a batch of BatchSize messages could otherwise be gigabytes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from opslake_local.drain import LAMBDA_PAYLOAD_MAX, Drainer
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration


class RecordingInvoker:
    """Stands in for the writer: records each event's size and reports every message done."""

    def __init__(self) -> None:
        self.payloads: list[int] = []
        self.records: list[int] = []

    def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        self.payloads.append(len(json.dumps(event).encode()))
        self.records.append(len(event["Records"]))
        return {"batchItemFailures": []}


def test_a_batch_of_large_messages_stays_under_the_lambda_payload_limit(
    local: tuple[LocalStack, httpx.Client, Drainer],
) -> None:
    stack, _, drainer = local
    drainer.drain()  # what earlier tests of the module left
    (source,) = [s for s in stack.template.sqs_sources() if s.function == "WriterFunction"]
    url = stack.queue_url(source.queue)
    sqs = stack.client("sqs")
    body = "x" * 200_000  # a packed message's size; 40 of them are 8 MB, above Lambda's 6 MB
    for _ in range(40):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    recorder = RecordingInvoker()
    result = Drainer(stack, recorder).drain()  # type: ignore[arg-type]
    assert result.received == 40 and result.written == 40  # every message delivered, none twice
    assert len(recorder.payloads) >= 2 and max(recorder.payloads) <= LAMBDA_PAYLOAD_MAX
    assert sum(recorder.records) == 40
