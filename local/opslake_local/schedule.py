"""The local EventBridge: functions with ``Schedule`` / ``ScheduleV2`` events run at their cadence.

:func:`schedules` reads every scheduled event of template.yaml; :class:`Scheduler` invokes each
function with the "Scheduled Event" EventBridge would send (or the event's ``Input``) whenever its
expression is due. ``tick(now)`` does one pass, so a test drives it with a fake clock;
``start()`` runs it in a background thread for ``opslake local up``; ``opslake schedule run``
sends one event on demand. As in EventBridge, a rate schedule first fires one period after it
starts, and missed periods are not replayed (one invocation, then the next period from now).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opslake_local.template import Template, TemplateError

log = logging.getLogger(__name__)

_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_CRON = re.compile(r"^cron\((.+)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")  # EventBridge: 1 = Sunday
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}
_DAYS = {d: i for i, d in enumerate(_DAY_NAMES, 1)}
_CRON_HORIZON = timedelta(days=366 * 5)

Invoke = Callable[[str, dict[str, Any]], Any]


class ScheduleError(TemplateError):
    """A schedule expression the local scheduler cannot evaluate (says which and why)."""


# ---- expressions --------------------------------------------------------------------------------
def _cron_field(text: str, low: int, high: int, names: dict[str, int] | None = None) -> set[int] | None:
    """The values a cron field allows (None: any). Supports ``*``, ``?``, lists, ranges, steps."""
    if text in ("*", "?"):
        return None
    allowed: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1

        def value(token: str) -> int:
            token = token.upper()
            if names and token in names:
                return names[token]
            if not token.isdigit():
                raise ScheduleError(f"cron field {text!r}: {token!r} is not supported locally")
            return int(token)

        if base in ("*", "?"):
            start, end = low, high
        elif "-" in base:
            first, last = base.split("-", 1)
            start, end = value(first), value(last)
        else:
            start = value(base)
            end = high if step_text else start
        if not (low <= start <= high and low <= end <= high):
            raise ScheduleError(f"cron field {text!r} is outside {low}-{high}")
        allowed.update(range(start, end + 1, step))
    return allowed


@dataclass(frozen=True)
class Cron:
    """An EventBridge ``cron(minutes hours day-of-month month day-of-week year)``, in UTC."""

    minutes: set[int] | None
    hours: set[int] | None
    days: set[int] | None
    months: set[int] | None
    weekdays: set[int] | None
    years: set[int] | None

    @classmethod
    def parse(cls, fields: str) -> Cron:
        parts = fields.split()
        if len(parts) != 6:
            raise ScheduleError(f"cron({fields}) needs 6 fields (minutes hours day month weekday year)")
        return cls(
            minutes=_cron_field(parts[0], 0, 59),
            hours=_cron_field(parts[1], 0, 23),
            days=_cron_field(parts[2], 1, 31),
            months=_cron_field(parts[3], 1, 12, _MONTHS),
            weekdays=_cron_field(parts[4], 1, 7, _DAYS),
            years=_cron_field(parts[5], 1970, 2199),
        )

    def matches(self, at: datetime) -> bool:
        weekday = at.isoweekday() % 7 + 1  # Monday=1..Sunday=7 → Sunday=1..Saturday=7
        return all(
            allowed is None or value in allowed
            for allowed, value in (
                (self.minutes, at.minute),
                (self.hours, at.hour),
                (self.days, at.day),
                (self.months, at.month),
                (self.weekdays, weekday),
                (self.years, at.year),
            )
        )

    def next_after(self, after: datetime) -> datetime:
        """The first matching minute strictly after ``after``."""
        at = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = after + _CRON_HORIZON
        while at <= limit:  # skip whole years, months, days and hours that cannot match
            if self.years is not None and at.year not in self.years:
                at = at.replace(year=at.year + 1, month=1, day=1, hour=0, minute=0)
            elif self.months is not None and at.month not in self.months:
                at = (at.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            elif (self.days is not None and at.day not in self.days) or (
                self.weekdays is not None and at.isoweekday() % 7 + 1 not in self.weekdays
            ):
                at = at.replace(hour=0, minute=0) + timedelta(days=1)
            elif self.hours is not None and at.hour not in self.hours:
                at = at.replace(minute=0) + timedelta(hours=1)
            elif self.minutes is not None and at.minute not in self.minutes:
                at += timedelta(minutes=1)
            else:
                return at
        raise ScheduleError("cron expression never fires in the next five years")


@dataclass(frozen=True)
class Expression:
    """A parsed ``rate(...)`` or ``cron(...)`` schedule expression."""

    text: str
    period: timedelta | None = None
    cron: Cron | None = None

    @classmethod
    def parse(cls, text: str) -> Expression:
        text = text.strip()
        rate = _RATE.match(text)
        if rate:
            count, unit = int(rate.group(1)), rate.group(2).rstrip("s")
            if count < 1 or (count == 1) != (rate.group(2) == unit):
                raise ScheduleError(f"{text}: EventBridge wants 'rate(1 {unit})' or 'rate(N {unit}s)'")
            return cls(text, period=timedelta(seconds=count * _UNIT_SECONDS[unit]))
        cron = _CRON.match(text)
        if cron:
            return cls(text, cron=Cron.parse(cron.group(1)))
        raise ScheduleError(f"unsupported schedule expression {text!r} (use rate(...) or cron(...))")

    def next_after(self, after: datetime, *, started: datetime) -> datetime:
        """When it fires next after ``after``; a rate counts whole periods from ``started``."""
        if self.period is not None:
            elapsed = max(after - started, timedelta(0))
            return started + self.period * (elapsed // self.period + 1)
        assert self.cron is not None
        return self.cron.next_after(after)


# ---- the template's schedules -------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Schedule:
    """One ``Schedule``/``ScheduleV2`` event of a function."""

    function: str
    event_name: str
    kind: str  # Schedule (EventBridge rule) or ScheduleV2 (EventBridge Scheduler)
    expression: Expression
    rule_arn: str
    input: dict[str, Any] | None = None
    enabled: bool = True

    def event(self, at: datetime, *, region: str, account_id: str) -> dict[str, Any]:
        """What the function receives: the event's Input if it declares one, else the
        "Scheduled Event" EventBridge sends."""
        if self.input is not None:
            return dict(self.input)
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": account_id,
            "time": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": region,
            "resources": [self.rule_arn],
            "detail": {},
        }


def schedules(template: Template) -> list[Schedule]:
    """Every enabled scheduled event in the template (disabled ones are skipped, as in AWS)."""
    found = []
    for kind in ("Schedule", "ScheduleV2"):
        for function, event_name, raw in template._events(kind):
            props = template.resolve(raw)
            text = props.get("Schedule") or props.get("ScheduleExpression")
            if not text:
                raise ScheduleError(f"{function}.{event_name}: no Schedule/ScheduleExpression")
            enabled = props.get("Enabled", True) is not False and props.get("State", "ENABLED") != "DISABLED"
            name = props.get("Name") or f"{template.stack_name}-{function}{event_name}"
            service, resource = (
                ("events", "rule") if kind == "Schedule" else ("scheduler", "schedule/default")
            )
            raw_input = props.get("Input")
            found.append(
                Schedule(
                    function=function,
                    event_name=event_name,
                    kind=kind,
                    expression=Expression.parse(str(text)),
                    rule_arn=f"arn:aws:{service}:{template.region}:{template.account_id}:{resource}/{name}",
                    input=json.loads(raw_input) if isinstance(raw_input, str) else raw_input,
                    enabled=enabled,
                )
            )
    return [s for s in found if s.enabled]


# ---- the scheduler ------------------------------------------------------------------------------
@dataclass
class Run:
    """One invocation the scheduler made: when, which schedule, the event, and how it ended."""

    at: datetime
    schedule: Schedule
    event: dict[str, Any]
    result: Any = None
    error: str | None = None


@dataclass
class Scheduler:
    """Invokes scheduled functions when due; ``clock`` is injectable (tests use a fake one)."""

    template: Template
    invoke: Invoke
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    on_run: Callable[[Run], None] | None = None
    runs: list[Run] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.schedules = schedules(self.template)
        self.started = self.clock()
        self.due = [s.expression.next_after(self.started, started=self.started) for s in self.schedules]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_now(self, schedule: Schedule, at: datetime | None = None) -> Run:
        """Invoke one schedule's function at once (what ``opslake schedule run`` does)."""
        at = at or self.clock()
        event = schedule.event(at, region=self.template.region, account_id=self.template.account_id)
        run = Run(at=at, schedule=schedule, event=event)
        try:
            run.result = self.invoke(schedule.function, event)
        except Exception as exc:  # one failing job must not stop the others
            log.exception("scheduled %s.%s failed", schedule.function, schedule.event_name)
            run.error = f"{type(exc).__name__}: {exc}"
        self.runs.append(run)
        if self.on_run:
            self.on_run(run)
        return run

    def tick(self, now: datetime | None = None) -> list[Run]:
        """Invoke every schedule that is due at ``now`` (once, however many periods were missed)."""
        now = now or self.clock()
        done = []
        for index, schedule in enumerate(self.schedules):
            if self.due[index] <= now:
                done.append(self.run_now(schedule, now))
                self.due[index] = schedule.expression.next_after(now, started=self.started)
        return done

    def _loop(self, poll_s: float) -> None:
        while not self._stop.wait(poll_s):
            try:
                self.tick()
            except Exception:  # the loop must survive anything a tick raises
                log.exception("scheduler tick failed")

    def start(self, poll_s: float = 1.0) -> Scheduler:
        """Tick every ``poll_s`` seconds in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self._loop, args=(poll_s,), name="opslake-scheduler", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=30)


def find_schedule(template: Template, function: str) -> Schedule:
    """The (first) schedule of ``function``; a KeyError names the scheduled functions."""
    for schedule in schedules(template):
        if schedule.function == function:
            return schedule
    known = ", ".join(sorted({s.function for s in schedules(template)})) or "none"
    raise KeyError(
        f"{function!r} has no Schedule/ScheduleV2 event in the template (scheduled functions: {known})"
    )
