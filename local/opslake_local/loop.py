"""The closed loop, locally: simulated agents → op records → analyzer → consolidator → playbooks
the agents read in the next cycle.

Two fleets run the same seeded tasks in every cycle: one reads ``GET /playbooks`` before each task
and follows the entries that carry a specific fix for one of its mistakes, the other never reads
it. Every step uses the real handlers: the HTTP API, the SQS writer, and the scheduled analyzer and
consolidator invoked with the event EventBridge would send. By default the fleet that reads
playbooks reports its runtime's own ops as OpenTelemetry spans (``/v1/traces``) and the other posts
them to ``/events``, so both ways in feed the same loop.

Two measurements come out (:mod:`opslake_local.experiments`, read after the last cycle): the
consolidator's holdout experiment per entry (keys of the fleet that reads playbooks are each held
out of half of a new entry's readers) and the comparison of the two fleets, with intervals, and
whether they agree in sign.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opslake.config import load_settings
from opslake.query.factory import create_engine
from opslake_local.drain import Drainer
from opslake_local.experiments import WITH_PREFIX, WITHOUT_PREFIX, Experiments, read_experiments
from opslake_local.invoke import Invoker
from opslake_local.schedule import schedules
from opslake_local.simulator import CycleStats, Report, Simulator
from opslake_local.stack import LocalStack

ANALYZER = "AnalyzerFunction"
CONSOLIDATOR = "ConsolidatorFunction"
# The demo's loop runs in seconds, not hours: no settle delay, and a container re-reads the
# playbook snapshot at once. An experiment is judged on 8 target ops per arm (20 deployed): a cycle
# of 6 agents gives an entry a few dozen target ops, so 20 would leave every entry "insufficient"
# for the whole demo. Everything else is the deployed configuration (holdout share 0.5 included).
LOOP_ENV = {
    "OPSLAKE_ANALYZER_SETTLE_S": "0",
    "OPSLAKE_SNAPSHOT_CACHE_S": "0",
    "OPSLAKE_PLAYBOOK_MIN_OPS_TO_JUDGE": "8",
}
LOOP_STEPS = 5  # steps of one cycle that ``on_step`` hears of: two fleets, writer, analyzer, consolidator
__all__ = [
    "ANALYZER",
    "CONSOLIDATOR",
    "LOOP_ENV",
    "LOOP_STEPS",
    "WITHOUT_PREFIX",
    "WITH_PREFIX",
    "CycleRow",
    "LoopResult",
    "run_loop",
    "scheduled_event",
]


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
        return {
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


@dataclass
class LoopResult:
    """Every cycle, and after the last one the experiments and the fleets' comparison."""

    rows: list[CycleRow] = field(default_factory=list)
    experiments: Experiments | None = None

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
) -> LoopResult:
    """Run ``cycles`` cycles of simulate → write → analyze → consolidate for both fleets.
    ``on_cycle`` gets each finished cycle; ``on_step`` the name of each step as it starts
    (:data:`LOOP_STEPS` a cycle), for a progress display. ``with_report``/``without_report``: how
    each fleet's runtime reports (``otlp`` spans or ``events``). After the last cycle the result
    gets the experiments and the fleets' comparison (:func:`~opslake_local.experiments.read_experiments`)."""
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
    ):
        for cycle in range(1, cycles + 1):
            started_at = datetime.now(UTC)
            step(f"cycle {cycle}/{cycles}, agents with playbooks")
            a = with_playbooks.run_cycle(tasks_per_agent)
            step(f"cycle {cycle}/{cycles}, agents without playbooks")
            b = without_playbooks.run_cycle(tasks_per_agent)
            step(f"cycle {cycle}/{cycles}, writer")
            written = drainer.drain().written
            step(f"cycle {cycle}/{cycles}, analyzer")
            analyzer = invoker.invoke(ANALYZER, scheduled_event(stack, ANALYZER))
            written += drainer.drain().written  # the model's calls, when one is configured
            step(f"cycle {cycle}/{cycles}, consolidator")
            consolidator = invoker.invoke(CONSOLIDATOR, scheduled_event(stack, CONSOLIDATOR))
            row = CycleRow(cycle, a, b, written, dict(analyzer), dict(consolidator), started_at)
            result.rows.append(row)
            if on_cycle is not None:
                on_cycle(row)
    engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
    result.experiments = read_experiments(engine, result.rows)
    return result
