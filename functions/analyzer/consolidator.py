"""Scheduled consolidator (EventBridge, every 30 minutes): playbook entries, efficacy, snapshot,
compaction. Invoke it by hand with ``{"since": ISO-8601, "until": ISO-8601}`` to re-consolidate
a window (backfill) without moving the watermark.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from opslake.config import get_settings
from opslake.consolidator import build_consolidator
from opslake.jobs import JobInputError, parse_trigger
from opslake.observability import logger, metrics
from opslake.tracing import tracer

settings = get_settings()
settings.require("lake_bucket", "glue_database", "ops_table")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict[str, Any]:
    try:
        backfill = parse_trigger(event)
    except JobInputError as exc:
        logger.error("consolidator invocation refused", error=str(exc))
        return {"status": "invalid_input", "error": str(exc)}
    return build_consolidator(settings).run(backfill).as_dict()
