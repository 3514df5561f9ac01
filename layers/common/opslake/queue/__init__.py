"""The ops queue: the only way op records leave the request path (SQS; see ``sqs``), packed many
records per message (see ``packing``)."""

from opslake.queue.packing import pack, unpack
from opslake.queue.sqs import (
    DEFAULT_MAX_MESSAGE_BYTES,
    SQS_MAX_BATCH_BYTES,
    SQS_MAX_ENTRIES,
    OpsQueue,
    SqsOpsQueue,
    chunk_for_sqs,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "SQS_MAX_BATCH_BYTES",
    "SQS_MAX_ENTRIES",
    "OpsQueue",
    "SqsOpsQueue",
    "chunk_for_sqs",
    "pack",
    "unpack",
]
