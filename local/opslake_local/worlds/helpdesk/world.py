"""The service desk's state and its ten tools, as an agent framework would register them.

The state is small and seeded (the same seed gives the same customers, devices and tickets): 16
customers (``CUS-`` + 6 digits), their laptops (``AST-`` + 5 digits) and open tickets (``TCK-`` + 5
digits). The world's calendar is fixed (:data:`TODAY`), so dates, weekdays and error texts do not
depend on the day the demo runs.

The tools state their rules in their errors, the way real APIs do, and report a refusal in one of
the ways real tools do: some **raise** (the span's status is ERROR, with the exception as an
event), the others **return the error as their result** with status OK: a JSON object with an
``error`` (``{"error": "validation failed: …"}``, ``{"ok": false, "error": …}``) or text that
starts with ``Error:`` (:data:`TOOLS` says which). Two of them fail transiently when the runtime
asks for it (an upstream timeout, a rate limit): a retry works.

:meth:`HelpdeskWorld.call` runs one tool and returns an :class:`Outcome` whose ``rule`` names the
rule that refused the call: the runtime's ground truth for scoring signatures (it never leaves the
process; the spans carry only what a real runtime records).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

#: The world's today: a Tuesday. Visits are booked from here on.
TODAY = date(2026, 12, 1)
CATEGORIES = ("hardware", "software", "network", "access")
PRIORITIES = ("low", "normal", "high", "urgent")
TEAMS = ("service_desk", "desktop", "network", "identity")
SLOTS = ("morning", "afternoon")
RESOLUTION_CODES = ("fixed", "workaround", "no_fault_found")
MODELS = ("Latitude 7440", "ThinkPad T14", "MacBook Air", "EliteBook 840")
CUSTOMER_ID = re.compile(r"CUS-\d{6}")
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_FIRST = ("Maria", "James", "Aiko", "Omar", "Lena", "Tariq", "Grace", "Pavel",
          "Nadia", "Hugo", "Priya", "Felix", "Sofia", "Kwame", "Ines", "Rafael")  # fmt: skip
_LAST = ("Lopez", "Carter", "Tanaka", "Haddad", "Novak", "Rahman", "Okafor", "Ivanov",
         "Petrova", "Lambert", "Sharma", "Becker", "Rossi", "Mensah", "Duarte", "Silva")  # fmt: skip
_SITES = ("Lisbon", "Leeds", "Lyon", "Leipzig")

#: How a tool reports a refusal: it raises, or returns an error object or an ``Error:`` text.
Style = Literal["raises", "error_object", "ok_false", "error_text"]


# ---- state --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Customer:
    customer_id: str
    name: str
    email: str
    site: str


@dataclass(frozen=True)
class Asset:
    asset_tag: str
    customer_id: str
    model: str
    purchased: date


@dataclass
class Ticket:
    ticket_id: str
    customer_id: str
    subject: str
    category: str
    priority: str
    team: str = "service_desk"
    status: str = "open"
    comments: list[str] = field(default_factory=list)
    resolution_code: str | None = None


@dataclass(frozen=True)
class Visit:
    visit_id: str
    customer_id: str
    asset_tag: str
    date: str
    slot: str


# ---- outcomes -----------------------------------------------------------------------------------
class InvalidRequestError(ValueError):
    """The request is malformed (a raising tool's 400)."""


class NotFoundError(LookupError):
    """What the request names does not exist (a raising tool's 404)."""


class UpstreamTimeout(TimeoutError):
    """The tool's upstream did not answer in time: transient, a retry works."""


@dataclass(frozen=True)
class Outcome:
    """One tool call: what it returned (its error result included) or raised, and the world's rule
    that refused it (None: the call worked). ``rule`` is ground truth for scoring, never reported."""

    result: Any = None
    raised: BaseException | None = None
    rule: str | None = None

    @property
    def failed(self) -> bool:
        return self.rule is not None

    @property
    def error(self) -> str | None:
        """The error text as the agent reads it (the exception's message, or the result's error)."""
        if self.raised is not None:
            return str(self.raised)
        if not self.failed:
            return None
        if isinstance(self.result, Mapping):
            return str(self.result.get("error"))
        return str(self.result)


class _Refused(Exception):
    """A rule refused the call: ``rule`` names it, ``message`` is the text the tool states."""

    def __init__(self, rule: str, message: str, raise_as: type[Exception] = InvalidRequestError) -> None:
        super().__init__(message)
        self.rule, self.message, self.raise_as = rule, message, raise_as


@dataclass(frozen=True)
class Param:
    name: str
    description: str
    required: bool = True


@dataclass(frozen=True)
class Tool:
    """A tool as a framework registers it: name, description, parameters, and how it refuses."""

    name: str
    description: str
    params: tuple[Param, ...]
    style: Style
    #: the transient failure the tool may hit (rule, message), when it has one
    transient: tuple[str, str] | None = None

    def refusal(self, message: str) -> Any:
        """The tool's error result for a refusal (for the tools that do not raise)."""
        if self.style == "error_object":
            return {"error": message}
        if self.style == "ok_false":
            return {"ok": False, "error": message}
        return f"Error: {message}"


_P = Param
TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool("search_customers", "Find customers by name or email.",
             (_P("query", "words of the customer's name or email"),), "raises",
             ("crm_timeout", "CRM search timed out after 5000 ms")),
        Tool("get_customer", "Read one customer's record.",
             (_P("customer_id", "the customer's id, e.g. from search_customers"),), "raises"),
        Tool("list_assets", "List the devices assigned to a customer.",
             (_P("customer_id", "the customer's id"),), "raises"),
        Tool("search_tickets", "Find tickets of a customer, by status and words of the subject.",
             (_P("customer_id", "the customer's id"), _P("status", "open, pending or closed", False),
              _P("query", "words of the subject", False)), "error_text",
             ("rate_limited", "rate limit exceeded (20 requests per 10 s); retry after 2 s")),
        Tool("get_ticket", "Read one ticket with its comments.",
             (_P("ticket_id", "the ticket's id"),), "raises"),
        Tool("create_ticket", "Open a ticket for a customer.",
             (_P("customer_id", "the customer's id"), _P("subject", "one line"),
              _P("category", "one of " + ", ".join(CATEGORIES)),
              _P("priority", "one of " + ", ".join(PRIORITIES))), "error_object"),
        Tool("update_ticket", "Change a ticket's team, priority or status.",
             (_P("ticket_id", "the ticket's id"), _P("team", "the team to assign", False),
              _P("priority", "the new priority", False), _P("status", "the new status", False)), "raises"),
        Tool("add_comment", "Add a comment to a ticket.",
             (_P("ticket_id", "the ticket's id"), _P("body", "the comment"),
              _P("public", "whether the customer sees it", False)), "error_object"),
        Tool("close_ticket", "Close a resolved ticket.",
             (_P("ticket_id", "the ticket's id"),
              _P("resolution_code", "one of " + ", ".join(RESOLUTION_CODES))), "error_text"),
        Tool("schedule_visit", "Book a technician's on-site visit for a customer's device.",
             (_P("customer_id", "the customer's id"), _P("asset_tag", "the device's tag"),
              _P("date", "the visit's date"), _P("slot", "morning or afternoon")), "ok_false"),
    )
}  # fmt: skip


# ---- the world ----------------------------------------------------------------------------------
class HelpdeskWorld:
    """The desk's state for one fleet (each fleet gets its own, so two fleets with the same seed
    start from the same state and never see each other's changes), and its tools."""

    def __init__(self, seed: int = 7) -> None:
        rng = random.Random(f"helpdesk-world:{seed}")
        self.customers: list[Customer] = []
        self.assets: list[Asset] = []
        self.tickets: dict[str, Ticket] = {}
        self.visits: list[Visit] = []
        self._created = 70000  # ids of the tickets create_ticket opens: TCK-7xxxx
        numbers = rng.sample(range(100_000, 1_000_000), len(_FIRST))
        tags = iter(rng.sample(range(10_000, 100_000), 2 * len(_FIRST)))
        for i, (first, number) in enumerate(zip(_FIRST, numbers, strict=True)):
            last = _LAST[i]
            customer = Customer(
                f"CUS-{number}", f"{first} {last}", f"{first}.{last}@example.com".lower(), _SITES[i % 4]
            )
            self.customers.append(customer)
            for _ in range(1 + i % 2):
                bought = TODAY - timedelta(days=rng.randint(60, 1400))
                self.assets.append(
                    Asset(f"AST-{next(tags)}", customer.customer_id, rng.choice(MODELS), bought)
                )
        self._customers = {c.customer_id: c for c in self.customers}

    # -- setup the runtime does before a task (not a tool call) -----------------------------------
    def file_ticket(self, ticket_id: str, customer_id: str, subject: str, category: str) -> Ticket:
        """A ticket the customer opened before the task (the task works on it)."""
        ticket = Ticket(ticket_id, customer_id, subject, category, "normal")
        self.tickets[ticket_id] = ticket
        return ticket

    def assets_of(self, customer_id: str) -> list[Asset]:
        return [a for a in self.assets if a.customer_id == customer_id]

    # -- the tools --------------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any], *, transient: bool = False) -> Outcome:
        """Run tool ``name`` with ``arguments`` as a framework would: unknown and missing arguments
        first, then the tool's own rules; ``transient`` makes it hit its transient failure."""
        tool = TOOLS[name]
        try:
            self._check_arguments(tool, arguments)
            if transient and tool.transient is not None:
                rule, message = tool.transient
                raise _Refused(rule, message, UpstreamTimeout)
            result = self._run(name, arguments)
        except _Refused as refused:
            if tool.style == "raises":
                return Outcome(raised=refused.raise_as(refused.message), rule=refused.rule)
            return Outcome(result=tool.refusal(refused.message), rule=refused.rule)
        return Outcome(result=result)

    def _check_arguments(self, tool: Tool, arguments: Mapping[str, Any]) -> None:
        known = {p.name for p in tool.params}
        for key in arguments:
            if key not in known:
                message = (
                    f"{tool.name}() got an unexpected keyword argument '{key}'"
                    if tool.style == "raises"
                    else f"validation failed: unknown field {key}"
                )
                raise _Refused(f"unexpected_argument:{key}", message, TypeError)
        for param in tool.params:
            if param.required and arguments.get(param.name) in (None, ""):
                message = (
                    f"{tool.name}() missing 1 required argument: '{param.name}'"
                    if tool.style == "raises"
                    else f"validation failed: {param.name} is required"
                )
                raise _Refused(f"missing_argument:{param.name}", message, TypeError)

    def _run(self, name: str, args: Mapping[str, Any]) -> Any:
        handlers: dict[str, Callable[[Mapping[str, Any]], Any]] = {
            "search_customers": self._search_customers,
            "get_customer": self._get_customer,
            "list_assets": self._list_assets,
            "search_tickets": self._search_tickets,
            "get_ticket": self._get_ticket,
            "create_ticket": self._create_ticket,
            "update_ticket": self._update_ticket,
            "add_comment": self._add_comment,
            "close_ticket": self._close_ticket,
            "schedule_visit": self._schedule_visit,
        }
        return handlers[name](args)

    def _customer(self, customer_id: Any) -> Customer:
        value = str(customer_id)
        if not CUSTOMER_ID.fullmatch(value):
            raise _Refused("customer_id_form", f"invalid customer_id '{value}'")
        if value not in self._customers:
            raise _Refused("customer_not_found", f"no customer with id {value}", NotFoundError)
        return self._customers[value]

    def _ticket(self, ticket_id: Any) -> Ticket:
        ticket = self.tickets.get(str(ticket_id))
        if ticket is None:
            raise _Refused("ticket_not_found", f"ticket {ticket_id} not found", NotFoundError)
        return ticket

    def _search_customers(self, args: Mapping[str, Any]) -> list[dict[str, str]]:
        words = str(args["query"]).lower().split()
        return [
            {"customer_id": c.customer_id, "name": c.name, "email": c.email, "site": c.site}
            for c in self.customers
            if words and all(w in f"{c.name} {c.email}".lower() for w in words)
        ]

    def _get_customer(self, args: Mapping[str, Any]) -> dict[str, Any]:
        c = self._customer(args["customer_id"])
        open_tickets = sum(
            1 for t in self.tickets.values() if t.customer_id == c.customer_id and t.status == "open"
        )
        return {"customer_id": c.customer_id, "name": c.name, "email": c.email, "site": c.site,
                "open_tickets": open_tickets}  # fmt: skip

    def _list_assets(self, args: Mapping[str, Any]) -> list[dict[str, str]]:
        c = self._customer(args["customer_id"])
        return [
            {"asset_tag": a.asset_tag, "model": a.model, "purchased": a.purchased.isoformat()}
            for a in self.assets_of(c.customer_id)
        ]

    def _search_tickets(self, args: Mapping[str, Any]) -> str:
        c = self._customer(args["customer_id"])
        status, words = args.get("status"), str(args.get("query") or "").lower().split()
        found = [
            {"ticket_id": t.ticket_id, "subject": t.subject, "status": t.status, "priority": t.priority,
             "team": t.team}
            for t in self.tickets.values()
            if t.customer_id == c.customer_id and (status is None or t.status == status)
            and all(w in t.subject.lower() for w in words)
        ]  # fmt: skip
        return json.dumps({"tickets": found})

    def _get_ticket(self, args: Mapping[str, Any]) -> dict[str, Any]:
        t = self._ticket(args["ticket_id"])
        return {"ticket_id": t.ticket_id, "customer_id": t.customer_id, "subject": t.subject,
                "category": t.category, "priority": t.priority, "team": t.team, "status": t.status,
                "comments": list(t.comments)}  # fmt: skip

    def _create_ticket(self, args: Mapping[str, Any]) -> dict[str, Any]:
        c = self._customer(args["customer_id"])
        category, priority = str(args["category"]), str(args["priority"])
        if category not in CATEGORIES:
            raise _Refused(
                "category_enum",
                f"validation failed: category must be one of {', '.join(CATEGORIES)} (got '{category}')",
            )
        if priority not in PRIORITIES:
            raise _Refused(
                "priority_enum",
                f"validation failed: priority must be one of {', '.join(PRIORITIES)} (got '{priority}')",
            )
        self._created += 1
        ticket = Ticket(f"TCK-{self._created}", c.customer_id, str(args["subject"]), category, priority)
        self.tickets[ticket.ticket_id] = ticket
        return {"ticket_id": ticket.ticket_id, "status": "open", "priority": priority, "team": ticket.team}

    def _update_ticket(self, args: Mapping[str, Any]) -> dict[str, Any]:
        t = self._ticket(args["ticket_id"])
        if args.get("team") is not None and args["team"] not in TEAMS:
            raise _Refused("team_enum", f"team must be one of {', '.join(TEAMS)} (got '{args['team']}')")
        if args.get("priority") is not None and args["priority"] not in PRIORITIES:
            raise _Refused(
                "priority_enum", f"priority must be one of {', '.join(PRIORITIES)} (got '{args['priority']}')"
            )
        t.team, t.priority = str(args.get("team") or t.team), str(args.get("priority") or t.priority)
        t.status = str(args.get("status") or t.status)
        return {"ticket_id": t.ticket_id, "team": t.team, "priority": t.priority, "status": t.status}

    def _add_comment(self, args: Mapping[str, Any]) -> dict[str, Any]:
        t = self._ticket(args["ticket_id"])
        if t.status == "closed":
            raise _Refused("ticket_closed", f"ticket {t.ticket_id} is closed")
        t.comments.append(str(args["body"]))
        return {"ticket_id": t.ticket_id, "comments": len(t.comments)}

    def _close_ticket(self, args: Mapping[str, Any]) -> str:
        t = self._ticket(args["ticket_id"])
        code = str(args["resolution_code"])
        if code not in RESOLUTION_CODES:
            raise _Refused(
                "resolution_code_enum",
                f"resolution_code must be one of {', '.join(RESOLUTION_CODES)} (got '{code}')",
            )
        if t.status == "closed":
            raise _Refused("ticket_closed", f"ticket {t.ticket_id} is already closed")
        if not t.comments:
            name = self._customers[t.customer_id].name
            raise _Refused(
                "resolution_comment_first",
                f"cannot close ticket {t.ticket_id} of {name}: add a resolution comment first",
            )
        t.status, t.resolution_code = "closed", code
        return f"Ticket {t.ticket_id} closed ({code})"

    def _schedule_visit(self, args: Mapping[str, Any]) -> dict[str, Any]:
        c = self._customer(args["customer_id"])
        tag, value, slot = str(args["asset_tag"]), str(args["date"]), str(args["slot"])
        if tag not in {a.asset_tag for a in self.assets_of(c.customer_id)}:
            raise _Refused("asset_not_customers", f"asset {tag} is not assigned to {c.customer_id}")
        if not ISO_DATE.fullmatch(value):
            raise _Refused("date_form", f"date must be YYYY-MM-DD (got '{value}')")
        day = date.fromisoformat(value)
        if day <= TODAY:
            raise _Refused(
                "date_past", f"visits are booked from {(TODAY + timedelta(days=1)).isoformat()} on"
            )
        if day.weekday() >= 5:
            raise _Refused(
                "weekdays_only",
                f"cannot book a visit on {day.strftime('%A')} {value}: technicians visit Monday to Friday only",
            )
        if slot not in SLOTS:
            raise _Refused("slot_enum", f"slot must be one of {', '.join(SLOTS)} (got '{slot}')")
        visit = Visit(f"VIS-{len(self.visits) + 1:04d}", c.customer_id, tag, value, slot)
        self.visits.append(visit)
        return {"ok": True, "visit_id": visit.visit_id, "date": value, "slot": slot}
