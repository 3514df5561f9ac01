"""SqsOpsQueue: batching within SQS limits, retries of partial failures (not of calls), all-or-error."""

from __future__ import annotations

from typing import Any

import pytest

from opslake.errors import QueueError
from opslake.queue import SQS_MAX_BATCH_BYTES, SQS_MAX_ENTRIES, SqsOpsQueue, chunk_for_sqs


def test_chunks_respect_entry_and_byte_limits() -> None:
    small = chunk_for_sqs(["x"] * 25)
    assert [len(b) for b in small] == [10, 10, 5]
    big = chunk_for_sqs(["y" * 60_000] * 9)  # 4 fit under 256 KB
    assert all(sum(len(m) for _, m in b) <= SQS_MAX_BATCH_BYTES for b in big)
    assert all(len(b) <= SQS_MAX_ENTRIES for b in big)
    assert [i for b in big for i, _ in b] == list(range(9))


class FlakySqs:
    """Fails the given entry ids on the first call, or raises for the first N calls."""

    def __init__(self, *, fail_ids: set[str] = frozenset(), sender_fault: bool = False, raise_times: int = 0):
        self.fail_ids = set(fail_ids)
        self.sender_fault = sender_fault
        self.raise_times = raise_times
        self.calls: list[list[str]] = []
        self.delivered: list[str] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append([e["Id"] for e in Entries])
        if self.raise_times:
            self.raise_times -= 1
            raise ConnectionError("connection reset")
        ok, failed = [], []
        for entry in Entries:
            if entry["Id"] in self.fail_ids:
                failed.append({"Id": entry["Id"], "SenderFault": self.sender_fault, "Code": "InternalError"})
                if not self.sender_fault:
                    self.fail_ids.discard(entry["Id"])
            else:
                ok.append({"Id": entry["Id"]})
                self.delivered.append(entry["MessageBody"])
        return {"Successful": ok, "Failed": failed}


def test_partially_failed_entries_are_retried_until_accepted() -> None:
    sqs = FlakySqs(fail_ids={"1", "3"})
    SqsOpsQueue(sqs, "url", backoff_s=0).send(["a", "b", "c", "d"])
    assert sorted(sqs.delivered) == ["a", "b", "c", "d"]
    assert sqs.calls == [["0", "1", "2", "3"], ["1", "3"]]


def test_a_call_that_raises_is_reported_at_once() -> None:
    sqs = FlakySqs(raise_times=1)  # botocore has retried it already: no call repeated on top
    with pytest.raises(QueueError, match=r"did not accept 1 record.*ConnectionError: connection reset"):
        SqsOpsQueue(sqs, "url", backoff_s=0).send(["a"])
    assert sqs.delivered == [] and len(sqs.calls) == 1


def test_persistent_failure_raises_queue_error() -> None:
    sqs = FlakySqs(raise_times=10)
    with pytest.raises(QueueError, match="did not accept 1 record"):
        SqsOpsQueue(sqs, "url", attempts=3, backoff_s=0).send(["a"])
    assert len(sqs.calls) == 1


def test_entries_failed_on_every_attempt_raise_queue_error() -> None:
    class AlwaysFailing(FlakySqs):
        def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            self.fail_ids = {e["Id"] for e in Entries}
            return super().send_message_batch(QueueUrl, Entries)

    sqs = AlwaysFailing()
    with pytest.raises(QueueError, match=r"did not accept 2 record.*InternalError"):
        SqsOpsQueue(sqs, "url", attempts=3, backoff_s=0).send(["a", "b"])
    assert sqs.calls == [["0", "1"]] * 3


def test_sender_fault_is_not_retried() -> None:
    sqs = FlakySqs(fail_ids={"0"}, sender_fault=True)
    with pytest.raises(QueueError, match="InternalError"):
        SqsOpsQueue(sqs, "url", backoff_s=0).send(["a", "b"])
    assert len(sqs.calls) == 1
