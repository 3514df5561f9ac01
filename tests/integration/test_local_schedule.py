"""The local scheduler: template Schedule events invoke their function with EventBridge's event,
at the template's cadence (a fake clock drives it), and on demand."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opslake_local.invoke import Invoker
from opslake_local.schedule import Expression, ScheduleError, Scheduler, find_schedule, schedules
from opslake_local.template import Template

pytestmark = pytest.mark.integration

TEMPLATE = """
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Resources:
  TickFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: fn/
      Handler: app.handler
      Runtime: python3.12
      Events:
        EveryFiveMinutes:
          Type: Schedule
          Properties:
            Schedule: rate(5 minutes)
        Paused:
          Type: Schedule
          Properties:
            Schedule: rate(1 minute)
            Enabled: false
  NightlyFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: fn/
      Handler: app.handler
      Runtime: python3.12
      Events:
        Nightly:
          Type: ScheduleV2
          Properties:
            ScheduleExpression: cron(30 2 * * ? *)
            Input: '{"job": "nightly"}'
"""

HANDLER = """
import json
from pathlib import Path

LOG = Path(__file__).parent / "invocations.jsonl"


def handler(event, context):
    with LOG.open("a") as log:
        log.write(json.dumps({"function": context.function_name, "event": event}) + "\\n")
    return {"ok": True}
"""


class FakeClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@pytest.fixture
def template(tmp_path: Path) -> Template:
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "app.py").write_text(HANDLER)
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    return Template(tmp_path / "template.yaml")


def _invocations(template: Template) -> list[dict]:
    log = template.root / "fn" / "invocations.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_schedules_are_read_from_the_template(template: Template) -> None:
    found = {(s.function, s.event_name): s for s in schedules(template)}
    assert set(found) == {("TickFunction", "EveryFiveMinutes"), ("NightlyFunction", "Nightly")}
    assert found[("TickFunction", "EveryFiveMinutes")].expression.period == timedelta(minutes=5)
    assert found[("NightlyFunction", "Nightly")].input == {"job": "nightly"}


def test_a_fake_clock_drives_two_ticks_into_two_invocations(template: Template) -> None:
    start = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
    clock = FakeClock(start)
    scheduler = Scheduler(template, Invoker(template).invoke, clock=clock)

    assert scheduler.tick(clock.advance(minutes=4, seconds=59)) == []  # not yet due
    first = scheduler.tick(clock.advance(seconds=1))  # 10:05
    assert scheduler.tick(clock.advance(minutes=2)) == []  # 10:07
    second = scheduler.tick(clock.advance(minutes=3))  # 10:10

    assert [r.schedule.function for r in first + second] == ["TickFunction", "TickFunction"]
    assert all(r.error is None and r.result == {"ok": True} for r in first + second)
    calls = _invocations(template)
    assert len(calls) == 2
    rule_arn = "arn:aws:events:us-east-1:123456789012:rule/opslake-local-TickFunctionEveryFiveMinutes"
    for call, expected_time in zip(calls, ("2026-11-21T10:05:00Z", "2026-11-21T10:10:00Z"), strict=True):
        event = call["event"]
        assert call["function"] == "opslake-local-TickFunction"
        assert event["source"] == "aws.events"
        assert event["detail-type"] == "Scheduled Event"
        assert event["resources"] == [rule_arn]
        assert event["time"] == expected_time
        assert event["detail"] == {}
        assert event["account"] == "123456789012" and event["region"] == "us-east-1"
        assert set(event) == {
            "version",
            "id",
            "detail-type",
            "source",
            "account",
            "time",
            "region",
            "resources",
            "detail",
        }
    assert calls[0]["event"]["id"] != calls[1]["event"]["id"]


def test_missed_periods_fire_once_and_cron_fires_at_its_minute(template: Template) -> None:
    clock = FakeClock(datetime(2026, 11, 21, 2, 0, 0, tzinfo=UTC))
    scheduler = Scheduler(template, Invoker(template).invoke, clock=clock)
    runs = scheduler.tick(clock.advance(minutes=31))  # 02:31: 6 rate periods missed, cron due at 02:30
    assert sorted(r.schedule.function for r in runs) == ["NightlyFunction", "TickFunction"]
    nightly = next(r for r in runs if r.schedule.function == "NightlyFunction")
    assert nightly.event == {"job": "nightly"}  # a declared Input replaces the Scheduled Event
    assert scheduler.tick(clock.advance(minutes=1)) == []  # 02:32: next rate at 02:35
    assert [r.schedule.function for r in scheduler.tick(clock.advance(minutes=3))] == ["TickFunction"]


def test_run_on_demand_and_errors(template: Template) -> None:
    scheduler = Scheduler(template, Invoker(template).invoke)
    run = scheduler.run_now(find_schedule(template, "TickFunction"))
    assert run.event["detail-type"] == "Scheduled Event" and run.result == {"ok": True}
    with pytest.raises(KeyError, match="scheduled functions: NightlyFunction, TickFunction"):
        find_schedule(template, "Nope")


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        ("rate(1 hour)", "10:20", "11:20"),
        ("cron(0/15 * * * ? *)", "10:20", "10:30"),
        ("cron(15 10 ? * MON-FRI *)", "10:20", "2026-11-23 10:15"),  # 2026-11-21 is a Saturday
    ],
)
def test_expressions(text: str, after: str, expected: str) -> None:
    base = datetime(2026, 11, 21, tzinfo=UTC)
    at = base.replace(hour=int(after[:2]), minute=int(after[3:]))
    got = Expression.parse(text).next_after(at, started=at)
    assert got.strftime("%H:%M" if len(expected) == 5 else "%Y-%m-%d %H:%M") == expected


@pytest.mark.parametrize(
    "text", ["rate(5 minute)", "rate(1 minutes)", "every 5 minutes", "cron(0 12 L * ? *)"]
)
def test_bad_expressions_are_refused(text: str) -> None:
    with pytest.raises(ScheduleError):
        Expression.parse(text)
