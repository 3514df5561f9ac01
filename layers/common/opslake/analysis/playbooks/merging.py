"""Merging: distilled candidates folded into the playbook's entries.

A candidate that says the same as an entry (:func:`find_duplicate`) strengthens it; a new one
becomes an entry (``active`` when enough independent reporters vouch for it, else ``proposed``, and
always ``proposed`` in approval mode); a poisoned one, or one that matches a retired entry, is
refused (:func:`rejection_reason`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import ValidationError

from opslake.analysis.catalog.known import Vocabulary
from opslake.analysis.fence import (
    ELLIPSIS,
    compatible,
    instruction_refusal,
    lesson_refusal,
    served_fields_refusal,
)
from opslake.analysis.playbooks.drafting import DistilledCandidate, known_for
from opslake.analysis.playbooks.grouping import CandidateGroup, lesson_key
from opslake.analysis.playbooks.quality import quality_refusal
from opslake.analysis.reporters import ReporterTrust, cap_witnesses
from opslake.models.playbooks import MAX_DRAFT_EXCERPTS, MAX_EVIDENCE, MAX_TRACKED_AGENTS, PlaybookEntry

SIMILARITY_THRESHOLD = 0.6  # Jaccard of trigger+action tokens for a near-duplicate
MERGE_PULL = 0.25  # how far a merged entry's confidence moves toward the new draft's
MERGE_BOOST = 0.05  # and the bonus for independent confirmation


@dataclass(frozen=True)
class Rejection:
    """A candidate refused by the merge, and why (reported, never stored)."""

    group_key: str
    reason: str


@dataclass
class MergeResult:
    """All entries after the merge, plus what happened (for logs and metrics)."""

    entries: list[PlaybookEntry]
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


def entry_id_for(group_key: str) -> str:
    """Deterministic: the same evidence group always maps to the same entry."""
    return "pb_" + hashlib.sha256(group_key.encode()).hexdigest()[:16]


_TOKEN = re.compile(r"[a-z0-9_]+")


def _tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text.lower()))


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of two texts."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def _same_fix(entry: PlaybookEntry, fix_kind: str | None, fix_names: Sequence[str]) -> bool:
    """Whether an entry carries this contrast fix (both none: plain entries, compared by text)."""
    return entry.fix_kind == fix_kind and (fix_kind is None or sorted(entry.fix_names) == sorted(fix_names))


def find_duplicate(entries: Sequence[PlaybookEntry], candidate: DistilledCandidate) -> PlaybookEntry | None:
    """The entry ``candidate`` says the same as: same ``group_key``; else same endpoint and kind
    with trigger+action at least :data:`SIMILARITY_THRESHOLD` similar (the most similar wins). A
    contrast fix is the same only as an entry with the same fix (kind and names): "Use the column
    rating of workers" and "… hourly_rate of workers" read alike and are two entries."""
    group = candidate.group
    key = group.group_key
    for entry in entries:
        if entry.group_key == key or entry.entry_id == entry_id_for(key):
            return entry
    text = f"{candidate.draft.trigger} {candidate.draft.action}"
    best: tuple[float, str] | None = None
    found: PlaybookEntry | None = None
    for entry in entries:
        if entry.endpoint != group.endpoint or entry.kind != candidate.draft.kind:
            continue
        if not _same_fix(entry, group.fix_kind, group.fix_names):
            continue
        if group.fix_kind is not None:  # the same fix for the same readers, found again under another key
            if entry.task_class == group.task_class:
                return entry
            continue
        score = similarity(text, f"{entry.trigger} {entry.action}")
        if score >= SIMILARITY_THRESHOLD and (best is None or (score, entry.entry_id) > best):
            best, found = (score, entry.entry_id), entry
    return found


def _union(old: Sequence[str], new: Iterable[str], cap: int) -> list[str]:
    merged = list(dict.fromkeys([*old, *new]))
    return merged[-cap:]  # keep the newest evidence


def _evidence_added(
    entry: PlaybookEntry,
    op_ids: Iterable[str],
    excerpts: Iterable[str],
    agents: list[str],
    agent_count: int,
    reporters: list[str],
    trust: ReporterTrust,
) -> dict[str, object]:
    """The evidence fields of ``entry`` with more evidence folded in (op ids and excerpts unioned,
    capped, newest kept; ``agents`` and ``reporters`` as the caller unioned them, counted under ``trust``)."""
    return {
        "evidence_op_ids": _union(entry.evidence_op_ids, op_ids, MAX_EVIDENCE),
        "evidence_excerpts": _union(entry.evidence_excerpts, excerpts, MAX_DRAFT_EXCERPTS),
        "evidence_agents": agents,
        "evidence_agent_count": max(entry.evidence_agent_count, agent_count, len(agents)),
        "evidence_reporters": reporters,
        "evidence_reporter_count": trust.count(reporters),
    }


def _fix_counts(entry: PlaybookEntry, group: CandidateGroup) -> dict[str, object]:
    """A contrast's counts as the latest window found them (the largest seen, so a quiet window
    does not make the fix look thinner than it was)."""
    if group.fix_failures is None:
        return {}
    return {
        "fix_failures": max(entry.fix_failures or 0, group.fix_failures),
        "fix_successes": max(entry.fix_successes or 0, group.fix_successes or 0),
    }


def supporting_reporters(candidate: DistilledCandidate) -> tuple[str, ...]:
    """The reporters who vouch for the text ``candidate`` would serve: for a ``/log`` group whose
    action is one of its approaches (as the fence served it, perhaps cut), that approach's
    reporters only (compared by :func:`~.grouping.lesson_key`); otherwise (validated parts, a
    diagnosis, a call shape, a model's own words) the group's."""
    group, action = candidate.group, _plain(candidate.draft.action.removeprefix("Avoid: "))
    if group.source != "log" or len(group.approach_reporters) != len(group.approaches):
        return group.reporters
    cut = action.endswith(ELLIPSIS)
    key = lesson_key(action.removesuffix(ELLIPSIS))
    for approach, reporters in zip(group.approaches, group.approach_reporters, strict=True):
        if lesson_key(approach) == key or (cut and _plain(approach).casefold().startswith(key)):
            return reporters
    return group.reporters


def _plain(text: str) -> str:
    return " ".join(compatible(text).split())


def _same_text(a: str, b: str) -> bool:
    """Served texts that say the same lesson (:func:`~.grouping.lesson_key`: case, spacing,
    compatibility forms and trailing punctuation aside): their reporters add up."""
    return lesson_key(a) == lesson_key(b)


def ever_served(entry: PlaybookEntry) -> bool:
    """Whether an entry's text was ever served (active now, approved, or with an experiment begun):
    such a text is immutable; a better one is a new entry with its own experiment."""
    return (
        entry.status == "active" or entry.approved_at is not None or entry.experiment_started_at is not None
    )


def rejection_reason(
    candidate: DistilledCandidate, *, min_agents: int, vocabulary: Vocabulary | None = None
) -> str | None:
    """Why a distilled candidate must never become (or update) an entry."""
    group, draft = candidate.group, candidate.draft
    if group.agent_count < min_agents:
        return f"evidence from {group.agent_count} distinct agent(s); {min_agents} required"
    reason = served_fields_refusal(group.endpoint, group.task_class)  # claims served as fields
    if reason:
        return reason
    known = known_for(group, vocabulary)  # the group's own endpoint is a validated part
    for name, text in (
        ("trigger", draft.trigger),
        ("action", draft.action),
        ("instead of", draft.instead_of),
    ):
        reason = lesson_refusal(text, known) if text is not None else None
        if reason:
            return f"{name}: {reason}"
    for text in (*draft.evidence_excerpts, *group.excerpts, *group.approaches, group.operation or ""):
        reason = instruction_refusal(text)
        if reason:
            return f"evidence: {reason}"
    # safe, but is it advice? (heuristic and model text alike; reasons start with "quality: ")
    return quality_refusal(
        draft.trigger, draft.action, draft.instead_of, group.endpoint, group.task_class, vocabulary=vocabulary
    )


def merge_candidates(
    existing: Sequence[PlaybookEntry],
    drafts: Iterable[DistilledCandidate],
    *,
    now: datetime,
    approval_mode: bool = False,
    min_agents: int = 2,
    min_reporters: int = 2,
    trust: ReporterTrust | None = None,
    vocabulary: Vocabulary | None = None,
    free_text_min_reporters: int = 0,
) -> MergeResult:
    """Fold distilled candidates into the entries.

    A candidate that says the same as an entry (:func:`find_duplicate`) updates it: evidence op
    ids, excerpts, agents and reporters unioned (capped, newest kept), the counts raised,
    confidence moved :data:`MERGE_PULL` of the way toward the draft's plus :data:`MERGE_BOOST`
    (capped at 1); its text stays (agents keep seeing stable advice); whether it is now served is
    :func:`~.lifecycle.review`'s call. A retired entry is never revived. Otherwise a new entry is
    made: ``active`` (``published_at`` = now) when at least ``min_reporters`` independent reporters
    vouch for its evidence (``trust``), else ``proposed`` until approved; always ``proposed`` in
    approval mode. Text an agent wrote (a ``/log`` group's) is ``proposed`` unless
    ``free_text_min_reporters`` opts in (:func:`~.lifecycle.publishable`). Poisoned candidates are
    refused and reported in ``rejected``.
    """
    from opslake.analysis.playbooks.lifecycle import publishable

    trust = trust or ReporterTrust()
    entries = {e.entry_id: e for e in existing}
    result = MergeResult(entries=[])
    for candidate in sorted(drafts, key=lambda c: c.group.group_key):
        group, draft = candidate.group, candidate.draft
        reason = rejection_reason(candidate, min_agents=min_agents, vocabulary=vocabulary)
        if reason:
            result.rejected.append(Rejection(group.group_key, reason))
            continue
        duplicate = find_duplicate(list(entries.values()), candidate)
        if duplicate is not None and duplicate.status == "retired":
            result.rejected.append(Rejection(group.group_key, f"matches retired entry {duplicate.entry_id}"))
            continue
        if duplicate is not None:
            agents = _union(duplicate.evidence_agents, group.agents, MAX_TRACKED_AGENTS)
            # reporters count toward the text they support: the same text gathers them; a different
            # text (another approach, another creator's words) replaces an unapproved entry's text
            # only when more independent reporters give it, else the entry keeps its own reporters
            support = supporting_reporters(candidate)
            same_text = _same_text(draft.trigger, duplicate.trigger) and _same_text(
                draft.action, duplicate.action
            )
            text: dict[str, object] = {}
            if same_text:
                reporters = cap_witnesses([*duplicate.evidence_reporters, *support])
            elif not ever_served(duplicate) and trust.count(support) > trust.count(
                duplicate.evidence_reporters
            ):
                reporters = list(support[-MAX_TRACKED_AGENTS:])
                text = {
                    "trigger": draft.trigger,
                    "action": draft.action,
                    "instead_of": draft.instead_of,
                    "distilled_by": candidate.distilled_by,
                }
            else:
                reporters = list(duplicate.evidence_reporters)
            confidence = duplicate.confidence + MERGE_PULL * (draft.confidence - duplicate.confidence)
            entries[duplicate.entry_id] = duplicate.model_copy(
                update={
                    **_evidence_added(
                        duplicate,
                        group.op_ids,
                        draft.evidence_excerpts,
                        agents,
                        group.agent_count,
                        reporters,
                        trust,
                    ),
                    "confidence": round(min(1.0, max(0.0, confidence + MERGE_BOOST)), 3),
                    "updated_at": now,
                    **_fix_counts(duplicate, group),
                    **text,
                }
            )
            if duplicate.entry_id not in result.updated:
                result.updated.append(duplicate.entry_id)
            continue
        entry_id = entry_id_for(group.group_key)
        reporters = list(supporting_reporters(candidate)[-MAX_TRACKED_AGENTS:])
        vouched = publishable(group.source, trust.count(reporters), min_reporters, free_text_min_reporters)
        status: Literal["proposed", "active"] = "active" if vouched and not approval_mode else "proposed"
        try:
            entry = _new_entry(entry_id, candidate, reporters, status, now, trust)
        except ValidationError as error:
            # a value the contract refuses (a name past the id limit …): this candidate is refused,
            # never the run
            problem = error.errors()[0]
            where = ".".join(str(p) for p in problem.get("loc", ()))
            result.rejected.append(Rejection(group.group_key, f"invalid entry: {where}: {problem['msg']}"))
            continue
        entries[entry_id] = entry
        result.created.append(entry_id)
    result.entries = sorted(entries.values(), key=lambda e: e.entry_id)
    return result


def _new_entry(
    entry_id: str,
    candidate: DistilledCandidate,
    reporters: list[str],
    status: Literal["proposed", "active"],
    now: datetime,
    trust: ReporterTrust,
) -> PlaybookEntry:
    group, draft = candidate.group, candidate.draft
    return PlaybookEntry(
        entry_id=entry_id, trigger=draft.trigger, action=draft.action, kind=draft.kind,
        confidence=draft.confidence, domain=draft.domain, scope=draft.scope, endpoint=group.endpoint,
        task_class=group.task_class, signature_id=group.signature_id, group_key=group.group_key,
        source=group.source, distilled_by=candidate.distilled_by,
        evidence_op_ids=list(group.op_ids[-MAX_EVIDENCE:]), evidence_excerpts=list(draft.evidence_excerpts),
        evidence_agents=list(group.agents), evidence_agent_count=group.agent_count,
        evidence_reporters=reporters, evidence_reporter_count=trust.count(reporters), status=status,
        created_at=now, updated_at=now, published_at=now if status == "active" else None,
        instead_of=draft.instead_of, fix_kind=group.fix_kind, fix_names=list(group.fix_names),
        fix_failures=group.fix_failures, fix_successes=group.fix_successes,
    )  # fmt: skip


@dataclass
class EntryMerge:
    """Entries after :func:`merge_entries`, and which were absorbed into which (absorbed → kept)."""

    entries: list[PlaybookEntry]
    merged: dict[str, str] = field(default_factory=dict)


def _fold_key(entry: PlaybookEntry) -> tuple[object, ...] | None:
    """What makes two contrast entries the same fix for the same readers (None: no fix)."""
    if entry.fix_kind is None:
        return None
    return (entry.endpoint, entry.task_class, entry.kind, entry.fix_kind, tuple(sorted(entry.fix_names)))


def _alike(a: PlaybookEntry, b: PlaybookEntry) -> bool:
    """Two live entries that say the same: the same fix for the same readers, or (neither a fix)
    the same endpoint, task class and kind with texts at least :data:`SIMILARITY_THRESHOLD` alike."""
    if a.fix_kind is not None or b.fix_kind is not None:
        return _fold_key(a) == _fold_key(b)
    return (a.endpoint, a.task_class, a.kind) == (b.endpoint, b.task_class, b.kind) and similarity(
        f"{a.trigger} {a.action}", f"{b.trigger} {b.action}"
    ) >= SIMILARITY_THRESHOLD


def merge_entries(
    entries: Sequence[PlaybookEntry], *, now: datetime, trust: ReporterTrust | None = None
) -> EntryMerge:
    """Fold duplicate live entries: of two unapproved, unretired entries that say the same
    (:func:`_alike`), the younger is absorbed into the older (``merged_into``, retired with
    ``retired_reason="merged"``) and the older gains its evidence (op ids, excerpts, agents and
    reporters unioned, counts recomputed under ``trust``). The older keeps its text (a served text
    is immutable) and its experiment; approved entries are an operator's and never folded. Deltas
    (:mod:`.deltas`) record the absorbed entry's ``merge`` and the kept one's ``update``."""
    trust = trust or ReporterTrust()
    by_id = {e.entry_id: e for e in entries}
    order = sorted(
        (e for e in entries if e.status != "retired" and e.approved_at is None),
        key=lambda e: (e.created_at, e.entry_id),
    )
    out = EntryMerge(entries=[])
    kept: list[str] = []
    for entry in order:
        into = next((by_id[k] for k in kept if _alike(by_id[k], entry)), None)
        if into is None:
            kept.append(entry.entry_id)
            continue
        agents = _union(into.evidence_agents, entry.evidence_agents, MAX_TRACKED_AGENTS)
        reporters = cap_witnesses([*into.evidence_reporters, *entry.evidence_reporters])
        by_id[into.entry_id] = into.model_copy(
            update={
                **_evidence_added(
                    into,
                    entry.evidence_op_ids,
                    entry.evidence_excerpts,
                    agents,
                    entry.evidence_agent_count,
                    reporters,
                    trust,
                ),
                "updated_at": now,
            }
        )
        by_id[entry.entry_id] = entry.model_copy(
            update={
                "status": "retired",
                "retired_at": now,
                "retired_reason": "merged",
                "merged_into": into.entry_id,
                "updated_at": now,
            }
        )
        out.merged[entry.entry_id] = into.entry_id
    out.entries = sorted(by_id.values(), key=lambda e: e.entry_id)
    return out
