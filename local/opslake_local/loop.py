"""The closed loop, locally: simulated agents → op records → analyzer → consolidator → playbooks
the agents read in the next cycle.

Two fleets run the same seeded tasks in every cycle: one reads ``GET /playbooks`` before each task
and follows the entries that carry a specific fix for one of its mistakes, the other never reads
it. Every step uses the real handlers: the HTTP API, the SQS writer, and the scheduled analyzer and
consolidator invoked with the event EventBridge would send. By default the fleet that reads
playbooks reports its runtime's own ops as OpenTelemetry spans (``/v1/traces``) and the other posts
them to ``/events``, so both ways in feed the same loop.

With ``helpdesk_agents`` the cycles also run a second world (:mod:`opslake_local.worlds.helpdesk`):
two fleets of service-desk agents with tools of their own, the same seed, one reading playbooks and
one not, both reporting their tool calls as OpenTelemetry spans. One writer drain, one analyzer and
one consolidator run per cycle serve both worlds, as they would serve every runtime of a team.

Two measurements come out per world (:mod:`opslake_local.experiments`, read after the last cycle):
the consolidator's holdout experiment per entry (keys of the fleet that reads playbooks are each
held out of half of a new entry's readers) and the comparison of the two fleets, with intervals,
and whether they agree in sign; for the second world also a scorecard per planted mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opslake.config import load_settings
from opslake.query.factory import create_engine
from opslake_local.drain import Drainer
from opslake_local.experiments import (
    HELPDESK,
    WITH_PREFIX,
    WITHOUT_PREFIX,
    Experiments,
    Scorecard,
    read_experiments,
    read_scorecard,
)
from opslake_local.invoke import Invoker
from opslake_local.schedule import schedules
from opslake_local.simulator import CycleStats, Report, Simulator
from opslake_local.stack import LocalStack
from opslake_local.worlds.helpdesk import HelpdeskFleet

ANALYZER = "AnalyzerFunction"
CONSOLIDATOR = "ConsolidatorFunction"
# The demo's loop runs in seconds, not hours: no settle delay, and a container re-reads the
# playbook snapshot at once. An experiment is judged on 8 target ops per arm (20 deployed): a cycle
# of 6 agents gives an entry a few dozen target ops, so 20 would leave every entry "insufficient"
# for the whole demo. Two worlds share the lake and a cycle is one analyzer run: up to 40 signatures
# are diagnosed per run (20 deployed, where a signature past the budget waits 5 minutes for the next
# run; here it would wait a cycle, and a world's entries would depend on the other's traffic).
# Everything else is the deployed configuration (holdout share 0.5 included).
LOOP_ENV = {
    "OPSLAKE_ANALYZER_SETTLE_S": "0",
    "OPSLAKE_SNAPSHOT_CACHE_S": "0",
    "OPSLAKE_PLAYBOOK_MIN_OPS_TO_JUDGE": "8",
    "OPSLAKE_DIAGNOSIS_BUDGET": "40",
}
LOOP_STEPS = 5  # steps of one cycle that ``on_step`` hears of: two fleets, writer, analyzer, consolidator
HELPDESK_STEPS = 3  # and the second world's two fleets and their writer, when it runs
__all__ = [
    "ANALYZER",
    "CONSOLIDATOR",
    "HELPDESK_STEPS",
    "LOOP_ENV",
    "LOOP_STEPS",
    "WITHOUT_PREFIX",
    "WITH_PREFIX",
    "CycleRow",
    "HelpdeskResult",
    "LoopResult",
    "WorldRow",
    "run_loop",
    "scheduled_event",
]


@dataclass(frozen=True)
class WorldRow:
    """One cycle of a world's two fleets, with the cycle's consolidator run and start (what
    :mod:`opslake_local.experiments` reads of a cycle, for any world)."""

    cycle: int
    with_playbooks: CycleStats
    without_playbooks: CycleStats
    consolidator: dict[str, Any]
    started_at: datetime


@dataclass
class CycleRow:
    """One cycle of both fleets and what the scheduled jobs made of it."""

    cycle: int
    with_playbooks: CycleStats
    without_playbooks: CycleStats
    messages_written: int  # queue messages the writer landed (each holds many ops)
    analyzer: dict[str, Any]
    consolidator: dict[str, Any]
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))  # before its first fleet ran
    #: the second world's fleets in this cycle (None: the loop ran the staffing world only)
    helpdesk_with: CycleStats | None = None
    helpdesk_without: CycleStats | None = None

    @property
    def helpdesk(self) -> WorldRow | None:
        """The second world's side of this cycle, shaped like any world's cycle."""
        if self.helpdesk_with is None or self.helpdesk_without is None:
            return None
        return WorldRow(
            self.cycle, self.helpdesk_with, self.helpdesk_without, self.consolidator, self.started_at
        )

    @property
    def new_signatures(self) -> int:
        return int(self.analyzer.get("signatures_new", 0))

    @property
    def diagnoses(self) -> int:
        return int(self.analyzer.get("diagnoses", 0))

    @property
    def active_entries(self) -> int:
        return int(self.consolidator.get("active_entries", 0))

    def summary(self) -> dict[str, Any]:
        summary = {
            "cycle": self.cycle,
            "messages_written": self.messages_written,
            "failure_rate_with": round(self.with_playbooks.failure_rate, 4),
            "failure_rate_without": round(self.without_playbooks.failure_rate, 4),
            "new_signatures": self.new_signatures,
            "diagnoses": self.diagnoses,
            "active_entries": self.active_entries,
            "entries_followed": sum(self.with_playbooks.entries_followed.values()),
            "refused_by_gate": sum(
                int(n or 0) for n in (self.consolidator.get("refused_by_gate") or {}).values()
            ),
        }
        if self.helpdesk_with is not None and self.helpdesk_without is not None:
            summary |= {
                "helpdesk_failure_rate_with": round(self.helpdesk_with.failure_rate, 4),
                "helpdesk_failure_rate_without": round(self.helpdesk_without.failure_rate, 4),
                "helpdesk_entries_followed": sum(self.helpdesk_with.entries_followed.values()),
            }
        return summary


@dataclass
class HelpdeskResult:
    """The second world after the last cycle: its experiments and its scorecard per planted mistake."""

    experiments: Experiments
    scorecard: Scorecard

    def summary(self, rows: list[CycleRow]) -> dict[str, Any]:
        """Like :meth:`LoopResult.summary` for this world's fleets, with the scorecard's ``mistakes``."""
        cycles = []
        for row in rows:
            world = row.helpdesk
            if world is None:
                continue
            for arm, stats in (
                ("with playbooks", world.with_playbooks),
                ("without playbooks", world.without_playbooks),
            ):
                cycles.append({**stats.to_dict(), "cycle": row.cycle, "arm": arm})
        return {"cycles": cycles, **self.experiments.summary(), **self.scorecard.summary()}


@dataclass
class LoopResult:
    """Every cycle, and after the last one the experiments and the fleets' comparison."""

    rows: list[CycleRow] = field(default_factory=list)
    experiments: Experiments | None = None
    helpdesk: HelpdeskResult | None = None  # the second world's, when the loop ran it

    def failure_rate(self, *, with_playbooks: bool, cycles: slice = slice(None)) -> float:
        """Failed tool calls / tool calls over the chosen cycles, for one fleet."""
        stats = [r.with_playbooks if with_playbooks else r.without_playbooks for r in self.rows[cycles]]
        calls = sum(s.tool_calls for s in stats)
        return sum(s.tool_failures for s in stats) / calls if calls else 0.0

    def summary(self) -> dict[str, Any]:
        """The report's demo summary: per-cycle failure rates of both fleets, the totals, and (once
        read) ``experiments`` per entry and the ``agreement`` of the holdout and fleet estimates."""
        cycles = []
        for row in self.rows:
            for arm, stats in (
                ("with playbooks", row.with_playbooks),
                ("without playbooks", row.without_playbooks),
            ):
                cycles.append({**stats.to_dict(), "cycle": row.cycle, "arm": arm})
        later = slice(1, None)  # the first cycle runs before any entry exists
        return {
            "cycles": cycles,
            "failure rate with playbooks (cycles 2+)": round(
                self.failure_rate(with_playbooks=True, cycles=later), 4
            ),
            "failure rate without playbooks (cycles 2+)": round(
                self.failure_rate(with_playbooks=False, cycles=later), 4
            ),
            "per cycle": [row.summary() for row in self.rows],
            **(self.experiments.summary() if self.experiments is not None else {}),
            **({"helpdesk": self.helpdesk.summary(self.rows)} if self.helpdesk is not None else {}),
        }


def scheduled_event(stack: LocalStack, function: str) -> dict[str, Any]:
    """The event EventBridge sends ``function`` on its schedule (from template.yaml)."""
    for schedule in schedules(stack.template):
        if schedule.function == function:
            return schedule.event(
                datetime.now(UTC), region=stack.region, account_id=stack.template.account_id
            )
    raise LookupError(f"{function} has no schedule in template.yaml")


def run_loop(
    stack: LocalStack,
    invoker: Invoker,
    base_url: str,
    *,
    cycles: int = 4,
    agents: int = 6,
    tasks_per_agent: int = 3,
    seed: int = 7,
    on_cycle: Callable[[CycleRow], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    with_report: Report = "otlp",
    without_report: Report = "events",
    helpdesk_agents: int = 0,
    helpdesk_tasks: int = 6,
) -> LoopResult:
    """Run ``cycles`` cycles of simulate → write → analyze → consolidate for both fleets.
    ``on_cycle`` gets each finished cycle; ``on_step`` the name of each step as it starts
    (:data:`LOOP_STEPS` a cycle, :data:`HELPDESK_STEPS` more with the second world), for a progress
    display. ``with_report``/``without_report``: how each fleet's runtime reports (``otlp`` spans or
    ``events``). ``helpdesk_agents`` > 0 runs the second world too: two fleets of that many agents,
    ``helpdesk_tasks`` tasks per agent per cycle, after the staffing fleets (which therefore see
    the same traffic as without it). After the last cycle the result gets the experiments and the
    fleets' comparison (:func:`~opslake_local.experiments.read_experiments`), per world."""
    drainer = Drainer(stack, invoker)
    step = on_step or (lambda _what: None)
    result = LoopResult()
    with (
        Simulator.for_stack(
            stack, base_url, agents=agents, seed=seed, prefix=WITH_PREFIX, report=with_report
        ) as with_playbooks,
        Simulator.for_stack(
            stack,
            base_url,
            agents=agents,
            seed=seed,
            prefix=WITHOUT_PREFIX,
            playbooks_enabled=False,
            report=without_report,
        ) as without_playbooks,
        _helpdesk_fleets(stack, base_url, helpdesk_agents, seed) as helpdesk,
    ):
        for cycle in range(1, cycles + 1):
            started_at = datetime.now(UTC)
            step(f"cycle {cycle}/{cycles}, agents with playbooks")
            a = with_playbooks.run_cycle(tasks_per_agent)
            step(f"cycle {cycle}/{cycles}, agents without playbooks")
            b = without_playbooks.run_cycle(tasks_per_agent)
            step(f"cycle {cycle}/{cycles}, writer")
            written = drainer.drain().written
            desk: tuple[CycleStats | None, CycleStats | None] = (None, None)
            if helpdesk is not None:
                # after the staffing fleets' ops are written: moto's SQS slows down as its queue grows
                # (FACTS.md), and one queue of both worlds' messages took ~2 s more per cycle to drain
                step(f"cycle {cycle}/{cycles}, service desk agents with playbooks")
                desk_with = helpdesk[0].run_cycle(helpdesk_tasks)
                step(f"cycle {cycle}/{cycles}, service desk agents without playbooks")
                desk = (desk_with, helpdesk[1].run_cycle(helpdesk_tasks))
                step(f"cycle {cycle}/{cycles}, writer (service desk)")
                written += drainer.drain().written
            step(f"cycle {cycle}/{cycles}, analyzer")
            analyzer = invoker.invoke(ANALYZER, scheduled_event(stack, ANALYZER))
            written += drainer.drain().written  # the model's calls, when one is configured
            step(f"cycle {cycle}/{cycles}, consolidator")
            consolidator = invoker.invoke(CONSOLIDATOR, scheduled_event(stack, CONSOLIDATOR))
            row = CycleRow(cycle, a, b, written, dict(analyzer), dict(consolidator), started_at, *desk)
            result.rows.append(row)
            if on_cycle is not None:
                on_cycle(row)
    engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
    result.experiments = read_experiments(engine, result.rows)
    world_rows = [world for world in (row.helpdesk for row in result.rows) if world is not None]
    if world_rows:
        result.helpdesk = HelpdeskResult(
            read_experiments(engine, world_rows, world=HELPDESK), read_scorecard(engine, world_rows)
        )
    return result


@contextmanager
def _helpdesk_fleets(
    stack: LocalStack, base_url: str, agents: int, seed: int
) -> Iterator[tuple[HelpdeskFleet, HelpdeskFleet] | None]:
    """The second world's two fleets (keys ``hd-on-*`` read playbooks, ``hd-off-*`` never do), or
    None when it does not run."""
    if agents <= 0:
        yield None
        return
    with (
        HelpdeskFleet.for_stack(stack, base_url, agents=agents, seed=seed, prefix=HELPDESK.with_prefix) as on,
        HelpdeskFleet.for_stack(
            stack, base_url, agents=agents, seed=seed, prefix=HELPDESK.without_prefix, playbooks_enabled=False
        ) as off,
    ):
        yield on, off
