"""Grouping: the consolidator's evidence rows → candidate groups, each of which may become one entry.

Successes group by call shape (:func:`success_template`), ``/log`` records by operation and
do/avoid, "avoid" diagnoses by signature; a group needs enough ops from enough distinct claimed
agents. Each group also counts its *independent reporters* (:mod:`opslake.analysis.reporters`: API
keys by trust level, never claimed agents): that count, not the agents, decides whether its entry
is published or waits for approval. Ops from untrusted keys (and opslake's own) are no evidence.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import model_validator

from opslake.analysis.fence import compatible
from opslake.analysis.reporters import ReporterTrust, cap_witnesses
from opslake.analysis.signatures import input_template, normalize
from opslake.models.analysis import Diagnosis
from opslake.models.ops import OpRow
from opslake.models.playbooks import (
    LOG_FORMAT,
    MAX_DRAFT_EXCERPTS,
    MAX_EVIDENCE,
    MAX_TRACKED_AGENTS,
    EntryKind,
    EntrySource,
)

# Routes about opslake itself: calling them successfully teaches nothing about the task.
IGNORED_ENDPOINTS = frozenset({"/log", "/playbooks", "/health", "/stats", "/events", "/model"})


# ---- inputs -------------------------------------------------------------------------------------
class SuccessRow(OpRow):
    """A successful op as the consolidator reads it from ``ops``."""

    reporter_id: str | None = None  # the API key (server-set): who vouches for it; None: nobody
    task_class: str | None = None
    input_summary: str | None = None
    source: str | None = None
    event_kind: str | None = None


class LogRow(OpRow):
    """A ``POST /log`` record (``event_kind`` ``log``) as the consolidator's evidence query selects it,
    each part of the report read from its own column (see functions/gateway/log.py): ``operation``
    and ``result`` are the record's attributes of those names, ``input_summary`` is the approach
    verbatim and ``output_summary`` the context (None without one)."""

    success: bool
    reporter_id: str | None = None  # the API key (server-set): who vouches for it; None: nobody
    task_class: str | None = None
    operation: str = ""  # attributes['operation']
    result: str | None = None  # attributes['result']: success, failure or lesson
    input_summary: str | None = None  # the approach
    output_summary: str | None = None  # the context

    #: The record's ``attributes.log_format``: ``None`` (as the evidence query returns it for a
    #: record without one) means packed the old way; rows built in code are the current format.
    log_format: str | None = LOG_FORMAT

    @model_validator(mode="before")
    @classmethod
    def _packed_record(cls, data: Any) -> Any:
        """The one place that parses: records logged before the parts had their own places (still
        in the lake; ``log_format`` NULL) packed "operation: approach" into ``input_summary`` and
        "result" or "result: context" into ``output_summary``. They already carried the operation
        and result as attributes; the approach and context are cut out of the summaries here."""
        if not isinstance(data, Mapping) or data.get("log_format", LOG_FORMAT) is not None:
            return data
        packed_operation, sep, approach = (data.get("input_summary") or "").partition(": ")
        operation = data.get("operation") or packed_operation
        packed = data.get("input_summary") or ""
        if packed.startswith(f"{operation}: "):  # an operation that itself holds ": " stays whole
            approach, sep = packed[len(operation) + 2 :], ": "
        packed_result, _, context = (data.get("output_summary") or "").partition(":")
        return {
            **data,
            "operation": operation,
            "input_summary": approach if sep else operation,
            "result": data.get("result") or packed_result,
            "output_summary": context.strip() or None,
            "log_format": LOG_FORMAT,  # unpacked: read like a current record from here on
        }

    @property
    def approach(self) -> str:
        return (self.input_summary or "").strip()

    @property
    def outcome(self) -> str:
        """success, failure or lesson (a record without a result: from ``success``)."""
        return (self.result or "").strip().lower() or ("success" if self.success else "failure")

    @property
    def evidence(self) -> str:
        """The report as one line of evidence: "operation: approach → result[: context]"."""
        context = f": {self.output_summary}" if self.output_summary else ""
        return f"{self.operation}: {self.input_summary or ''} → {self.outcome}{context}"


@dataclass(frozen=True)
class CandidateGroup:
    """Evidence that may become one entry, with a stable ``group_key`` (its entry id derives from it).

    ``agents`` are claimed agent_ids; ``reporters`` the independent witnesses (capped, sorted) and
    ``reporter_count`` how many independent reporters they make under the trust levels."""

    group_key: str
    source: EntrySource
    kind: EntryKind
    endpoint: str
    task_class: str | None
    template: str
    op_ids: tuple[str, ...]
    agents: tuple[str, ...]
    agent_count: int
    count: int
    excerpts: tuple[str, ...] = ()  # raw agent text (never served)
    operation: str | None = None  # /log groups
    approaches: tuple[str, ...] = ()  # /log groups, most reported first
    signature_id: str | None = None
    diagnosis: Diagnosis | None = None
    reporters: tuple[str, ...] = ()
    reporter_count: int = 0
    #: /log groups: the witnesses of each of ``approaches`` (same order). An entry whose text is one
    #: approach counts only that approach's reporters (:func:`~.merging.supporting_reporters`).
    approach_reporters: tuple[tuple[str, ...], ...] = ()


# ---- grouping -----------------------------------------------------------------------------------
_REQUEST = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) (\S+?)(?:\?(\S*))?(?: (.*))?$", re.S)


def success_template(input_summary: str | None) -> str:
    """The shape of a call: for a gateway call ("METHOD /path?query body", see
    :func:`opslake.ingest.observe.describe_request`) the method, the query's keys and the body's template
    (JSON keys kept, values normalized); any other text is normalized."""
    text = (input_summary or "").strip()
    match = _REQUEST.match(text)
    if not match:
        return input_template(text)
    method, _path, query, body = match.groups()
    keys = sorted({part.partition("=")[0] for part in (query or "").split("&") if part})
    head = method + (f" ?{'&'.join(keys)}" if keys else "")
    return f"{head} {input_template(body)}".strip() if body else head


#: Stripped from the end of a lesson before texts are compared: "set", "set." and "set!" say the same.
_TRAILING_PUNCTUATION = " .,;:!?…"


def lesson_key(text: str) -> str:
    """The one normal form under which two texts are the same lesson: NFKC (and typographic quotes
    and dashes as ASCII, :func:`~opslake.analysis.fence.compatible`), casefolded, whitespace
    collapsed, trailing punctuation stripped. Reporters are counted per lesson by this key (here
    and when a later window gives the same text, :mod:`.merging`), never per spelling: one honest
    lesson written with and without a final period is one lesson with all its reporters."""
    return " ".join(compatible(text).casefold().split()).rstrip(_TRAILING_PUNCTUATION)


def _key(*parts: str | None) -> str:
    return "|".join(part or "-" for part in parts)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _rank_agents(rows: Sequence[SuccessRow | LogRow]) -> tuple[str, ...]:
    return tuple(sorted({r.agent_id for r in rows}))[:MAX_TRACKED_AGENTS]


def _witnesses(rows: Iterable[SuccessRow | LogRow], trust: ReporterTrust) -> set[str]:
    return set(cap_witnesses(w for r in rows if (w := trust.witness(r.reporter_id, r.agent_id)) is not None))


def _excerpts(texts: Iterable[str | None]) -> tuple[str, ...]:
    seen: list[str] = []
    for text in texts:
        if text and text not in seen:
            seen.append(text)
        if len(seen) == MAX_DRAFT_EXCERPTS:
            break
    return tuple(seen)


def _log_kind(log: LogRow) -> EntryKind:
    """A logged success or lesson teaches what to do; a logged failure what to avoid."""
    return "do" if log.success and log.outcome != "failure" else "avoid"


def candidate_groups(
    successes: Iterable[SuccessRow],
    logs: Iterable[LogRow],
    diagnoses: Iterable[Diagnosis] = (),
    *,
    min_successes: int = 3,
    min_agents: int = 2,
    trust: ReporterTrust | None = None,
) -> list[CandidateGroup]:
    """Groups with enough evidence, sorted by ``group_key``.

    * ops from keys ``trust`` does not count (untrusted ones, opslake's own, none) are left out;
    * successes: by (endpoint, task class, normalized input) — ``/log`` records and opslake's own
      routes are left out;
    * ``/log`` records: by (endpoint, task class, normalized operation, do/avoid) — a "success" or
      "lesson" is a *do*, a "failure" an *avoid*; approaches ranked by independent reporters;
    * both need ``min_successes`` ops from ``min_agents`` distinct claimed agents;
    * "avoid" diagnoses (newest per signature) need ``agent_count >= min_agents`` and at least one
      independent reporter (a diagnosis made before reporters were counted has an unknown count:
      it becomes a candidate that waits for approval).

    Each group carries its independent reporters; :func:`~.merging.merge_candidates` publishes an
    entry only when they are enough.
    """
    trust = trust or ReporterTrust()
    by_success: dict[str, list[SuccessRow]] = defaultdict(list)
    for row in successes:
        if row.event_kind == "log" or row.endpoint in IGNORED_ENDPOINTS or not trust.counts(row.reporter_id):
            continue
        template = success_template(row.input_summary)
        by_success[_key("successes", row.endpoint, row.task_class, _short_hash(template))].append(row)
    by_log: dict[str, list[LogRow]] = defaultdict(list)
    for log in logs:
        operation = log.operation.strip()
        if not operation or not trust.counts(log.reporter_id):
            continue
        digest = _short_hash(normalize(operation).lower())
        by_log[_key("log", log.endpoint, log.task_class, _log_kind(log), digest)].append(log)

    groups: list[CandidateGroup] = []
    for key, rows in by_success.items():
        agents = {r.agent_id for r in rows}
        if len(rows) < min_successes or len(agents) < min_agents:
            continue
        rows.sort(key=lambda r: (r.ts, r.op_id))
        first = rows[0]
        witnesses = _witnesses(rows, trust)
        groups.append(
            CandidateGroup(
                group_key=key, source="successes", kind="do", endpoint=first.endpoint,
                task_class=first.task_class, template=success_template(first.input_summary),
                op_ids=tuple(r.op_id for r in rows[-MAX_EVIDENCE:]), agents=_rank_agents(rows),
                agent_count=len(agents), count=len(rows), excerpts=_excerpts(r.input_summary for r in rows),
                reporters=tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], reporter_count=trust.count(witnesses),
            )
        )  # fmt: skip
    for key, logs_ in by_log.items():
        agents = {r.agent_id for r in logs_}
        if len(logs_) < min_successes or len(agents) < min_agents:
            continue
        logs_.sort(key=lambda r: (r.ts, r.op_id))
        head = logs_[0]
        operation = head.operation.strip()
        # one lesson in several spellings is one approach (:func:`lesson_key`), shown in the spelling
        # most reporters used; the approach vouched for by most independent reporters first (a key
        # claiming many agents is one reporter); ties: the shorter, then alphabetical
        support: dict[str, set[str]] = defaultdict(set)
        spellings: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for log in logs_:
            witnessed = _witnesses([log], trust)
            support[lesson_key(log.approach)] |= witnessed
            spellings[lesson_key(log.approach)][log.approach] |= witnessed
        spelled = {
            key: min(by, key=lambda a: (-trust.count(by[a]), len(a), a)) for key, by in spellings.items()
        }
        weight = {key: trust.count(witnesses) for key, witnesses in support.items()}
        keys = sorted(support, key=lambda k: (-weight[k], len(spelled[k]), spelled[k]))
        approaches = [spelled[k] for k in keys]
        witnesses = _witnesses(logs_, trust)
        groups.append(
            CandidateGroup(
                group_key=key, source="log", kind=_log_kind(head),
                endpoint=head.endpoint, task_class=head.task_class, template=normalize(operation),
                op_ids=tuple(r.op_id for r in logs_[-MAX_EVIDENCE:]), agents=_rank_agents(logs_),
                agent_count=len(agents), count=len(logs_), operation=operation,
                approaches=tuple(approaches),
                approach_reporters=tuple(tuple(cap_witnesses(support[k]))[:MAX_TRACKED_AGENTS] for k in keys),
                excerpts=_excerpts(r.evidence for r in logs_),
                reporters=tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], reporter_count=trust.count(witnesses),
            )
        )  # fmt: skip
    newest: dict[str, Diagnosis] = {}
    for diagnosis in diagnoses:
        current = newest.get(diagnosis.signature_id)
        if current is None or (diagnosis.created_at, diagnosis.diagnosis_id) > (
            current.created_at,
            current.diagnosis_id,
        ):
            newest[diagnosis.signature_id] = diagnosis
    for diagnosis in newest.values():
        if not diagnosis.avoid or diagnosis.agent_count < min_agents or diagnosis.reporter_count == 0:
            continue
        witnesses = set(cap_witnesses(diagnosis.reporters or ()))
        groups.append(
            CandidateGroup(
                group_key=_key("diagnosis", diagnosis.signature_id), source="diagnosis", kind="avoid",
                endpoint=diagnosis.endpoint, task_class=None, template=diagnosis.template,
                op_ids=tuple(diagnosis.evidence_op_ids[-MAX_EVIDENCE:]), agents=(),
                agent_count=diagnosis.agent_count, count=diagnosis.failure_count,
                excerpts=_excerpts([diagnosis.template, diagnosis.cause]),
                signature_id=diagnosis.signature_id, diagnosis=diagnosis,
                reporters=tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], reporter_count=trust.count(witnesses),
            )
        )  # fmt: skip
    groups.sort(key=lambda g: g.group_key)
    return groups
