"""SqsOpsQueue: records packed per message, batching within SQS limits, retries of partial failures
(not of calls), all-or-error."""

from __future__ import annotations

from typing import Any

import pytest

from opslake.errors import QueueError
from opslake.queue import SQS_MAX_BATCH_BYTES, SQS_MAX_ENTRIES, SqsOpsQueue, chunk_for_sqs, pack, unpack


def test_chunks_respect_entry_and_byte_limits() -> None:
    small = chunk_for_sqs(["x"] * 25)
    assert [len(b) for b in small] == [10, 10, 5]
    big = chunk_for_sqs(["y" * 250_000] * 9)  # 4 fit under 1 MiB
    assert [len(b) for b in big] == [4, 4, 1]
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
    SqsOpsQueue(sqs, "url", backoff_s=0, max_message_bytes=1).send(["a", "b", "c", "d"])
    assert sorted(sqs.delivered) == ["a", "b", "c", "d"]
    assert sqs.calls == [["0", "1", "2", "3"], ["1", "3"]]


def test_a_call_that_raises_is_reported_at_once() -> None:
    sqs = FlakySqs(raise_times=1)  # botocore has retried it already: no call repeated on top
    with pytest.raises(QueueError, match=r"did not accept 1 record.*ConnectionError: connection reset"):
        SqsOpsQueue(sqs, "url", backoff_s=0, max_message_bytes=1).send(["a"])
    assert sqs.delivered == [] and len(sqs.calls) == 1


def test_persistent_failure_raises_queue_error() -> None:
    sqs = FlakySqs(raise_times=10)
    with pytest.raises(QueueError, match="did not accept 1 record"):
        SqsOpsQueue(sqs, "url", attempts=3, backoff_s=0, max_message_bytes=1).send(["a"])
    assert len(sqs.calls) == 1


def test_entries_failed_on_every_attempt_raise_queue_error() -> None:
    class AlwaysFailing(FlakySqs):
        def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            self.fail_ids = {e["Id"] for e in Entries}
            return super().send_message_batch(QueueUrl, Entries)

    sqs = AlwaysFailing()
    with pytest.raises(QueueError, match=r"did not accept 2 record.*InternalError"):
        SqsOpsQueue(sqs, "url", attempts=3, backoff_s=0, max_message_bytes=1).send(["a", "b"])
    assert sqs.calls == [["0", "1"]] * 3


def test_sender_fault_is_not_retried() -> None:
    sqs = FlakySqs(fail_ids={"0"}, sender_fault=True)
    with pytest.raises(QueueError, match="InternalError"):
        SqsOpsQueue(sqs, "url", backoff_s=0, max_message_bytes=1).send(["a", "b"])
    assert len(sqs.calls) == 1


# ---- packing (issue 13): as many records per message as fit under MaximumMessageSize -------------
def test_records_fill_messages_up_to_the_limit_exactly() -> None:
    records = ["a" * 99, "b" * 100, "c" * 50]
    # 99 + 1 (newline) + 100 = 200 bytes: at the limit, one message; the next record starts another
    assert pack(records, 200) == [([0, 1], "a" * 99 + "\n" + "b" * 100), ([2], "c" * 50)]
    assert pack(records, 199) == [([0], "a" * 99), ([1, 2], "b" * 100 + "\n" + "c" * 50)]
    assert [unpack(body) for _, body in pack(records, 200)] == [records[:2], records[2:]]


def test_sizes_are_utf8_bytes_not_characters() -> None:
    assert len(pack(["é" * 60, "é" * 60], 241)) == 1  # 120 + 1 + 120 bytes, 121 characters
    assert len(pack(["é" * 60, "é" * 60], 240)) == 2


def test_a_record_with_a_raw_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="raw newline"):
        pack(['{"a": 1}', '{"a":\n1}'], 1000)


def test_a_one_record_message_is_the_old_format() -> None:
    assert pack(['{"op_id": "x"}'], 1000) == [([0], '{"op_id": "x"}')]


def test_a_failed_packed_message_counts_its_records() -> None:
    sqs = FlakySqs(fail_ids={"0"}, sender_fault=True)
    with pytest.raises(QueueError, match=r"did not accept 3 record"):
        SqsOpsQueue(sqs, "url", backoff_s=0).send(["a", "b", "c"])
    assert len(sqs.calls) == 1
