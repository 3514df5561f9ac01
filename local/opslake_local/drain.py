"""The local SQS event source mapping: queue → Lambda, as AWS runs it.

``drain_once`` receives up to the template's BatchSize from the queue, builds the SQS event
Lambda would send, invokes the function and then does what the event source mapping does with
the answer: delete what succeeded, make the failed messages visible again. After the queue's
``maxReceiveCount`` receives, SQS itself (moto too) moves a message to the dead-letter queue.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opslake_local.invoke import FunctionError, Invoker
from opslake_local.stack import LocalStack
from opslake_local.template import SqsSource

log = logging.getLogger(__name__)

SQS_RECEIVE_MAX = 10  # messages per ReceiveMessage call
# Lambda's invocation payload limit: an event source mapping sends a smaller batch than BatchSize
# rather than a larger payload. With packed messages (up to 256 KiB each) 10,000 messages could be
# gigabytes, so the local mapping keeps the same bound.
LAMBDA_PAYLOAD_MAX = 6 * 1024 * 1024
RECORD_OVERHEAD = 2048  # an SQS event record's fields around the body (ids, attributes, ARN)


def forget_moto_messages() -> None:
    """Let moto free the SQS messages it no longer holds.

    moto's models append every instance they make to a class list (``instances_tracked``, read only
    by its dashboard's model listing and its reset), so every message ever sent, and the copy each
    receive returns, stayed alive after it was deleted: the local stack grew by ~7.7 KB per op under
    load (bench_otlp_load.py) and never gave it back. A message still on a queue is held by the
    queue itself, so forgetting the list loses nothing.
    """
    from moto.sqs.models import Message

    Message.instances_tracked.clear()  # type: ignore[attr-defined]


@dataclass
class DrainResult:
    """What one drain pass did: messages received, written (deleted) and left for retry."""

    received: int = 0
    written: int = 0
    failed: int = 0

    def __iadd__(self, other: DrainResult) -> DrainResult:
        self.received += other.received
        self.written += other.written
        self.failed += other.failed
        return self


def _message_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """ReceiveMessage's attribute shape → the lower-camel shape of Lambda SQS records."""
    return {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "stringListValues": value.get("StringListValues", []),
            "binaryListValues": value.get("BinaryListValues", []),
            "dataType": value.get("DataType"),
        }
        for name, value in attributes.items()
    }


def sqs_record(message: dict[str, Any], *, queue_arn: str, region: str) -> dict[str, Any]:
    """One record of the Lambda SQS event for a received message (AWS's exact field names)."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": _message_attributes(message.get("MessageAttributes") or {}),
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


class Drainer:
    """Runs every SQS event source of the template against its queue."""

    def __init__(self, stack: LocalStack, invoker: Invoker) -> None:
        self.stack = stack
        self.invoker = invoker
        self.sqs = stack.client("sqs")
        self.sources = stack.template.sqs_sources()
        self._arns: dict[str, str] = {}
        self._max_bytes: dict[str, int] = {}
        for source in self.sources:
            if not source.report_batch_item_failures:
                log.warning(
                    "%s: FunctionResponseTypes lacks ReportBatchItemFailures; as in AWS, a returned "
                    "batchItemFailures list is ignored and the whole batch counts as processed",
                    source.function,
                )

    def _queue_arn(self, url: str) -> str:
        if url not in self._arns:
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            self._arns[url] = attributes["Attributes"]["QueueArn"]
        return self._arns[url]

    def _max_message_bytes(self, url: str) -> int:
        """The queue's ``MaximumMessageSize``, asked once per queue (not on every poll)."""
        if url not in self._max_bytes:
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
            self._max_bytes[url] = int(attributes["Attributes"].get("MaximumMessageSize", 262_144))
        return self._max_bytes[url]

    def _receive(self, url: str, batch_size: int) -> list[dict[str, Any]]:
        """Up to ``batch_size`` messages, 10 per call, stopping when the queue has no more or when
        one more call could take the event past Lambda's 6 MB payload (each call asks only for as
        many messages as surely fit, so nothing is received and then handed back)."""
        messages: list[dict[str, Any]] = []
        payload = 0
        largest = self._max_message_bytes(url) + RECORD_OVERHEAD
        while len(messages) < batch_size:
            fits = (LAMBDA_PAYLOAD_MAX - payload) // largest
            if fits < 1:
                break
            got = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(SQS_RECEIVE_MAX, batch_size - len(messages), fits),
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not got:
                break
            messages.extend(got)
            payload += sum(len(json.dumps(m).encode()) + RECORD_OVERHEAD for m in got)
        return messages

    def _failed_ids(self, source: SqsSource, records: list[dict[str, Any]], result: Any) -> set[str]:
        """Message ids the mapping keeps for retry, read from the function's answer as AWS does."""
        ids = {r["messageId"] for r in records}
        if not source.report_batch_item_failures:
            return set()
        if result is None or (isinstance(result, dict) and not result.get("batchItemFailures")):
            return set()
        failures = result.get("batchItemFailures") if isinstance(result, dict) else None
        if not isinstance(failures, list):
            return ids  # an unreadable answer fails the whole batch
        failed = {f.get("itemIdentifier") for f in failures if isinstance(f, dict)}
        if not failed <= ids or None in failed or "" in failed:
            return ids  # an unknown or empty itemIdentifier fails the whole batch
        return {str(f) for f in failed}

    def drain_source(self, source: SqsSource) -> DrainResult:
        """One batch for one event source: receive, invoke, delete successes, release failures."""
        url = self.stack.queue_url(source.queue)
        messages = self._receive(url, source.batch_size)
        if not messages:
            return DrainResult()
        arn = self._queue_arn(url)
        records = [sqs_record(m, queue_arn=arn, region=self.stack.region) for m in messages]
        try:
            result = self.invoker.invoke(source.function, {"Records": records})
            failed = self._failed_ids(source, records, result)
        except FunctionError:
            log.exception("%s raised; the whole batch returns to the queue", source.function)
            failed = {r["messageId"] for r in records}
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), SQS_RECEIVE_MAX):
            chunk = done[start : start + SQS_RECEIVE_MAX]
            self.sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
        for message in messages:
            if message["MessageId"] in failed:  # retry at once locally (AWS waits for the timeout)
                self.sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
        forget_moto_messages()
        return DrainResult(received=len(messages), written=len(done), failed=len(failed))

    def drain_once(self) -> DrainResult:
        """One batch per event source."""
        total = DrainResult()
        for source in self.sources:
            total += self.drain_source(source)
        return total

    def drain(self, max_rounds: int = 1000) -> DrainResult:
        """Batches until every queue is empty (failed messages are retried until SQS moves them
        to the DLQ; ``max_rounds`` bounds queues without one)."""
        total = DrainResult()
        for _ in range(max_rounds):
            result = self.drain_once()
            total += result
            if result.received == 0:
                break
        return total


def drain_once(stack: LocalStack, invoker: Invoker) -> DrainResult:
    """One batch per SQS event source of the template; returns the counts."""
    return Drainer(stack, invoker).drain_once()


class BackgroundDrainer:
    """Polls the queues continuously (for ``opslake local up``) until stopped."""

    def __init__(
        self,
        drainer: Drainer,
        *,
        interval_s: float = 1.0,
        on_batch: Callable[[DrainResult], None] | None = None,
    ) -> None:
        self.drainer = drainer
        self.interval_s = interval_s
        self.on_batch = on_batch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="opslake-drainer", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.drainer.drain_once()
            except Exception:  # a transient local error must not kill the poller
                log.exception("drain failed")
                result = DrainResult()
            if result.received and self.on_batch:
                self.on_batch(result)
            if not result.received:
                self._stop.wait(self.interval_s)

    def start(self) -> BackgroundDrainer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the poller to stop and wait for the current batch to finish."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
