"""What one cycle of the fleet did: every call it made and the counts the demo compares."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Call:
    """One call an agent made: what it asked and what the tool answered. An HTTP call to opslake's
    tools has its method and status; a call of a runtime's own tool (:mod:`opslake_local.worlds`)
    has method ``TOOL``, status 200 (it worked) or 500 (it raised or returned an error), and the op
    id of its span."""

    agent_id: str
    task_class: str
    method: str
    route: str  # the template route, e.g. /worker/{id} (the op record's endpoint)
    status: int
    error: str | None  # the tool's stable error code on a failure
    mode: str | None  # the planted mistake behind the call, if any
    op_id: str | None = None  # the op record's id, when the runtime reported the call as a span


@dataclass
class CycleStats:
    """What one cycle did. ``failures_seen`` counts every failure an agent saw: tool answers
    >= 400, answers cut at the row cap, and its own model-call timeouts. ``report`` is how the
    runtime's own ops travelled: ``events`` (``events_posted``: ops ``POST /events`` accepted) or
    ``otlp`` (``spans_reported``: report spans made; ``spans_exported``: spans ``/v1/traces``
    took, the task spans included; ``spans_failed``: spans no export delivered)."""

    cycle: int
    playbooks_enabled: bool
    agents: int = 0
    report: str = "events"
    tasks: Counter[str] = field(default_factory=Counter)
    tasks_succeeded: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    events_posted: int = 0
    spans_reported: int = 0
    spans_exported: int = 0
    spans_failed: int = 0
    logs_posted: int = 0
    failures_seen: int = 0
    mistakes: Counter[str] = field(default_factory=Counter)  # planted mistakes actually made
    avoided: Counter[str] = field(default_factory=Counter)  # rolled, but a followed entry prevented it
    errors: Counter[str] = field(default_factory=Counter)  # "POST /sql 400 sql_column_not_found" → n
    entries_followed: Counter[str] = field(default_factory=Counter)  # entry_id → tasks that followed it
    #: mode → entry_id → tasks in which that entry's specific fix switched the mode off (rolled or not)
    fixed_by: dict[str, Counter[str]] = field(default_factory=dict)
    follows_reported: int = 0  # playbook:followed ops the runtime reported (one per task that followed any)
    playbook_reads: int = 0
    rescues: Counter[str] = field(default_factory=Counter)  # "succeeded" / "failed"
    corrections: int = 0
    calls: list[Call] = field(default_factory=list)
    elapsed_s: float = 0.0
    #: the tool calls are spans the runtime exports (a runtime's own tools), not gateway calls
    tool_calls_in_spans: bool = False

    @property
    def ops_sent(self) -> int:
        """Op records this cycle produced: one per tool call and playbook read, one per op in /events
        or span exported (every span the simulator exports is op-shaped; a tool call reported as a
        span counts once), one extra per /log."""
        return (
            (0 if self.tool_calls_in_spans else self.tool_calls)
            + self.playbook_reads
            + self.events_posted
            + self.spans_exported
            + self.logs_posted
        )

    @property
    def failure_rate(self) -> float:
        """Failed tool calls / tool calls, reads of GET /playbooks not counted (0 when there were none)."""
        return self.tool_failures / self.tool_calls if self.tool_calls else 0.0

    def route_failures(self, route: str) -> int:
        return sum(1 for c in self.calls if c.route == route and c.status >= 400)

    def route_calls(self, route: str) -> int:
        return sum(1 for c in self.calls if c.route == route)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (without the per-call list)."""
        data: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "fixed_by":
                data[item.name] = {mode: dict(entries) for mode, entries in value.items()}
            elif item.name != "calls":
                data[item.name] = dict(value) if isinstance(value, Counter) else value
        data.update(ops_sent=self.ops_sent, failure_rate=round(self.failure_rate, 4))
        return data
