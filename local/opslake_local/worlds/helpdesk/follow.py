"""Which served playbook entries a service-desk agent follows, and which planted mistakes each one
switches off: the one place that decides "this entry fixes that mistake" in this world.

Before each task an agent reads ``GET /playbooks?task_class=<class>&limit=50`` with its own key (the
server answers the active entries of that class or of none, minus the ones this key is held out of).
:func:`fixes` reads only what is served: ``endpoint``, ``task_class``, ``confidence`` and the text
(``trigger``, ``action``, ``instead_of``).

**Applicability.** The entry's endpoint is a tool the task calls (``tool:<name>``), or it names no
endpoint and its task class is the task's (an entry naming neither is too vague to act on); it fixes
a mistake only at that mistake's tool (an entry on ``tool:update_ticket`` fixes nothing at
``tool:close_ticket``). Its confidence is at least ``min_confidence``.

**The specific fix**, matched by names, never by sentences (a model's wording counts as much as the
contrast rules' phrasing; a tool may be written with or without ``tool:``):

=========================  =======================================================================
``customer_id_form``       names ``customer_id`` and a form that accepts the real id (``CUS-482133``)
                           and refuses the number the agent sends (``482133``): a regex
                           (``CUS-[0-9]{6}``, ``^CUS-\\d{6}$``), a literal and a digit count
                           (``CUS- + 6 digits``, "CUS- followed by six digits"), a shape
                           (``CUS-999999``, ``CUS-######``)
``priority_case``          names ``priority`` and its values as the API spells them: two or more of
                           ``low, normal, high, urgent`` in lower case, or one of them in both cases
                           (``High`` → ``high``), or says they are lower case
``missing_category``       names ``category`` (the required argument to send)
``close_without_comment``  names ``add_comment`` (the call to make before ``close_ticket``) or the
                           rule itself ("a resolution comment")
``guessed_ticket_id``      names ``search_tickets`` (the lookup to make before ``update_ticket``)
``assignee_argument``      names ``assignee`` and says to leave it out (leave out, omit, remove,
                           unexpected, does not take…), or names ``team``, the argument to send
``us_date_form``           names ``date`` and a form that accepts ``2026-12-07`` and refuses
                           ``12/07/2026``: ``YYYY-MM-DD``, ISO 8601, a regex, a shape (``9999-99-99``)
``weekend_visit``          names the rule: Monday to Friday, weekdays, business or working days,
                           weekends
=========================  =======================================================================

An entry that names only the tool ("Call tool:close_ticket as other agents did"), only the error
("update_ticket refuses: 'ticket <id> not found'") or says "check the input" fixes nothing. ``kind``
decides nothing. A followed entry is one that fixes something in this task, whether or not the plan
rolled that mistake: the agent then does that step the careful way.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from opslake_local.simulator.agents import SimAgent
from opslake_local.worlds.helpdesk.modes import MODES, TASK_CLASSES, TASK_MODES, endpoint
from opslake_local.worlds.helpdesk.plan import HelpdeskPlan, plan_task
from opslake_local.worlds.helpdesk.world import PRIORITIES, HelpdeskWorld

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10}  # fmt: skip
# "CUS- + 6 digits", "CUS- followed by six digits", "6 digits"
_SPOKEN = re.compile(
    r"(?:[`'\"]?(?P<literal>[A-Za-z][A-Za-z0-9]*[-_]?)[`'\"]?\s*(?:\+|followed\s+by|and\s+then|then|plus)\s*)?"
    r"(?P<count>\d{1,2}|" + "|".join(_NUMBERS) + r")\s+digits?\b",
    re.IGNORECASE,
)
# YYYY-MM-DD, DD/MM/YYYY…
_DATE_PLACEHOLDER = re.compile(
    r"(?<![A-Za-z])([YMDymd]{1,4})([-/.])([YMDymd]{1,4})\2([YMDymd]{1,4})(?![A-Za-z])"
)
_ISO = re.compile(r"\biso[\s-]?8601\b|\biso\s+(?:date|format)\b", re.IGNORECASE)
# a shape: digits read as 9 or written as #, after an optional literal (CUS-999999, 9999-99-99, CUS-######)
_SHAPE = re.compile(r"(?<![\w-])([A-Za-z]{0,6}[-_]?)((?:9{2,}|#{2,})(?:[-/.](?:9+|#+))*)(?![\w#])")
# what may be a regex: a token holding a class, an escape or a quantifier
_REGEX_HINT = re.compile(r"\[[^\]]+\]|\\d|\{\d+(?:,\d*)?\}")
_TOKEN = re.compile(r"`([^`]+)`|(\S+)")
_LOWER_CASE = re.compile(r"\blower[\s-]?case\b", re.IGNORECASE)
_LEAVE_OUT = re.compile(
    r"\b(?:leaves?(?:\s+[\w:`'\"]+){0,2}\s+out|omit|omits|without|remove|drop|unexpected|unknown|never\s+send"
    r"|do\s+not\s+send|don't\s+send|not\s+send|does\s+not\s+(?:take|accept)|doesn't\s+(?:take|accept)"
    r"|no\s+such|not\s+a\s+(?:valid\s+)?(?:argument|parameter|field))\b",
    re.IGNORECASE,
)
_RESOLUTION_COMMENT = re.compile(r"\bresolution\s+comment", re.IGNORECASE)
_WEEKDAYS_RULE = re.compile(
    r"\bmonday\s*(?:to|-|–|through|until)\s*friday\b|\bmon\s*(?:-|–|to)\s*fri\b|\bweekdays?\b"
    r"|\bbusiness\s+days?\b|\bworking\s+days?\b|\bweekends?\b",
    re.IGNORECASE,
)


def follow_entries(
    entries: Iterable[object], plan: HelpdeskPlan, *, min_confidence: float = 0.0
) -> list[tuple[str, set[str]]]:
    """The served entries an agent follows for a task, in the order served: each entry's id and the
    mistakes it switches off (entries that fix nothing here, or are not objects, are not followed)."""
    followed = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        modes = fixes(entry, plan, min_confidence=min_confidence)
        if modes:
            followed.append((str(entry.get("entry_id")), modes))
    return followed


def fixes(entry: Mapping[str, Any], plan: HelpdeskPlan, *, min_confidence: float = 0.0) -> set[str]:
    """The planted mistakes a served entry switches off in a task (rules in the module doc)."""
    if float(entry.get("confidence") or 0.0) < min_confidence:
        return set()
    where, entry_class = entry.get("endpoint"), entry.get("task_class")
    if entry_class not in (None, plan.task_class):
        return set()
    if where and where not in {endpoint(tool) for tool in plan.tools}:
        return set()
    if not where and entry_class is None:
        return set()  # names neither an endpoint nor a task class: too vague to act on
    text = " ".join(str(entry.get(k) or "") for k in ("trigger", "action", "instead_of"))
    return {
        mode
        for mode in TASK_MODES[plan.task_class]
        if (not where or where == endpoint(MODES[mode].tool)) and carries_fix(mode, text, plan)
    }


@cache
def sample_plans() -> tuple[HelpdeskPlan, ...]:
    """One plan per task class with every mistake rolled: what "an entry names a mistake's fix" is
    judged on outside a task (the forms and names a fix needs are the same in every plan)."""
    agent = SimAgent("sample", "", dict.fromkeys(MODES, 1.0))
    base = plan_task(random.Random("sample"), agent, HelpdeskWorld(0), "TCK-10001")
    return tuple(replace(base, task_class=task_class) for task_class in TASK_CLASSES)


def modes_fixed(entry: Mapping[str, Any], plans: Sequence[HelpdeskPlan] | None = None) -> set[str]:
    """Every planted mistake ``entry`` switches off in some task (``plans``: :func:`sample_plans`)."""
    return set().union(*(fixes(entry, plan) for plan in (plans or sample_plans())))


def carries_fix(mode: str, text: str, plan: HelpdeskPlan) -> bool:
    """Whether ``text`` (an entry's trigger, action and instead-of) holds the fix of ``mode``."""
    if mode == "customer_id_form":
        return names(text, "customer_id") and _states_form(text, plan, mode)
    if mode == "us_date_form":
        return names(text, "date") and (bool(_ISO.search(text)) or _states_form(text, plan, mode))
    if mode == "priority_case":
        return names(text, "priority") and _states_enum_case(text)
    if mode == "missing_category":
        return names(text, "category")
    if mode == "close_without_comment":
        return names(text, "add_comment") or bool(_RESOLUTION_COMMENT.search(text))
    if mode == "guessed_ticket_id":
        return names(text, "search_tickets")
    if mode == "assignee_argument":
        return names(text, "assignee") and (bool(_LEAVE_OUT.search(text)) or names(text, "team"))
    if mode == "weekend_visit":
        return bool(_WEEKDAYS_RULE.search(text))
    raise ValueError(f"unknown mode {mode!r}")


def names(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a whole word (any case, a plural ``s`` allowed;
    ``tool:add_comment`` names ``add_comment``, ``update_ticket`` does not name ``date``)."""
    return (
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}s?(?![A-Za-z0-9_])", text, re.IGNORECASE) is not None
    )


def forms(text: str) -> list[re.Pattern[str]]:
    """Every value form ``text`` states, as a pattern to fullmatch: regexes, spoken digit counts
    after an optional literal, date placeholders and shapes (a form that does not compile is
    skipped)."""
    found: list[str] = []
    for match in _TOKEN.finditer(text):
        token = (match[1] or match[2]).strip(".,;:()'\"")
        if _REGEX_HINT.search(token):
            found.append(token.removeprefix("^").removesuffix("$"))
    for match in _SPOKEN.finditer(text):
        count = match["count"].lower()
        digits = int(count) if count.isdigit() else _NUMBERS[count]
        found.append(re.escape(match["literal"] or "") + rf"\d{{{digits}}}")
    for match in _DATE_PLACEHOLDER.finditer(text):
        separator = re.escape(match[2])
        found.append(separator.join(rf"\d{{{len(part)}}}" for part in (match[1], match[3], match[4])))
    for match in _SHAPE.finditer(text):
        runs = re.findall(r"9+|#+|[^9#]+", match[2])
        found.append(
            re.escape(match[1])
            + "".join(rf"\d{{{len(run)}}}" if run[0] in "9#" else re.escape(run) for run in runs)
        )
    patterns = []
    for source in found:
        try:
            patterns.append(re.compile(source))
        except re.error:
            continue
    return patterns


def _states_form(text: str, plan: HelpdeskPlan, mode: str) -> bool:
    """Whether a form the text states accepts this task's valid value and refuses its wrong one."""
    values = plan.values(mode)
    if values is None:
        return False
    valid, wrong = values
    return any(p.fullmatch(valid) and not p.fullmatch(wrong) for p in forms(text))


def _states_enum_case(text: str) -> bool:
    """Whether the text spells the priority values as the API does (see the module doc)."""
    if _LOWER_CASE.search(text):
        return True
    spelled = {v for v in PRIORITIES if re.search(rf"(?<![A-Za-z0-9_]){v}(?![A-Za-z0-9_])", text)}
    if len(spelled) >= 2:
        return True
    return any(
        re.search(rf"(?<![A-Za-z0-9_])(?:{v.title()}|{v.upper()})(?![A-Za-z0-9_])", text) for v in spelled
    )
