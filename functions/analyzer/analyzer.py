"""Scheduled analyzer (EventBridge, every 5 minutes): new failures → signatures → diagnoses.

Invoke it by hand with ``{"since": ISO-8601, "until": ISO-8601}`` to re-analyze a window
(backfill) without moving the watermark. The run's summary is the return value and a log line.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from opslake.analyzer import build_analyzer
from opslake.config import get_settings
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
        # A malformed manual invocation: say what was wrong; retrying it would not help.
        logger.error("analyzer invocation refused", error=str(exc))
        return {"status": "invalid_input", "error": str(exc)}
    return build_analyzer(settings).run(backfill).as_dict()
