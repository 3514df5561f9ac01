"""Everything random about a service-desk task, drawn before it runs: two fleets with the same seed
plan identical tasks and roll identical mistakes whatever opslake answers them."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta

from opslake_local.simulator.agents import SimAgent
from opslake_local.worlds.helpdesk.modes import MODES, NOISE, TASK_CLASSES, TASK_TOOLS, TASK_WEIGHTS
from opslake_local.worlds.helpdesk.world import (
    PRIORITIES,
    RESOLUTION_CODES,
    SLOTS,
    TEAMS,
    TODAY,
    HelpdeskWorld,
)

SUBJECTS: dict[str, tuple[str, ...]] = {
    "hardware": ("laptop will not boot", "docking station not detected", "battery drains in an hour"),
    "software": ("mail client crashes on start", "VPN client will not install", "licence expired"),
    "network": ("Wi-Fi drops every hour", "cannot reach the file share", "slow connection at the office"),
    "access": ("locked out of single sign-on", "needs access to the finance share", "password reset"),
}
TECHNICIANS = ("dana.whitfield", "li.moreau", "sam.okoro", "ana.ribeiro")
#: Guessed ticket ids come from here; the desk's tickets never do (TCK-1xxxx filed, TCK-7xxxx created).
GUESSED_TICKETS = range(90_000, 100_000)


@dataclass(frozen=True)
class HelpdeskPlan:
    """One task, fully drawn: whom it is for, the values a careful agent sends, the mistakes rolled
    (each made unless a followed entry carries its fix), the transient failures it meets, whether the
    agent retries a failed step the careful way, and how long each call takes."""

    task_class: str
    customer_id: str
    customer_name: str
    ticket_id: str  # the customer's ticket the task works on (filed before it runs)
    subject: str
    category: str
    priority: str
    team: str
    assignee: str
    asset_tag: str
    visit_date: str  # ISO, a weekday
    weekend_date: str  # ISO, a Saturday or a Sunday
    slot: str
    resolution_code: str
    guessed_ticket_id: str
    rolls: Mapping[str, bool]  # mode → the agent makes this mistake (if no entry stops it)
    transient: Mapping[str, bool]  # noise → the first call of its tool hits it
    rescue: bool  # after a failed step, the agent retries it the careful way
    durations: tuple[float, ...]  # ms of the task's tool calls, in order

    @property
    def tools(self) -> tuple[str, ...]:
        return TASK_TOOLS[self.task_class]

    @property
    def customer_number(self) -> str:
        """The digits of the customer's id: what the user gives (and a careless agent sends)."""
        return self.customer_id.removeprefix("CUS-")

    @property
    def us_date(self) -> str:
        """The visit's date as a US user writes it (MM/DD/YYYY)."""
        day = date.fromisoformat(self.visit_date)
        return f"{day.month:02d}/{day.day:02d}/{day.year}"

    def values(self, mode: str) -> tuple[str, str] | None:
        """(valid, wrong) value of the argument a value-form mistake gets wrong, else None."""
        if mode == "customer_id_form":
            return self.customer_id, self.customer_number
        if mode == "us_date_form":
            return self.visit_date, self.us_date
        if mode == "priority_case":
            return self.priority, self.priority.title()
        return None


def plan_task(rng: random.Random, agent: SimAgent, world: HelpdeskWorld, ticket_id: str) -> HelpdeskPlan:
    """Draw one task for ``agent`` over ``world``'s customers; ``ticket_id`` names the ticket the
    task works on. The number of draws never depends on an outcome (same seed, same plans)."""
    task_class = rng.choices(TASK_CLASSES, weights=TASK_WEIGHTS)[0]
    customer = rng.choice(world.customers)
    assets = world.assets_of(customer.customer_id)
    category = rng.choice(sorted(SUBJECTS))
    subject = rng.choice(SUBJECTS[category])
    days = list(range(2, 22))
    weekdays = [d for d in days if (TODAY + timedelta(days=d)).weekday() < 5]
    weekends = [d for d in days if (TODAY + timedelta(days=d)).weekday() >= 5]
    return HelpdeskPlan(
        task_class=task_class,
        customer_id=customer.customer_id,
        customer_name=customer.name,
        ticket_id=ticket_id,
        subject=subject,
        category=category,
        priority=rng.choice(PRIORITIES),
        team=rng.choice(TEAMS[1:]),
        assignee=rng.choice(TECHNICIANS),
        asset_tag=rng.choice(assets).asset_tag,
        visit_date=(TODAY + timedelta(days=rng.choice(weekdays))).isoformat(),
        weekend_date=(TODAY + timedelta(days=rng.choice(weekends))).isoformat(),
        slot=rng.choice(SLOTS),
        resolution_code=rng.choice(RESOLUTION_CODES),
        guessed_ticket_id=f"TCK-{rng.choice(GUESSED_TICKETS)}",
        rolls={name: rng.random() < agent.mistakes.get(name, 0.0) for name in MODES},
        transient={name: rng.random() < noise.rate for name, noise in NOISE.items()},
        rescue=rng.random() < agent.rescue_rate,
        durations=tuple(round(rng.lognormvariate(4.5, 0.5), 1) for _ in range(8)),
    )
