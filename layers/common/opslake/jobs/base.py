"""The skeleton every scheduled job shares: lease → window → work → commit → report.

A job (the analyzer, the consolidator) implements :meth:`ScheduledJob.work`, which receives the
held lease, the backfill window if any, and the run's report. The base takes and gives back the
lease (:func:`~opslake.jobs.lease.run_with_lease`), turns "another run holds it" and "our lease
expired before the commit" into report statuses with a log line and a metric, times the run,
logs the report, and offers the helpers each job needs: the next scheduled window and a query
that counts its scans. Compaction leases per partition on the same primitive
(:class:`~opslake.lake.conditional.ConditionalJson`) and runs as a step of the consolidator.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from opslake.config import Settings
from opslake.jobs.lease import Lease, StateStore, run_with_lease
from opslake.jobs.trigger import Backfill, scheduled_window
from opslake.models.window import Window
from opslake.observability import logger, metrics
from opslake.query.base import QueryEngine
from opslake.queue import OpsQueue

if TYPE_CHECKING:
    from opslake.llm import LlmClient


@dataclass
class JobReport:
    """What one run did (returned by the handler and logged); each job adds its own counts."""

    status: str = "ok"  # ok | nothing_to_do | busy | lease_lost
    mode: str = "scheduled"  # scheduled | backfill
    window: dict[str, str] | None = None
    bytes_scanned: int = 0
    queries: int = 0
    duration_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


ReportT = TypeVar("ReportT", bound=JobReport)


class ScheduledJob(ABC, Generic[ReportT]):
    """A job run by its schedule (or a backfill), one run at a time under its state's lease."""

    #: The job's name in logs ("analyzer") and in metric names ("AnalyzerLeaseLost").
    name: ClassVar[str]
    report_type: ClassVar[type[JobReport]]

    def __init__(
        self,
        *,
        settings: Settings,
        engine: QueryEngine,
        state: StateStore,
        ops_queue: OpsQueue | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.state = state
        self.ops_queue = ops_queue
        self.clock = clock
        self.table = settings.ops_table

    def run(self, backfill: Backfill | None = None) -> ReportT:
        started = time.perf_counter()
        report: ReportT = self.report_type(mode="backfill" if backfill else "scheduled")  # type: ignore[assignment]
        outcome = run_with_lease(self.state, lambda lease: self.work(lease, backfill, report))
        if outcome == "busy":
            report.status = "busy"
            logger.info(f"another {self.name} run holds the lease: nothing done")
        elif outcome == "lease_lost":
            report.status = "lease_lost"
            metrics.add_metric(name=f"{self.name.capitalize()}LeaseLost", unit="Count", value=1)
            logger.warning(f"{self.name} commit refused (lease expired); the next run redoes the window")
        elif report.mode == "scheduled":
            # the alarm "no scheduled run succeeded within two periods" watches this metric's
            # absence (template.yaml): a crash, a timeout or a schedule that stopped all emit nothing
            metrics.add_metric(name=f"{self.name.capitalize()}Succeeded", unit="Count", value=1)
        self.after_run(report)
        report.duration_ms = round((time.perf_counter() - started) * 1000, 1)
        logger.info(f"{self.name} run", **report.as_dict())
        return report

    @abstractmethod
    def work(self, lease: Lease, backfill: Backfill | None, report: ReportT) -> None:
        """The run's work under the lease; ends with ``self.state.commit`` (or ``nothing_to_do``)."""

    def after_run(self, report: ReportT) -> None:
        """Work after every run, whatever its status (none by default; the consolidator compacts)."""

    # -- helpers -------------------------------------------------------------------------------
    def next_window(
        self, lease: Lease, now: datetime, *, initial_lookback: timedelta, max_span: timedelta
    ) -> Window | None:
        """The scheduled window from the watermark to ``settle`` seconds before ``now``."""
        return scheduled_window(
            lease.state.watermark,
            now,
            settle_s=self.settings.analyzer_settle_s,
            initial_lookback=initial_lookback,
            max_span=max_span,
        )

    def nothing_to_do(self, lease: Lease, report: ReportT) -> None:
        """Give the lease back unchanged: the window is empty."""
        report.status = "nothing_to_do"
        self.state.release(lease)

    def query(self, sql: str, report: ReportT) -> list[dict[str, Any]]:
        """Run ``sql`` on the engine, counting the query and its bytes scanned in the report."""
        result = self.engine.run(sql, timeout_s=self.settings.query_timeout_s)
        report.queries += 1
        report.bytes_scanned += result.bytes_scanned or 0
        return result.records()


@dataclass(frozen=True)
class JobParts:
    """What a scheduled job is wired to in Lambda: this container's clients and the job's state."""

    s3: Any
    engine: QueryEngine
    state: StateStore
    llm: LlmClient | None
    ops_queue: OpsQueue | None


def wire(settings: Settings, *, state_key: str, lease_s: float) -> JobParts:
    """The parts every job builds the same way (the model only when one is configured)."""
    from opslake import runtime

    settings.require("lake_bucket")
    s3 = runtime.client("s3")
    llm = None
    if settings.llm_base_url and settings.llm_model:
        from opslake.llm import LlmClient

        llm = LlmClient.from_settings(settings, s3_client=s3)
    return JobParts(
        s3=s3,
        engine=runtime.query_engine(),
        state=StateStore(s3, settings.lake_bucket, state_key, lease_s=lease_s),
        llm=llm,
        ops_queue=runtime.ops_queue() if settings.ops_queue_url else None,
    )
