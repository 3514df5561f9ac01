"""The ops queue's message format: one or more op records per message, one JSON object per line.

Sending one SQS message per op made a 500-op request 50 SendMessageBatch calls. Records are
packed instead: a message body is the records joined by ``\\n``, as many as fit under the queue's
``MaximumMessageSize``. A record never holds a raw newline (it is compact JSON, which escapes
control characters), so splitting on ``\\n`` gives the records back, and a message of one record
is exactly the one-op message of the old format: messages queued before a deploy still read.
"""

from __future__ import annotations

from collections.abc import Sequence

SEPARATOR = "\n"


def pack(records: Sequence[str], max_message_bytes: int) -> list[tuple[list[int], str]]:
    """Records packed into message bodies of at most ``max_message_bytes`` UTF-8 bytes each, in
    order, each with the indices of the records it holds. A record larger than the limit on its
    own travels alone (SQS refuses it, and the sender reports that)."""
    messages: list[tuple[list[int], str]] = []
    indices: list[int] = []
    parts: list[str] = []
    size = 0
    for index, record in enumerate(records):
        if SEPARATOR in record:  # would split into two records on the way out
            raise ValueError(f"record {index} holds a raw newline; records are compact JSON, one per line")
        record_size = len(record.encode())
        added = record_size + (len(SEPARATOR) if parts else 0)
        if parts and size + added > max_message_bytes:
            messages.append((indices, SEPARATOR.join(parts)))
            indices, parts, size, added = [], [], 0, record_size
        indices.append(index)
        parts.append(record)
        size += added
    if parts:
        messages.append((indices, SEPARATOR.join(parts)))
    return messages


def unpack(body: str) -> list[str]:
    """The records of one message body, old (one record) or packed."""
    return body.split(SEPARATOR)
