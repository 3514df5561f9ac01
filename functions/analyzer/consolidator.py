"""Scheduled consolidator (EventBridge, every 30 minutes): playbook entries, their holdout
experiments, snapshot, compaction. Invoke it by hand with ``{"since": ISO-8601, "until": ISO-8601}`` to re-consolidate
a window (backfill) without moving the watermark.
"""

from opslake import runtime
from opslake.config import get_settings
from opslake.jobs.consolidator import build_consolidator

settings = get_settings()
settings.require("lake_bucket", "glue_database", "ops_table")

handler = runtime.job_handler(
    "consolidator", lambda backfill: build_consolidator(settings).run(backfill).as_dict()
)
