"""The scheduled jobs and what they share.

``base`` is the skeleton every job shares (lease, window, report, metrics, wiring); ``trigger``
reads the invocation (a schedule event or a backfill window) and gives the next window;
``lease`` keeps a job's state in S3 under a lease changed only by conditional writes;
``analyzer`` turns new failures into signatures and diagnoses (every 5 minutes); ``consolidator``
turns evidence into playbook entries, measures them and runs compaction (every 30 minutes).
Names resolve lazily (the jobs need pyarrow).
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "base": ("JobParts", "JobReport", "ScheduledJob", "wire"),
        "trigger": ("Backfill", "JobInputError", "parse_trigger", "scheduled_window"),
        "lease": ("Lease", "LeaseLostError", "RunState", "StateError", "StateStore", "run_with_lease"),
        "analyzer": ("Analyzer", "AnalyzerRun", "build_analyzer", "ensure_failures_view"),
        "consolidator": (
            "Consolidator",
            "ConsolidatorRun",
            "approve_entry",
            "build_consolidator",
            "publish",
            "read_entries",
            "retire_entry",
        ),
    },
)
