"""A seeded fleet of simulated agents that call the real local HTTP API, make planted mistakes
and follow the playbook entries ``GET /playbooks`` serves.

Every call goes over HTTP (httpx) to the API the local stack serves, so each one becomes an op
record through the gateway's observation middleware; the mistakes are real requests that the
tools really refuse (an unknown column, an unknown worker id, ``/match`` without its filters, a
malformed body), and what only a runtime knows (a model call that timed out, a result cut at the
row cap, a rescue, an overseer's correction) is reported to ``POST /events`` or, with
``report="otlp"``, exported as OpenTelemetry spans to ``POST /v1/traces`` (:mod:`.otlp`: an
``invoke_agent`` span per task, a GenAI ``chat`` span per model call, ``opslake.*`` attributes).

**Tasks** (each sent with ``x-opslake-task-class`` and an ``x-opslake-session-id`` per task):
``staff_job``, ``sql_question`` and ``worker_lookup``, step by step in :mod:`.tasks`.

**Mistakes** (:data:`MODES`, in :mod:`.modes`): each agent has its own probability per mode, drawn
from the seed (:mod:`.agents`). All random draws of a task happen before it runs (:class:`TaskPlan`,
:mod:`.plan`), so two simulators with the same seed plan identical tasks and roll identical mistakes
whatever the server answers: only the playbook entries they read can change what they do.

**Playbook entries**: before each task an agent reads ``GET /playbooks`` and follows the entries
that carry the specific fix of one of its mistakes (the real column, the missing fields, the valid
id form…: decided in one place, :mod:`.follow`; an entry that only names the step changes nothing),
and reports what it followed as a ``playbook:followed`` op. With ``playbooks_enabled=False`` agents
never read ``/playbooks`` (the "without" fleet).

Modules: :mod:`.modes` (mistakes, tasks, questions), :mod:`.agents`, :mod:`.plan`, :mod:`.follow`,
:mod:`.tasks` (what each task does), :mod:`.client` (HTTP and ``/events`` plumbing), :mod:`.otlp`
(the same reports as spans), :mod:`.stats` (:class:`CycleStats`), :mod:`.fleet` (:class:`Simulator`).
"""

from opslake_local.simulator.agents import SimAgent, create_agents, mistake_profile
from opslake_local.simulator.client import (
    SESSION_HEADER,
    TASK_CLASS_HEADER,
    TRACE_HEADER,
    TaskClient,
    sig_hash,
)
from opslake_local.simulator.fleet import Simulator
from opslake_local.simulator.follow import fixes, follow_entries
from opslake_local.simulator.modes import (
    CORRECTIONS,
    FOLLOWED_ENDPOINT,
    FOLLOWED_EVENT_KIND,
    MODEL_CALL,
    MODES,
    QUESTIONS,
    TASK_CLASSES,
    TASK_ENDPOINTS,
    TASK_MODES,
    WORKER_ROUTE,
    Mode,
    Question,
)
from opslake_local.simulator.otlp import REPORTS, ModelCall, Report, SpanReporter, TaskSpans
from opslake_local.simulator.plan import TaskPlan, plan_task
from opslake_local.simulator.stats import Call, CycleStats
from opslake_local.simulator.tasks import ROW_LIMIT, TaskRun

__all__ = [
    "CORRECTIONS",
    "FOLLOWED_ENDPOINT",
    "FOLLOWED_EVENT_KIND",
    "MODEL_CALL",
    "MODES",
    "QUESTIONS",
    "REPORTS",
    "ROW_LIMIT",
    "SESSION_HEADER",
    "TASK_CLASSES",
    "TASK_CLASS_HEADER",
    "TASK_ENDPOINTS",
    "TASK_MODES",
    "TRACE_HEADER",
    "WORKER_ROUTE",
    "Call",
    "CycleStats",
    "Mode",
    "ModelCall",
    "Question",
    "Report",
    "SimAgent",
    "Simulator",
    "SpanReporter",
    "TaskClient",
    "TaskPlan",
    "TaskRun",
    "TaskSpans",
    "create_agents",
    "fixes",
    "follow_entries",
    "mistake_profile",
    "plan_task",
    "sig_hash",
]
