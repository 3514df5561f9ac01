"""The service desk's tasks, the planted mistakes its agents make, and the transient noise.

Each mistake is a rule of the world broken in a way agents really break it, at one tool; the rule
that refuses it (:attr:`Mode.rule`, :class:`~.world.Outcome.rule`) ties every failed call to its
cause. :attr:`Mode.contrasts` names the generic contrasts that can see it in the lake (what the
failing calls' arguments, sessions or errors show beside the successes of the same tool), and
:attr:`Mode.fix` what an entry must name to switch it off (decided in :mod:`.follow`).
"""

from __future__ import annotations

from dataclasses import dataclass

from opslake_local.worlds.helpdesk.world import TOOLS

TOOL_PREFIX = "tool:"
TASK_CLASSES = ("open_ticket", "resolve_ticket", "reassign_ticket", "book_visit")
TASK_WEIGHTS = (0.3, 0.25, 0.2, 0.25)
#: The tools each task calls, in order, when nothing goes wrong.
TASK_TOOLS: dict[str, tuple[str, ...]] = {
    "open_ticket": ("get_customer", "create_ticket"),
    "resolve_ticket": ("search_tickets", "get_ticket", "add_comment", "close_ticket"),
    "reassign_ticket": ("search_tickets", "update_ticket"),
    "book_visit": ("search_customers", "list_assets", "schedule_visit"),
}


def endpoint(tool: str) -> str:
    """The op endpoint of a tool's calls (what ``/v1/traces`` makes of ``gen_ai.tool.name``)."""
    return TOOL_PREFIX + tool


#: Every endpoint of this world (its entries are the ones on these endpoints or its task classes).
ENDPOINTS = tuple(endpoint(t) for t in TOOLS)


@dataclass(frozen=True)
class Mode:
    """A planted mistake: the tool it happens at, its default rate, the rule that refuses it, the
    contrasts that can see it, and the fix an entry must name."""

    name: str
    tool: str
    base_rate: float
    rule: str
    description: str
    contrasts: tuple[str, ...]
    fix: str


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("customer_id_form", "get_customer", 0.35, "customer_id_form",
             "the customer number as the user gave it (482133) instead of the id CUS-482133",
             ("value_shape", "recovery"),
             "names customer_id and its form: CUS- + 6 digits, or a regex such as CUS-[0-9]{6}"),
        Mode("priority_case", "create_ticket", 0.4, "priority_enum",
             "priority written as a title (High) instead of the enum's value (high)",
             ("value_shape", "recovery", "error_rule"),
             "names priority and its values as the API spells them (one of low, normal, high, urgent), "
             "or says they are lower case"),
        Mode("missing_category", "create_ticket", 0.3, "missing_argument:category",
             "create_ticket without its required category",
             ("missing_argument", "recovery", "error_rule"),
             "names the argument category (to send)"),
        Mode("close_without_comment", "close_ticket", 0.4, "resolution_comment_first",
             "close_ticket before the resolution comment the desk requires",
             ("preceding_call", "error_rule"),
             "names add_comment (call it before close_ticket), or the rule: a resolution comment first"),
        Mode("guessed_ticket_id", "update_ticket", 0.4, "ticket_not_found",
             "update_ticket with a ticket id from memory, skipping search_tickets (not found)",
             ("preceding_call",),
             "names search_tickets (look the ticket up before update_ticket)"),
        Mode("assignee_argument", "update_ticket", 0.3, "unexpected_argument:assignee",
             "update_ticket with an assignee, an argument the tool does not take",
             ("extra_argument", "recovery"),
             "names assignee as the argument to leave out (or team as the one to send instead)"),
        Mode("us_date_form", "schedule_visit", 0.35, "date_form",
             "schedule_visit with a US date (12/07/2026) instead of YYYY-MM-DD",
             ("value_shape", "recovery", "error_rule"),
             "names date and its form: YYYY-MM-DD, ISO 8601, or a regex such as [0-9]{4}-[0-9]{2}-[0-9]{2}"),
        Mode("weekend_visit", "schedule_visit", 0.35, "weekdays_only",
             "schedule_visit on a Saturday or Sunday: technicians visit Monday to Friday only",
             ("error_rule",),
             "names the rule: Monday to Friday, weekdays, business days, or no weekends"),
    )
}  # fmt: skip
#: Which mistakes each task can make.
TASK_MODES: dict[str, tuple[str, ...]] = {
    task: tuple(name for name, mode in MODES.items() if mode.tool in tools)
    for task, tools in TASK_TOOLS.items()
}


@dataclass(frozen=True)
class Noise:
    """A transient failure no entry can prevent (an upstream timeout, a rate limit): a retry works."""

    name: str
    tool: str
    rate: float  # per call of the tool, the same for every agent
    rule: str


NOISE: dict[str, Noise] = {
    n.name: n
    for n in (
        Noise("crm_timeout", "search_customers", 0.1, "crm_timeout"),
        Noise("rate_limited", "search_tickets", 0.1, "rate_limited"),
    )
}
#: The cause of a refused call, by the world's rule: a planted mistake or transient noise.
CAUSE_OF_RULE: dict[str, str] = {m.rule: m.name for m in MODES.values()} | {
    n.rule: n.name for n in NOISE.values()
}
