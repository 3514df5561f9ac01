"""The fleet: agents take turns running seeded tasks against the local HTTP API, one cycle at a time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import httpx
from opentelemetry.sdk.trace.export import SpanExporter

from opslake_local.simulator.agents import SimAgent, create_agents
from opslake_local.simulator.client import TaskClient
from opslake_local.simulator.otlp import REPORTS, Report, SpanReporter, TaskSpans, otlp_exporter
from opslake_local.simulator.plan import TaskPlan, plan_task
from opslake_local.simulator.stats import CycleStats
from opslake_local.simulator.tasks import TaskRun


class Simulator:
    """A fleet of agents; each :meth:`run_cycle` runs ``tasks_per_agent`` tasks per agent.

    Deterministic for a seed: cycle ``c`` of agent ``i`` draws from ``Random("seed:c:i")``.
    ``report`` is how the runtimes report what only they know: ``events`` (``POST /events``) or
    ``otlp`` (OpenTelemetry spans to ``/v1/traces``, exported by ``exporter_for(agent)``, by
    default OTLP/HTTP with the agent's key; flushed at the end of each cycle).
    """

    def __init__(
        self,
        base_url: str,
        agents: Sequence[SimAgent],
        *,
        seed: int = 7,
        playbooks_enabled: bool = True,
        min_confidence: float = 0.0,
        http: httpx.Client | None = None,
        timeout_s: float = 60.0,
        report: Report = "events",
        exporter_for: Callable[[SimAgent], SpanExporter] | None = None,
    ) -> None:
        if not agents:
            raise ValueError("a simulator needs at least one agent")
        if report not in REPORTS:
            raise ValueError(f"report must be one of {', '.join(REPORTS)}, got {report!r}")
        self.base_url = base_url
        self.agents = list(agents)
        self.seed = seed
        self.playbooks_enabled = playbooks_enabled
        self.min_confidence = min_confidence
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._own_http = http is None
        self.report = report
        self.spans = (
            SpanReporter(exporter_for or partial(otlp_exporter, base_url)) if report == "otlp" else None
        )
        self.cycle = 0
        self.stats = CycleStats(cycle=0, playbooks_enabled=playbooks_enabled, report=report)

    @classmethod
    def for_stack(
        cls,
        stack: Any,
        base_url: str,
        *,
        agents: int = 8,
        seed: int = 7,
        prefix: str = "sim-agent",
        **options: Any,
    ) -> Simulator:
        """Agents with keys created in a running :class:`~opslake_local.stack.LocalStack`."""
        return cls(
            base_url,
            create_agents(stack.create_api_key, agents, seed=seed, prefix=prefix),
            seed=seed,
            **options,
        )

    def plans(self, cycle: int, tasks_per_agent: int) -> list[list[TaskPlan]]:
        """The tasks of a cycle, per agent (pure: the same for the same seed and cycle)."""
        plans = []
        for index, agent in enumerate(self.agents):
            rng = random.Random(f"{self.seed}:{cycle}:{index}")
            plans.append([plan_task(rng, agent) for _ in range(tasks_per_agent)])
        return plans

    def run_cycle(self, tasks_per_agent: int = 3) -> CycleStats:
        """Run one cycle: agents take turns, one task each, until each has run its tasks."""
        self.cycle += 1
        started = time.perf_counter()
        self.stats = CycleStats(
            cycle=self.cycle,
            playbooks_enabled=self.playbooks_enabled,
            agents=len(self.agents),
            report=self.report,
        )
        exported, failed = (self.spans.exported, self.spans.failed) if self.spans else (0, 0)
        plans = self.plans(self.cycle, tasks_per_agent)
        for number in range(tasks_per_agent):
            for agent, agent_plans in zip(self.agents, plans, strict=True):
                plan = agent_plans[number]
                session = f"{agent.agent_id}-c{self.cycle:03d}-t{number + 1:02d}"
                self.stats.tasks[plan.task_class] += 1
                with self._task_spans(agent, plan.task_class, session) as spans:
                    client = TaskClient(self.http, self.stats, agent, plan.task_class, session, spans)
                    task = TaskRun(
                        client,
                        plan,
                        playbooks_enabled=self.playbooks_enabled,
                        min_confidence=self.min_confidence,
                    )
                    succeeded = task.run()
                    if spans is not None:
                        spans.finish(succeeded)
                if succeeded:
                    self.stats.tasks_succeeded += 1
        if self.spans is not None:
            # the cycle's spans reach /v1/traces before it returns: the loop's writer runs next
            self.spans.flush()
            self.stats.spans_exported = self.spans.exported - exported
            self.stats.spans_failed = self.spans.failed - failed
        self.stats.elapsed_s = round(time.perf_counter() - started, 3)
        return self.stats

    @contextmanager
    def _task_spans(self, agent: SimAgent, task_class: str, session: str) -> Iterator[TaskSpans | None]:
        """The task's ``invoke_agent`` span when the fleet reports through OTLP, else None."""
        if self.spans is None:
            yield None
            return
        with self.spans.task(agent, task_class, session) as spans:
            yield spans

    def close(self) -> None:
        if self.spans is not None:
            self.spans.shutdown()  # flushes what is left, stops the export threads
        if self._own_http:
            self.http.close()

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
