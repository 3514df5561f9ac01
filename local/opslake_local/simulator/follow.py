"""Which served playbook entries an agent follows, and which planted mistakes each one switches off:
the one place that decides "this entry fixes that mistake".

Before each task an agent reads ``GET /playbooks?task_class=<class>&limit=50`` (the server returns
the active entries whose ``task_class`` is that class or none, whatever their endpoint). An entry
is *followed* for a mistake mode when all of these hold:

1. it targets the mode's step: its ``endpoint`` is one the mode happens on (``/sql``,
   ``/worker/{id}``, ``/match``, ``runtime:model_call``), or it names no endpoint and its
   ``task_class`` is the task's class (an entry naming neither is too vague to act on and is
   ignored);
2. it is about this mode: if its trigger or action names any mode's keywords
   (:attr:`~opslake_local.simulator.modes.Mode.keywords`, whole words, case-insensitive), it is
   followed only for the modes it names; an entry that names no mode's keywords covers every mode
   of its step;
3. its ``confidence`` is at least ``min_confidence`` (default 0).

``kind`` decides nothing: ``avoid`` ("avoid guessing column names") and ``do`` ("describe the
table first") both switch on the careful way of doing the step (what careful means per mode is in
:mod:`opslake_local.simulator.tasks`). A followed entry is counted in
:attr:`~opslake_local.simulator.stats.CycleStats.entries_followed` once per task.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opslake_local.simulator.modes import MODES, TASK_ENDPOINTS, TASK_MODES


def follow_entries(
    entries: Iterable[object], task_class: str, *, min_confidence: float = 0.0
) -> list[tuple[str, set[str]]]:
    """The served entries an agent follows for a task, in the order served: each entry's id and the
    modes it switches off (entries that switch off none, or are not objects, are not followed)."""
    followed = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        modes = followed_modes(entry, task_class, min_confidence=min_confidence)
        if modes:
            followed.append((str(entry.get("entry_id")), modes))
    return followed


def followed_modes(entry: Mapping[str, Any], task_class: str, *, min_confidence: float = 0.0) -> set[str]:
    """The mistake modes a served playbook entry switches off for a task (rules in the module doc)."""
    if float(entry.get("confidence") or 0.0) < min_confidence:
        return set()
    endpoint, entry_class = entry.get("endpoint"), entry.get("task_class")
    if entry_class not in (None, task_class):
        return set()
    candidates = set(TASK_MODES[task_class])
    if endpoint:  # the entry's endpoint must be a step of this task where the mode happens
        if endpoint not in TASK_ENDPOINTS[task_class]:
            return set()
        candidates = {m for m in candidates if endpoint in MODES[m].endpoints}
    elif entry_class is None:
        return set()  # names neither an endpoint nor a task class: too vague to act on
    text = f"{entry.get('trigger', '')} {entry.get('action', '')}"
    named = {m for m in MODES if _names(text, MODES[m].keywords)}
    return candidates & named if named else candidates


def _names(text: str, keywords: Sequence[str]) -> bool:
    """Whether ``text`` names any of ``keywords`` as whole words, case-insensitive."""
    lowered = text.lower()
    return any(re.search(rf"(?<![a-z0-9_]){re.escape(k)}(?![a-z0-9_])", lowered) for k in keywords)
