"""The ops queue: the only way op records leave the request path.

Packs op records into messages (as many as fit under the queue's ``MaximumMessageSize``; see
:mod:`opslake.queue.packing`), sends them in SQS batches (10 entries, ≤ 1 MiB per call), retries
entries SQS reports as failed, and raises :class:`QueueError` if any message is still not
accepted, so callers can answer 503 instead of acknowledging a record that was never persisted.
A call that raises (throttling, network, 5xx) was already retried by botocore (see
:func:`opslake.runtime.boto_config`) and is reported at once.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from opslake.errors import QueueError
from opslake.queue.packing import pack

SQS_MAX_ENTRIES = 10
#: SendMessageBatch's limit on the sum of its bodies (raised from 256 KiB with 1 MiB messages).
SQS_MAX_BATCH_BYTES = 1024 * 1024
#: SQS's default ``MaximumMessageSize``; the ops queue states it in template.yaml.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024


class OpsQueue(ABC):
    """Where queued op records go. ``send`` is all-or-error."""

    @abstractmethod
    def send(self, messages: Sequence[str]) -> None:
        """Persist every op record (``QueuedOp.to_message``) or raise :class:`QueueError`."""


def chunk_for_sqs(messages: Sequence[str]) -> list[list[tuple[int, str]]]:
    """Split message bodies into SendMessageBatch calls: ≤ 10 entries and ≤ 1 MiB each."""
    batches: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    size = 0
    for index, body in enumerate(messages):
        body_size = len(body.encode())
        if current and (len(current) == SQS_MAX_ENTRIES or size + body_size > SQS_MAX_BATCH_BYTES):
            batches.append(current)
            current, size = [], 0
        current.append((index, body))
        size += body_size
    if current:
        batches.append(current)
    return batches


class SqsOpsQueue(OpsQueue):
    """SQS-backed queue: records packed into messages of at most ``max_message_bytes`` (the
    queue's ``MaximumMessageSize``), with bounded retries of partially failed batches
    (``attempts`` calls at most)."""

    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        attempts: int = 3,
        backoff_s: float = 0.05,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self._client = client
        self._queue_url = queue_url
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._max_message_bytes = max_message_bytes

    def send(self, messages: Sequence[str]) -> None:
        packed = pack(messages, self._max_message_bytes)
        records_in = [len(indices) for indices, _ in packed]
        for batch in chunk_for_sqs([body for _, body in packed]):
            self._send_batch(batch, records_in)

    def _send_batch(self, batch: list[tuple[int, str]], records_in: list[int]) -> None:
        # SendMessageBatch can succeed as a call while listing some entries as Failed: botocore sees
        # a 200 and does not retry those, so this loop resends them. Exceptions of the call itself
        # come after botocore's own retries: repeating the call here would only multiply them.
        pending = {str(index): body for index, body in batch}
        last_error = ""

        def records_pending() -> int:  # what the caller sent were records: count those
            return sum(records_in[int(entry_id)] for entry_id in pending)

        for attempt in range(self._attempts):
            if attempt:
                time.sleep(self._backoff_s * 2 ** (attempt - 1))
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self._queue_url,
                    Entries=[{"Id": entry_id, "MessageBody": body} for entry_id, body in pending.items()],
                )
            except Exception as exc:  # botocore errors, throttling, network: retried by botocore already
                raise QueueError(
                    f"the ops queue did not accept {records_pending()} record(s): {type(exc).__name__}: {exc}"
                ) from exc
            failed = response.get("Failed", [])
            for entry in response.get("Successful", []):
                pending.pop(entry["Id"], None)
            if not pending:
                return
            sender_faults = [f for f in failed if f.get("SenderFault")]
            last_error = (
                "; ".join(f"{f.get('Code')}: {f.get('Message')}" for f in failed) or "entries missing"
            )
            if sender_faults:  # our own message was refused: retrying cannot help
                break
        raise QueueError(f"the ops queue did not accept {records_pending()} record(s): {last_error}")
