"""The ops queue: the only way op records leave the request path (SQS; see ``sqs``)."""

from opslake.queue.sqs import SQS_MAX_BATCH_BYTES, SQS_MAX_ENTRIES, OpsQueue, SqsOpsQueue, chunk_for_sqs

__all__ = ["SQS_MAX_BATCH_BYTES", "SQS_MAX_ENTRIES", "OpsQueue", "SqsOpsQueue", "chunk_for_sqs"]
