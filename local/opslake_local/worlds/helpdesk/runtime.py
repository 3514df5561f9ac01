"""One service-desk task run by one agent: its tool calls against the world, its planted mistakes,
its retries, and what it reads and reports to opslake.

* ``open_ticket``: ``get_customer`` (the id the user gave) → ``create_ticket``.
* ``resolve_ticket``: ``search_tickets`` → ``get_ticket`` → ``add_comment`` → ``close_ticket``.
* ``reassign_ticket``: ``search_tickets`` → ``update_ticket`` (a new team).
* ``book_visit``: ``search_customers`` (the user's name) → ``list_assets`` → ``schedule_visit``.

A planted mistake is made when the plan rolled it and no followed entry carries its fix
(:mod:`.follow`); the careful way of each step is what the comments below say. A step that failed
is retried the careful way when the plan says the agent recovers (``rescue``), and a transient
failure (an upstream timeout, a rate limit) is always retried once, and the retry works.

Each tool call is an ``execute_tool`` span of the task's trace
(:meth:`~opslake_local.simulator.otlp.TaskSpans.tool_call`); the agent reads ``GET /playbooks`` over
HTTP with its own key and reports the entries it followed as one ``playbook:followed`` span (the SDK's
``report_followed`` shape), like the staffing fleet.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from opslake_local.simulator.client import TaskClient
from opslake_local.simulator.modes import FOLLOWED_ENDPOINT, FOLLOWED_EVENT_KIND
from opslake_local.simulator.otlp import TaskSpans
from opslake_local.simulator.stats import Call
from opslake_local.worlds.helpdesk.follow import follow_entries
from opslake_local.worlds.helpdesk.modes import CAUSE_OF_RULE, NOISE, endpoint
from opslake_local.worlds.helpdesk.plan import HelpdeskPlan
from opslake_local.worlds.helpdesk.world import HelpdeskWorld, Outcome

#: How long a transient timeout's call lasts (ms): the tool's own timeout.
TIMEOUT_MS = 5000.0
#: What a call that hit no rule but no known cause is attributed to (never expected).
UNKNOWN_CAUSE = "unplanned"


class HelpdeskRun:
    """One task: reads playbooks (when its fleet does), then calls the world's tools step by step."""

    def __init__(
        self,
        world: HelpdeskWorld,
        client: TaskClient,
        spans: TaskSpans,
        plan: HelpdeskPlan,
        *,
        playbooks_enabled: bool,
        min_confidence: float = 0.0,
    ) -> None:
        self.world, self.client, self.spans, self.plan = world, client, spans, plan
        self.stats = client.stats
        self.playbooks_enabled = playbooks_enabled
        self.min_confidence = min_confidence
        self.careful: set[str] = set()  # modes switched off by followed entries
        self._hit: set[str] = set()  # transient failures met already (each once per task)

    # -- mistakes, calls ----------------------------------------------------------------------------
    def mistake(self, mode: str) -> bool:
        """Whether the agent makes this planted mistake now (rolled, and no entry stops it)."""
        if not self.plan.rolls.get(mode):
            return False
        if mode in self.careful:
            self.stats.avoided[mode] += 1
            return False
        self.stats.mistakes[mode] += 1
        return True

    def call(self, tool: str, arguments: Mapping[str, Any]) -> Outcome:
        """One tool call: the world answers, the span records it, the cycle counts it (a tool's
        transient failure is met on its first call of the task, when the plan says so)."""
        noise = next((n for n in NOISE.values() if n.tool == tool and n.name not in self._hit), None)
        transient = noise is not None and self.plan.transient.get(noise.name, False)
        if noise is not None:
            self._hit.add(noise.name)
        outcome = self.world.call(tool, arguments, transient=transient)
        duration = self.plan.durations[self.spans.tool_calls % len(self.plan.durations)]
        if outcome.rule == "crm_timeout":
            duration = TIMEOUT_MS
        op_id = self.spans.tool_call(
            tool, arguments, result=outcome.result, error=outcome.raised, duration_ms=duration
        )
        cause = CAUSE_OF_RULE.get(outcome.rule, UNKNOWN_CAUSE) if outcome.rule else None
        self.stats.tool_calls += 1
        if outcome.failed:
            self.stats.tool_failures += 1
            self.stats.failures_seen += 1
            self.stats.errors[f"{endpoint(tool)} {outcome.rule}"] += 1
        self.stats.calls.append(
            Call(self.client.agent.agent_id, self.plan.task_class, "TOOL", endpoint(tool),
                 500 if outcome.failed else 200, outcome.rule, cause, op_id)
        )  # fmt: skip
        if noise is not None and transient and outcome.rule == noise.rule:
            return self.call(tool, arguments)  # a transient failure: the retry works
        return outcome

    # -- playbooks ----------------------------------------------------------------------------------
    def read_playbooks(self) -> None:
        status, payload = self.client.call(
            "GET", "/playbooks", "/playbooks", params={"task_class": self.plan.task_class, "limit": 50}
        )
        self.stats.playbook_reads += 1
        if status != 200:
            return
        followed = follow_entries(payload.get("entries") or [], self.plan, min_confidence=self.min_confidence)
        for entry_id, modes in followed:
            self.careful |= modes
            self.stats.entries_followed[entry_id] += 1
            for mode in modes:
                self.stats.fixed_by.setdefault(mode, Counter())[entry_id] += 1
        if followed:
            self.stats.follows_reported += 1
            self.client.events(
                {
                    "endpoint": FOLLOWED_ENDPOINT,
                    "source": "runtime",
                    "event_kind": FOLLOWED_EVENT_KIND,
                    "success": True,
                    "duration_ms": 0.0,
                    "attributes": {"entry_ids": ",".join(entry_id for entry_id, _ in followed)},
                }
            )

    # -- tasks --------------------------------------------------------------------------------------
    def run(self) -> bool:
        if self.playbooks_enabled:
            self.read_playbooks()
        p = self.plan
        if p.task_class in ("resolve_ticket", "reassign_ticket"):
            # the customer's ticket exists before the task (the user opened it)
            self.world.file_ticket(p.ticket_id, p.customer_id, p.subject, p.category)
        work = {
            "open_ticket": self.open_ticket,
            "resolve_ticket": self.resolve_ticket,
            "reassign_ticket": self.reassign_ticket,
            "book_visit": self.book_visit,
        }
        return work[p.task_class]()

    def open_ticket(self) -> bool:
        p = self.plan
        # careful: the id as the desk writes it (CUS- and the number the user gave)
        customer = p.customer_number if self.mistake("customer_id_form") else p.customer_id
        first = self.call("get_customer", {"customer_id": customer})
        if first.failed and (
            not p.rescue or self.call("get_customer", {"customer_id": p.customer_id}).failed
        ):
            return False
        careful = {"customer_id": p.customer_id, "subject": p.subject, "category": p.category,
                   "priority": p.priority}  # fmt: skip
        args = dict(careful)
        if self.mistake("missing_category"):
            del args["category"]
        if self.mistake("priority_case"):
            args["priority"] = p.priority.title()
        if not self.call("create_ticket", args).failed:
            return True
        return p.rescue and not self.call("create_ticket", careful).failed

    def _find_ticket(self) -> str | None:
        """search_tickets for the customer's open tickets; the one about the task's subject."""
        p = self.plan
        outcome = self.call("search_tickets", {"customer_id": p.customer_id, "status": "open"})
        if outcome.failed:
            return None
        tickets = json.loads(outcome.result)["tickets"]
        ids = [t["ticket_id"] for t in tickets if t["subject"] == p.subject]
        return p.ticket_id if p.ticket_id in ids else (ids[0] if ids else None)

    def resolve_ticket(self) -> bool:
        p = self.plan
        ticket = self._find_ticket()
        if ticket is None or self.call("get_ticket", {"ticket_id": ticket}).failed:
            return False
        comment = {"ticket_id": ticket, "body": f"Resolved: {p.subject} ({p.resolution_code})"}
        # careful: the resolution comment before closing
        if not self.mistake("close_without_comment") and self.call("add_comment", comment).failed:
            return False
        close = {"ticket_id": ticket, "resolution_code": p.resolution_code}
        if not self.call("close_ticket", close).failed:
            return True
        if not p.rescue or self.call("add_comment", comment).failed:
            return False
        return not self.call("close_ticket", close).failed

    def reassign_ticket(self) -> bool:
        p = self.plan
        # careful: look the ticket up first; only the arguments update_ticket takes
        guessed = self.mistake("guessed_ticket_id")
        ticket = p.guessed_ticket_id if guessed else self._find_ticket()
        if ticket is None:
            return False
        args: dict[str, Any] = {"ticket_id": ticket, "team": p.team}
        # an agent that read the ticket's search result may want to name a person too (the tool takes
        # only a team); one that guessed the id never saw the ticket
        if not guessed and self.mistake("assignee_argument"):
            args["assignee"] = p.assignee
        if not self.call("update_ticket", args).failed:
            return True
        if not p.rescue:
            return False
        if guessed:  # the id did not exist: look it up this time
            ticket = self._find_ticket()
        return (
            ticket is not None
            and not self.call("update_ticket", {"ticket_id": ticket, "team": p.team}).failed
        )

    def book_visit(self) -> bool:
        p = self.plan
        outcome = self.call("search_customers", {"query": p.customer_name})
        if outcome.failed or not outcome.result:
            return False
        customer = str(outcome.result[0]["customer_id"])
        assets = self.call("list_assets", {"customer_id": customer})
        if assets.failed or p.asset_tag not in {a["asset_tag"] for a in assets.result}:
            return False
        # careful: a weekday, written YYYY-MM-DD
        day = p.weekend_date if self.mistake("weekend_visit") else p.visit_date
        if self.mistake("us_date_form"):
            year, month, mday = day.split("-")
            day = f"{month}/{mday}/{year}"
        visit = {"customer_id": customer, "asset_tag": p.asset_tag, "date": day, "slot": p.slot}
        if not self.call("schedule_visit", visit).failed:
            return True
        return p.rescue and not self.call("schedule_visit", {**visit, "date": p.visit_date}).failed
