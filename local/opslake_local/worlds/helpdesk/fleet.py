"""A fleet of service-desk agents: each works in the fleet's own copy of the world and reports its
tool calls as OpenTelemetry spans to ``POST /v1/traces``, one cycle at a time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import httpx
from opentelemetry.sdk.trace.export import SpanExporter

from opslake_local.simulator.agents import SimAgent, create_agents
from opslake_local.simulator.client import TaskClient
from opslake_local.simulator.otlp import SpanReporter, otlp_exporter
from opslake_local.simulator.stats import CycleStats
from opslake_local.worlds.helpdesk.modes import MODES
from opslake_local.worlds.helpdesk.plan import HelpdeskPlan, plan_task
from opslake_local.worlds.helpdesk.runtime import HelpdeskRun
from opslake_local.worlds.helpdesk.world import HelpdeskWorld

#: The seed's salt of this world's agent profiles and plans (independent of the staffing fleet's).
SALT = "helpdesk"


class HelpdeskFleet:
    """Agents of the service desk; each :meth:`run_cycle` runs ``tasks_per_agent`` tasks per agent.

    Deterministic for a seed: the world starts from the same state, cycle ``c`` of agent ``i`` draws
    from ``Random("helpdesk:seed:c:i")``, and spans are exported when a cycle ends. With
    ``playbooks_enabled=False`` agents never read ``GET /playbooks`` (the "without" fleet).
    ``exporter_for(agent)`` builds each agent's span exporter (default: OTLP/HTTP with its key).
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
        exporter_for: Callable[[SimAgent], SpanExporter] | None = None,
    ) -> None:
        if not agents:
            raise ValueError("a fleet needs at least one agent")
        self.agents = list(agents)
        self.seed = seed
        self.playbooks_enabled = playbooks_enabled
        self.min_confidence = min_confidence
        self.world = HelpdeskWorld(seed)
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._own_http = http is None
        self.spans = SpanReporter(exporter_for or partial(otlp_exporter, base_url))
        self.cycle = 0
        self.stats = self._new_stats()
        self._not_before: dict[str, int] = {}  # agent → when its next read may be (ns)

    @classmethod
    def for_stack(
        cls,
        stack: Any,
        base_url: str,
        *,
        agents: int = 8,
        seed: int = 7,
        prefix: str = "hd-on",
        **options: Any,
    ) -> HelpdeskFleet:
        """Agents with keys created in a running :class:`~opslake_local.stack.LocalStack`."""
        created = create_agents(
            stack.create_api_key, agents, seed=seed, prefix=prefix, modes=MODES, salt=SALT
        )
        return cls(base_url, created, seed=seed, **options)

    def _new_stats(self) -> CycleStats:
        return CycleStats(
            cycle=self.cycle,
            playbooks_enabled=self.playbooks_enabled,
            agents=len(self.agents),
            report="otlp",
            tool_calls_in_spans=True,
        )

    def plans(self, cycle: int, tasks_per_agent: int) -> list[list[HelpdeskPlan]]:
        """The tasks of a cycle, per agent (pure: the same for the same seed and cycle). Each task's
        ticket is ``TCK-`` + a number no other task of the fleet uses."""
        plans = []
        for index, agent in enumerate(self.agents):
            rng = random.Random(f"{SALT}:{self.seed}:{cycle}:{index}")
            first = 10_001 + ((cycle - 1) * len(self.agents) + index) * tasks_per_agent
            plans.append(
                [plan_task(rng, agent, self.world, f"TCK-{first + n}") for n in range(tasks_per_agent)]
            )
        return plans

    def run_cycle(self, tasks_per_agent: int = 6) -> CycleStats:
        """Run one cycle: agents take turns, one task each, until each has run its tasks; the cycle's
        spans reach ``/v1/traces`` before it returns."""
        self.cycle += 1
        started = time.perf_counter()
        self.stats = self._new_stats()
        exported, failed = self.spans.exported, self.spans.failed
        plans = self.plans(self.cycle, tasks_per_agent)
        for number in range(tasks_per_agent):
            for agent, agent_plans in zip(self.agents, plans, strict=True):
                plan = agent_plans[number]
                session = f"{agent.agent_id}-c{self.cycle:03d}-t{number + 1:02d}"
                self.stats.tasks[plan.task_class] += 1
                # the previous task's calls may run a millisecond or two ahead of the clock: this
                # task's read of the playbook comes after them, as it does in time
                wait = self._not_before.get(agent.agent_id, 0) - time.time_ns()
                if wait > 0:
                    time.sleep(wait / 1e9)
                with self.spans.task(agent, plan.task_class, session) as spans:
                    client = TaskClient(self.http, self.stats, agent, plan.task_class, session, spans)
                    run = HelpdeskRun(
                        self.world,
                        client,
                        spans,
                        plan,
                        playbooks_enabled=self.playbooks_enabled,
                        min_confidence=self.min_confidence,
                    )
                    succeeded = run.run()
                    spans.finish(succeeded)
                    self._not_before[agent.agent_id] = spans.next_start_ns
                if succeeded:
                    self.stats.tasks_succeeded += 1
        self.spans.flush()
        self.stats.spans_exported = self.spans.exported - exported
        self.stats.spans_failed = self.spans.failed - failed
        self.stats.elapsed_s = round(time.perf_counter() - started, 3)
        return self.stats

    def close(self) -> None:
        self.spans.shutdown()
        if self._own_http:
            self.http.close()

    def __enter__(self) -> HelpdeskFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
