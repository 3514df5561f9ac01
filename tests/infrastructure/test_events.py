"""The sample events in events/: valid JSON, documented, and what the functions they are for accept."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure

# What `sam local generate-event cloudwatch scheduled-event` (SAM CLI 1.170.0) writes.
SCHEDULED_EVENT_KEYS = {"id", "detail-type", "source", "account", "time", "region", "resources", "detail"}


def _sample_events(project_root: Path) -> list[Path]:
    return sorted((project_root / "events").glob("*.json"))


def _job_stem(function: str) -> str:
    """AnalyzerFunction -> analyzer: the file-name stem of a scheduled function's events."""
    return function.removesuffix("Function").lower()


@pytest.fixture(scope="module")
def scheduled(functions: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Function -> the logical id of its Schedule event."""
    return {
        name: event_name
        for name, props in functions.items()
        for event_name, event in props.get("Events", {}).items()
        if event["Type"] == "Schedule"
    }


def test_every_sample_event_is_json_and_in_the_readme(project_root: Path) -> None:
    readme = (project_root / "events" / "README.md").read_text(encoding="utf-8")
    paths = _sample_events(project_root)
    assert len(paths) >= 15
    for path in paths:
        json.loads(path.read_text(encoding="utf-8"))
        assert f"`{path.name}`" in readme, f"{path.name} is not described in events/README.md"


def test_every_scheduled_function_has_a_schedule_and_a_backfill_event(
    project_root: Path, scheduled: dict[str, str]
) -> None:
    assert set(scheduled) == {"AnalyzerFunction", "ConsolidatorFunction"}
    for function in scheduled:
        for kind in ("schedule", "backfill"):
            assert (project_root / "events" / f"{_job_stem(function)}-{kind}.json").is_file()


@pytest.mark.parametrize("function", ["AnalyzerFunction", "ConsolidatorFunction"])
def test_schedule_event_is_an_eventbridge_scheduled_event_and_runs_as_scheduled(
    project_root: Path, scheduled: dict[str, str], function: str
) -> None:
    from opslake.jobs.trigger import parse_trigger

    event = json.loads((project_root / "events" / f"{_job_stem(function)}-schedule.json").read_text())
    assert set(event) == SCHEDULED_EVENT_KEYS
    assert event["detail-type"] == "Scheduled Event"
    assert event["source"] == "aws.events"
    assert event["detail"] == {}
    # The rule SAM makes is <stack>-<Function><EventName>-<suffix>; the sample names the stack's rule.
    (rule,) = event["resources"]
    assert rule.startswith("arn:aws:events:us-east-1:123456789012:rule/")
    assert rule.endswith(f"-{function}{scheduled[function]}")
    assert parse_trigger(event) is None


@pytest.mark.parametrize("function", ["AnalyzerFunction", "ConsolidatorFunction"])
def test_backfill_event_is_a_valid_window(project_root: Path, function: str) -> None:
    from opslake.jobs.trigger import parse_trigger

    event = json.loads((project_root / "events" / f"{_job_stem(function)}-backfill.json").read_text())
    assert set(event) == {"since", "until"}
    backfill = parse_trigger(event)
    assert backfill is not None
    assert backfill.since < backfill.until
    assert backfill.since.utcoffset() == timedelta(0)


def test_no_other_sample_event_is_taken_for_a_job_trigger(project_root: Path) -> None:
    """API Gateway and SQS samples are neither schedules nor backfills: a job refuses them."""
    from opslake.jobs.trigger import JobInputError, parse_trigger

    for path in _sample_events(project_root):
        if path.stem.endswith(("-schedule", "-backfill")):
            continue
        with pytest.raises(JobInputError):
            parse_trigger(json.loads(path.read_text()))
