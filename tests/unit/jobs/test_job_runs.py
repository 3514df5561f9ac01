"""A scheduled job's run says it succeeded (metric ``<Job>Succeeded``) only when its scheduled work
ran to the end: template.yaml alarms when that metric is missing for two periods of the schedule,
so a crash, a lost lease, a busy lease or a backfill must not count."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from opslake.config import Settings
from opslake.jobs import base
from opslake.jobs.base import JobReport, ScheduledJob
from opslake.jobs.lease import Lease, LeaseLostError
from opslake.jobs.trigger import Backfill


class FakeState:
    """The lease primitive in memory: free, or held by another run."""

    def __init__(self, *, held: bool = False) -> None:
        self.held = held
        self.released = 0

    def acquire(self) -> object | None:
        return None if self.held else object()

    def release(self, lease: object) -> None:
        self.released += 1


class ProbeJob(ScheduledJob[JobReport]):
    name: ClassVar[str] = "probe"
    report_type = JobReport

    def __init__(self, state: FakeState, outcome: str) -> None:
        super().__init__(settings=Settings(), engine=None, state=state)  # type: ignore[arg-type]
        self.outcome = outcome

    def work(self, lease: Lease, backfill: Backfill | None, report: JobReport) -> None:
        if self.outcome == "crash":
            raise RuntimeError("the engine failed")
        if self.outcome == "lease_lost":
            raise LeaseLostError("commit refused")
        if self.outcome == "nothing_to_do":
            self.nothing_to_do(lease, report)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    seen: list[tuple[str, float]] = []

    def add_metric(*, name: str, unit: Any, value: float) -> None:
        seen.append((name, value))

    monkeypatch.setattr(base.metrics, "add_metric", add_metric)
    return seen


@pytest.mark.parametrize("outcome", ["ok", "nothing_to_do"])
def test_a_scheduled_run_that_finishes_counts_as_succeeded(outcome: str, counted: list) -> None:
    report = ProbeJob(FakeState(), outcome).run()
    assert report.status == outcome
    assert counted == [("ProbeSucceeded", 1)]


def test_a_busy_or_lost_lease_is_no_success(counted: list) -> None:
    assert ProbeJob(FakeState(held=True), "ok").run().status == "busy"
    assert ProbeJob(FakeState(), "lease_lost").run().status == "lease_lost"
    assert counted == [("ProbeLeaseLost", 1)]


def test_a_crashed_run_is_no_success(counted: list) -> None:
    state = FakeState()
    with pytest.raises(RuntimeError):
        ProbeJob(state, "crash").run()
    assert counted == [] and state.released == 1


def test_a_backfill_is_no_scheduled_success(counted: list) -> None:
    window = Backfill(since=datetime(2026, 11, 1, tzinfo=UTC), until=datetime(2026, 11, 2, tzinfo=UTC))
    assert ProbeJob(FakeState(), "ok").run(window).mode == "backfill"
    assert counted == []
