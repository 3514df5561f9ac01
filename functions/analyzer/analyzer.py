"""Scheduled analyzer (EventBridge, every 5 minutes): new failures → signatures → diagnoses.

Invoke it by hand with ``{"since": ISO-8601, "until": ISO-8601}`` to re-analyze a window
(backfill) without moving the watermark. The run's summary is the return value and a log line.
"""

from opslake import runtime
from opslake.config import get_settings
from opslake.jobs.analyzer import build_analyzer

settings = get_settings()
settings.require("lake_bucket", "glue_database", "ops_table")

handler = runtime.job_handler("analyzer", lambda backfill: build_analyzer(settings).run(backfill).as_dict())
