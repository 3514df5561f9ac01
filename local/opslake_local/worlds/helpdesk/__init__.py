"""A second world for the demo: an IT service desk whose agents call tools of their own (not
opslake's) and report them through the OpenTelemetry SDK's OTLP exporter to ``POST /v1/traces``.

**The world** (:mod:`.world`): seeded customers (``CUS-`` + 6 digits), their laptops and tickets,
and ten tools whose errors state their rules the way real APIs do; some raise, the others return
the error as their result (``{"error": …}``, ``{"ok": false, "error": …}``, ``Error: …``), and two
fail transiently now and then (a retry works).

**Tasks and mistakes** (:mod:`.modes`): ``open_ticket``, ``resolve_ticket``, ``reassign_ticket``,
``book_visit``; eight planted mistakes (a wrong id form, a wrong value form, an enum's case, a
missing argument, an argument the tool does not take, a missing precondition call, an update
without its lookup, a value that breaks a stated rule), each with a per-agent probability drawn
from the seed. Plans are drawn before a task runs (:mod:`.plan`), so two fleets with the same seed
plan and roll the same.

**Playbooks** (:mod:`.follow`): a mistake is switched off only when a served entry carries its
specific fix by name (the argument and its form, the precondition or lookup tool, the rule's words).

Modules: :mod:`.world`, :mod:`.modes`, :mod:`.plan`, :mod:`.follow`, :mod:`.runtime` (one task),
:mod:`.fleet` (:class:`HelpdeskFleet`). Nothing here imports ``opslake.analysis``.
"""

from opslake_local.worlds.helpdesk.fleet import SALT, HelpdeskFleet
from opslake_local.worlds.helpdesk.follow import (
    carries_fix,
    fixes,
    follow_entries,
    forms,
    modes_fixed,
    names,
    sample_plans,
)
from opslake_local.worlds.helpdesk.modes import (
    CAUSE_OF_RULE,
    ENDPOINTS,
    MODES,
    NOISE,
    TASK_CLASSES,
    TASK_MODES,
    TASK_TOOLS,
    Mode,
    Noise,
    endpoint,
)
from opslake_local.worlds.helpdesk.plan import HelpdeskPlan, plan_task
from opslake_local.worlds.helpdesk.runtime import HelpdeskRun
from opslake_local.worlds.helpdesk.world import TODAY, TOOLS, HelpdeskWorld, Outcome, Tool

__all__ = [
    "CAUSE_OF_RULE",
    "ENDPOINTS",
    "MODES",
    "NOISE",
    "SALT",
    "TASK_CLASSES",
    "TASK_MODES",
    "TASK_TOOLS",
    "TODAY",
    "TOOLS",
    "HelpdeskFleet",
    "HelpdeskPlan",
    "HelpdeskRun",
    "HelpdeskWorld",
    "Mode",
    "Noise",
    "Outcome",
    "Tool",
    "carries_fix",
    "endpoint",
    "fixes",
    "follow_entries",
    "forms",
    "modes_fixed",
    "names",
    "plan_task",
    "sample_plans",
]
