"""Lifecycle and serving: who may be served (:func:`review`), approving a proposed entry, and the
snapshot ``GET /playbooks`` serves."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from opslake.analysis.catalog.known import Vocabulary
from opslake.analysis.fence import label_refusal, lesson_refusal, served_fields_refusal
from opslake.analysis.playbooks.quality import quality_refusal
from opslake.analysis.reporters import ReporterTrust
from opslake.models.playbooks import EntrySource, PlaybookEntry, PlaybookSnapshot
from opslake.observability import logger

#: Sources whose served text an agent wrote (a /log report's operation and approach, or a model's
#: rewording of them): never published on evidence alone unless a deployment opts in.
AGENT_WRITTEN: frozenset[str] = frozenset({"log"})
FREE_TEXT_HELD = "agent-written text: waits for an operator's approval"


def publishable(
    source: EntrySource | str | None, reporters: int, min_reporters: int, free_text_min: int
) -> bool:
    """Whether evidence from ``reporters`` independent reporters publishes an entry of ``source``
    without an operator: entries opslake composes (contrasts, quoted rules, call shapes,
    diagnoses) need ``min_reporters``; text an agent wrote (:data:`AGENT_WRITTEN`) is held
    unless ``free_text_min`` > 0 (``OPSLAKE_PLAYBOOK_FREE_TEXT_MIN_REPORTERS``), and then needs
    that many reporters and ``min_reporters`` both. Pattern checks on free text keep losing to
    colluding keys; a person reads it first."""
    if source in AGENT_WRITTEN:
        return free_text_min > 0 and reporters >= max(free_text_min, min_reporters)
    return reporters >= min_reporters


class EntryNotFoundError(KeyError):
    """No entry with that id."""


@dataclass
class Review:
    """Entries after :func:`review`, and which of them changed status."""

    entries: list[PlaybookEntry]
    published: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    #: "entry_id: reason" of every entry the lesson fence refuses now (an unapproved one is not served)
    refused: list[str] = field(default_factory=list)
    #: "entry_id: reason" of the approved ones among them: still served (an operator's decision),
    #: reported so that the operator can retire them
    approved_refused: list[str] = field(default_factory=list)


def fence_refusal(entry: PlaybookEntry, vocabulary: Vocabulary | None = None) -> str | None:
    """Why the lesson fence or the quality gate refuses ``entry``'s served text as it is stored (its
    endpoint and task class, trigger, action and instead-of), else ``None``. Run whenever an entry
    may become or stay active: entries stored before a fence or gate (or before this version of
    them) are checked like new ones. The gate's reasons start with ``"quality: "``."""
    endpoint = entry.endpoint
    if endpoint is not None:
        reason = served_fields_refusal(endpoint, entry.task_class)
    else:
        reason = label_refusal(entry.task_class) if entry.task_class is not None else None
    if reason:
        return reason
    vocabulary = vocabulary or Vocabulary()
    known = vocabulary.known_names
    if endpoint is not None:
        parts = [p for p in re.split(r"[/:]", endpoint) if p and not p.startswith("{")]
        known = known.extended([endpoint], parts)
    for name, text in (
        ("trigger", entry.trigger),
        ("action", entry.action),
        ("instead of", entry.instead_of),
    ):
        reason = lesson_refusal(text, known) if text is not None else None
        if reason:
            return f"{name}: {reason}"
    return quality_refusal(
        entry.trigger, entry.action, entry.instead_of, endpoint, entry.task_class, vocabulary=vocabulary
    )


def review(
    entries: Sequence[PlaybookEntry],
    *,
    trust: ReporterTrust,
    min_reporters: int,
    approval_mode: bool,
    now: datetime,
    vocabulary: Vocabulary | None = None,
    free_text_min_reporters: int = 0,
) -> Review:
    """Recount every entry's independent reporters under the trust levels as they are now, and
    apply the one rule of what is served: an entry is ``active`` when an operator approved it, or
    when at least ``min_reporters`` independent reporters vouch for its evidence and the lesson
    fence passes its stored text.

    * an active entry that was never approved and no longer has enough reporters (a key marked
      untrusted since, or an entry published before reporters were counted) goes back to
      ``proposed`` (``withheld``) until it is approved or gathers enough reporters again;
    * a proposed entry that has gathered enough reporters is published (``published``), except in
      approval mode, where only an operator publishes;
    * an approved entry is active (one an earlier version withheld is ``published`` again);
    * retired entries stay retired;
    * an unapproved entry whose stored text the lesson fence refuses (:func:`fence_refusal`) is
      never active: it goes (or stays) ``proposed`` and is listed in ``refused`` with the reason;
    * an approved one stays served (the fence never silently undoes an operator's decision: it
      may have been approved before this version of the fence) and is listed in ``refused`` and
      ``approved_refused`` and logged at every run, for the operator to retire.
    """
    out = Review(entries=[])
    for entry in entries:
        if entry.status == "retired":
            out.entries.append(entry)
            continue
        count = trust.count(entry.evidence_reporters)
        update: dict[str, object] = {}
        if count != entry.evidence_reporter_count:
            update["evidence_reporter_count"] = count
        refusal = fence_refusal(entry, vocabulary)
        if refusal:
            out.refused.append(f"{entry.entry_id}: {refusal}")
            if entry.approved_at is not None:
                out.approved_refused.append(f"{entry.entry_id}: {refusal}")
        vouched = publishable(entry.source, count, min_reporters, free_text_min_reporters) and not refusal
        if entry.approved_at is not None:
            if entry.status != "active":
                update.update(status="active", published_at=now, updated_at=now)
                out.published.append(entry.entry_id)
        elif entry.status == "active" and not vouched:
            update.update(status="proposed", published_at=None, updated_at=now)
            out.withheld.append(entry.entry_id)
        elif entry.status != "active" and vouched and not approval_mode:
            update.update(status="active", published_at=now, updated_at=now)
            out.published.append(entry.entry_id)
        out.entries.append(entry.model_copy(update=update) if update else entry)
    unapproved = [r for r in out.refused if r not in out.approved_refused]
    if unapproved:
        logger.warning(
            "playbook entries refused by the lesson fence or the quality gate", entries=unapproved[:20]
        )
    for line in out.approved_refused[:20]:
        logger.warning(f"approved entry the fence refuses: {line}")
    return out


def approve(
    entries: Sequence[PlaybookEntry],
    entry_id: str,
    now: datetime,
    *,
    override_fence: bool = False,
    vocabulary: Vocabulary | None = None,
) -> list[PlaybookEntry]:
    """Publish a proposed entry (``opslake playbooks approve ID``): it is then served whatever its
    evidence (``approved_at``), until its holdout experiment (harmful, no effect) or an
    operator retires it.

    Approving an active entry records the approval; a retired one cannot be approved
    (ValueError). Nor can one whose text the lesson fence refuses (:func:`fence_refusal`), unless
    ``override_fence`` (``--override-fence``): the operator has read the text and serves it anyway,
    and the refusal overridden is kept on the entry (``fence_override_reason``).
    """
    out: list[PlaybookEntry] = []
    found = False
    for entry in entries:
        if entry.entry_id == entry_id:
            found = True
            if entry.status == "retired":
                raise ValueError(f"playbook entry {entry_id} is retired and cannot be approved")
            refusal = fence_refusal(entry, vocabulary)
            if refusal and not override_fence:
                raise ValueError(
                    f"playbook entry {entry_id} is refused by the lesson fence: {refusal} "
                    "(read its text; approve it with --override-fence to serve it anyway)"
                )
            if entry.status != "active":
                entry = entry.model_copy(update={"status": "active", "published_at": now, "updated_at": now})
            if entry.approved_at is None:
                entry = entry.model_copy(update={"approved_at": now, "updated_at": now})
            if refusal and entry.fence_override_reason != refusal:
                entry = entry.model_copy(update={"fence_override_reason": refusal, "updated_at": now})
        out.append(entry)
    if not found:
        raise EntryNotFoundError(entry_id)
    return out


def retire(entries: Sequence[PlaybookEntry], entry_id: str, now: datetime) -> list[PlaybookEntry]:
    """Stop serving an entry for good (``opslake playbooks retire ID``): say, an approved one the
    lesson fence refuses (:func:`review` reports those). A retired entry is never revived; a
    candidate that says the same is refused (:func:`~.merging.merge_candidates`). Idempotent."""
    out: list[PlaybookEntry] = []
    found = False
    for entry in entries:
        if entry.entry_id == entry_id:
            found = True
            if entry.status != "retired":
                entry = entry.model_copy(update={"status": "retired", "retired_at": now, "updated_at": now})
        out.append(entry)
    if not found:
        raise EntryNotFoundError(entry_id)
    return out


def snapshot(entries: Iterable[PlaybookEntry], now: datetime) -> PlaybookSnapshot:
    """What ``GET /playbooks`` serves: active entries only, in a stable order."""
    active = sorted((e for e in entries if e.status == "active"), key=lambda e: e.entry_id)
    return PlaybookSnapshot(generated_at=now, entries=active)
