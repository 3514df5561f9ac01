"""Which served playbook entries an agent follows, and which planted mistakes each one switches off:
the one place that decides "this entry fixes that mistake".

Before each task an agent reads ``GET /playbooks?task_class=<class>&limit=50`` (the server returns
the active entries whose ``task_class`` is that class or none, whatever their endpoint, minus the
entries this agent's key is held out of). :func:`fixes` reads only what is served: ``endpoint``,
``task_class``, ``confidence`` and the text (``trigger``, ``action``, ``instead_of``).

**Applicability.** The entry's ``endpoint`` is a step of the task, or it names no endpoint and its
``task_class`` is the task's (an entry naming neither is too vague to act on). Its ``confidence`` is
at least ``min_confidence``. An entry whose text is tied to one instance (a worker id, a city, a
role of the staffing sample) applies only to a task of that instance: "Worker 'W90519' does not
exist" tells an agent about W90519, not about its own guess.

**The specific fix.** A planted mistake is switched off only when the text carries its fix; an
entry that names the step but no fix ("Call GET /worker/{id} as other agents did", "describe the
table first") changes nothing. The names are matched, not the sentences, so a model's wording
counts as much as the canonical phrasings the contrast rules write:

=========================  ==============================================================================
``sql_guessed_column``     names the question's real column and its table (whole words), on ``/sql``
``sql_row_cap``            names an aggregate (``count(``, ``avg(``, ``sum(``, ``group by``) and rows, the
                           row limit / row cap, or truncated answers, on ``/sql``
``malformed_body``         names JSON and an encoder (``encoder``, ``json.dumps``, ``serializ…``), on the
                           step whose body is built (``/sql`` or ``/match``)
``worker_guessed_id``      a malformed guess (``w-123``, ``2817``): states the id form (``W + 5 digits``,
                           ``^W[0-9]{5}$``, "W followed by five digits") or the id source; a well-formed
                           unknown guess (``W9xxxx``): says to take ids from a ``/match`` or ``/sql``
                           answer ("returned by", "from … answer", "take", "find")
``match_missing_filters``  names ``role`` and ``state`` or ``city``, on ``/match``
``runtime_timeout``        bounds the prompt at 12,000 tokens or fewer (the size the retry succeeds with)
=========================  ==============================================================================

"On X" means the entry's endpoint is X, or it names none and applies by its task class. ``kind``
decides nothing (``do`` and ``avoid`` entries carry fixes alike). A followed entry is one that fixes
something in this task, whether or not the plan rolled that mistake: the agent does the step the
fixed way either way (what that is per mode is in :mod:`opslake_local.simulator.tasks`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# Not opslake.analysis (the gate's instance_values): importing it builds opslake's logger at INFO
# in the demo's process, and the quiet local stack would print its JSON lines (test_local_quiet).
from opslake.datasets.staffing import CITIES, ROLES
from opslake_local.simulator.modes import MODES, SMALLER_PROMPT_TOKENS, TASK_ENDPOINTS, TASK_MODES
from opslake_local.simulator.plan import TaskPlan

#: A worker id of the valid form; any other guess is malformed.
WORKER_ID = re.compile(r"W\d{5}")
_AGGREGATE = re.compile(r"\b(?:count|avg|sum)\s*\(|\bgroup\s+by\b")
_ROWS = re.compile(r"\brows?\s+(?:limit|cap)\b|\brows\b|\btruncat(?:ed|es|ion)\b")
_JSON = re.compile(r"(?<![a-z0-9_])json(?![a-z0-9_])")
_ENCODER = re.compile(r"\bencoder\b|\bjson\.dumps\b|\bserializ")
_ID_FORM = re.compile(
    r"\^w\[0-9\]\{5\}\$|\^w\\d\{5\}\$"
    r"|\bw\s*\+\s*(?:5|five)\s+digits?\b|\bw\s+followed\s+by\s+(?:5|five)\s+digits?\b"
)
_ID_ROUTE = re.compile(r"(?<![a-z0-9_])/(?:match|sql)(?![a-z0-9_/{])")
_ID_SOURCE = re.compile(r"\breturned\s+by\b|\bfrom\b|\banswers?\b|\btake\b|\bfind\b|\bfound\b")
# An instance: a worker id or another id shape (letters, optional separator, 3+ digits; all-9 digits
# such as w-999 show a form, not an instance), a city or a role of the staffing sample.
_INSTANCE_ID = re.compile(r"(?<![\w/{])[a-z]{1,4}[-_]?(\d{3,})(?![\w}])")
_CITY = re.compile(r"\b(?:" + "|".join(re.escape(c.lower()) for c, _ in CITIES) + r")\b")
_ROLE = re.compile(r"\b(?:" + "|".join(re.escape(r.name.lower()) for r in ROLES) + r")(?:s|es)?\b")
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")
_TOKENS = re.compile(r"\b(\d{1,3}(?:[ ,]\d{3})+|\d+)\s*(k\b)?\s*(?:input\s+)?tokens?\b")


def follow_entries(
    entries: Iterable[object], plan: TaskPlan, *, min_confidence: float = 0.0
) -> list[tuple[str, set[str]]]:
    """The served entries an agent follows for a task, in the order served: each entry's id and the
    modes it switches off (entries that fix nothing here, or are not objects, are not followed)."""
    followed = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        modes = fixes(entry, plan, min_confidence=min_confidence)
        if modes:
            followed.append((str(entry.get("entry_id")), modes))
    return followed


def fixes(entry: Mapping[str, Any], plan: TaskPlan, *, min_confidence: float = 0.0) -> set[str]:
    """The planted mistakes a served entry switches off in a task (rules in the module doc)."""
    if float(entry.get("confidence") or 0.0) < min_confidence:
        return set()
    task_class = plan.task_class
    endpoint, entry_class = entry.get("endpoint"), entry.get("task_class")
    if entry_class not in (None, task_class):
        return set()
    if endpoint and endpoint not in TASK_ENDPOINTS[task_class]:
        return set()
    if not endpoint and entry_class is None:
        return set()  # names neither an endpoint nor a task class: too vague to act on
    text = " ".join(str(entry.get(k) or "") for k in ("trigger", "action", "instead_of"))
    if not _of_this_instance(text, plan):
        return set()
    # a placeholder generalization wrote ({role}, {city}, {state}) stands for an instance, never
    # for the field of that name: "staff job: {role} in {city}" tells no one to send a role
    lowered = _PLACEHOLDER.sub(" ", text.lower())
    fixed = set()
    for mode in TASK_MODES[task_class]:
        steps = set(MODES[mode].endpoints) & set(TASK_ENDPOINTS[task_class])
        if (endpoint is None or endpoint in steps) and _carries_fix(mode, lowered, plan):
            fixed.add(mode)
    return fixed


def _carries_fix(mode: str, text: str, plan: TaskPlan) -> bool:
    """Whether ``text`` (lower case) holds the specific fix of ``mode`` for this plan."""
    if mode == "sql_guessed_column":
        return _word(text, plan.question.column) and _word(text, plan.question.table)
    if mode == "sql_row_cap":
        return bool(_AGGREGATE.search(text) and _ROWS.search(text))
    if mode == "malformed_body":
        return bool(_JSON.search(text) and _ENCODER.search(text))
    if mode == "worker_guessed_id":
        source = bool(_ID_ROUTE.search(text) and _ID_SOURCE.search(text))
        if WORKER_ID.fullmatch(plan.guessed_id):  # well-formed but unknown: only its source helps
            return source
        return source or bool(_ID_FORM.search(text))
    if mode == "match_missing_filters":
        return _word(text, "role") and (_word(text, "state") or _word(text, "city"))
    if mode == "runtime_timeout":
        return any(_token_bound(match) <= SMALLER_PROMPT_TOKENS for match in _TOKENS.finditer(text))
    raise ValueError(f"unknown mode {mode!r}")


def _word(text: str, word: str) -> bool:
    """Whether ``text`` names ``word`` as a whole word (``availability_status`` is not ``availability``)."""
    return re.search(rf"(?<![a-z0-9_]){re.escape(word.lower())}(?![a-z0-9_])", text) is not None


def _token_bound(match: re.Match[str]) -> int:
    number = int(re.sub(r"[ ,]", "", match[1]))
    return number * 1000 if match[2] else number


def _of_this_instance(text: str, plan: TaskPlan) -> bool:
    """Whether every instance the text names (an id, a city, a role) is this task's own (its guessed
    id, city, role): an entry about one worker or one city is news only to a task about them."""
    lowered = text.lower()
    ids = {m[0] for m in _INSTANCE_ID.finditer(lowered) if set(m[1]) != {"9"}}
    cities = {m[0] for m in _CITY.finditer(lowered)}
    roles = {m[0] for m in _ROLE.finditer(lowered)}
    return (
        ids <= {plan.guessed_id.lower()}
        and cities <= {plan.city.lower()}
        and all(role.startswith(plan.role.lower()) for role in roles)
    )
