"""Grouping: the consolidator's evidence rows → candidate groups, each of which may become one entry.

Successes group by call shape (:func:`success_template`), ``/log`` records by operation and
do/avoid, "avoid" diagnoses by signature; a group needs enough ops from enough distinct claimed
agents. Each group also counts its *independent reporters* (:mod:`opslake.analysis.reporters`: API
keys by trust level, never claimed agents): that count, not the agents, decides whether its entry
is published or waits for approval. Ops from untrusted keys (and opslake's own) are no evidence.

Grouping happens in two steps so that the engine can do the first: each group's evidence is
*tallied* (:class:`GroupTally`: counts, bounded lists of agents, witnesses, op ids and excerpts),
then :func:`groups_from_tallies` turns tallies into candidate groups. The consolidator has the
engine tally the window (:mod:`.evidence_sql`: rows bounded by groups, not by ops);
:func:`tally_successes` and :func:`tally_logs` are the same tally over rows in memory (the reference
the engine's SQL is tested against, and what :func:`candidate_groups` uses).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import model_validator

from opslake.analysis.fence import compatible
from opslake.analysis.masking import input_template, normalize
from opslake.analysis.playbooks.generalize import generalize
from opslake.analysis.reporters import RUNTIME_MAX_REPORTERS, ReporterTrust, cap_witnesses
from opslake.models.analysis import Diagnosis
from opslake.models.ops import OpRow
from opslake.models.playbooks import (
    LOG_FORMAT,
    MAX_DRAFT_EXCERPTS,
    MAX_EVIDENCE,
    MAX_TRACKED_AGENTS,
    EntryKind,
    EntrySource,
    FixKind,
)

# Routes about opslake itself: calling them successfully teaches nothing about the task.
IGNORED_ENDPOINTS = frozenset(
    {"/log", "/playbooks", "/health", "/stats", "/events", "/model", "playbook:followed"}
)  # playbook:followed: an agent's report of the entries it followed (opslake_sdk report_followed)


# ---- inputs -------------------------------------------------------------------------------------
class SuccessRow(OpRow):
    """A successful op as the consolidator reads it from ``ops``."""

    reporter_id: str | None = None  # the API key (server-set): who vouches for it; None: nobody
    task_class: str | None = None
    input_summary: str | None = None
    source: str | None = None
    event_kind: str | None = None


#: What a ``/log`` record's parts (approach, result, context) lose at both ends, here and in the
#: engine (:mod:`.evidence_sql`): ASCII whitespace only. ``str.strip()`` and Trino's ``trim`` strip
#: all Unicode whitespace, DuckDB's one-argument ``trim`` only " "; all three strip these alike.
LOG_SPACE = "\t\n\x0b\x0c\r "
ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = str.maketrans(ASCII_UPPER, ASCII_UPPER.lower())


def ascii_lower(text: str) -> str:
    """``text`` with A-Z lowered and every other character kept (the engine: ``translate``). Full
    lowering differs between engines and Unicode versions (Python lowers 'İ' to two code points,
    DuckDB and Java to 'i'; Python lowers a final 'Σ' to 'ς'); the log keys must not."""
    return text.translate(_ASCII_LOWER)


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
            "output_summary": context.strip(LOG_SPACE) or None,
            "log_format": LOG_FORMAT,  # unpacked: read like a current record from here on
        }

    @property
    def approach(self) -> str:
        return (self.input_summary or "").strip(LOG_SPACE)

    @property
    def outcome(self) -> str:
        """success, failure or lesson (a record without a result: from ``success``)."""
        return ascii_lower((self.result or "").strip(LOG_SPACE)) or ("success" if self.success else "failure")

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
    #: contrast groups (:mod:`.contrast`): what differs between failures and successes
    fix_kind: FixKind | None = None
    fix_names: tuple[str, ...] = ()
    instead_of: str | None = None
    fix_action: str | None = None  # the canonical "do" text of the fix
    fix_when: str | None = None  # when the fix applies (the entry's trigger)
    fix_failures: int | None = None  # the failing calls behind a contrast's fix
    fix_successes: int | None = None  # the successful calls (or recovered sessions) that back it


# ---- call shapes --------------------------------------------------------------------------------
#: The methods of a gateway request as :func:`opslake.ingest.observe.describe_request` writes it.
REQUEST_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: Whitespace that ends a request's path (ASCII, as the engines' regular expressions agree on).
_BREAKS = re.compile("[\t\n\r\x0b\x0c]")
_QUERY_VALUES = re.compile("=[^&]*")
#: A JSON body's strings (keys and values) are marked with :data:`QUOTE_MARK` instead of quotes before
#: masking, so that a key stays a key and a value is masked by its contents (the SQL of
#: ``{"sql": "SELECT …"}`` keeps its shape) rather than as one quoted string; the marks become
#: quotes again after masking (``{"role":"nurse","count":<num>}``).
JSON_STRING_PATTERN = '"((?:[^"\\\\]|\\\\.){0,1000})"'
QUOTE_MARK = "\u2057"  # ⁗: a non-word character the masking rules leave alone
_JSON_STRING = re.compile(JSON_STRING_PATTERN, re.ASCII)


def input_shape(text: str) -> str:
    """The template of an input (or a request's body): a JSON document (``{`` or ``[`` first) keeps
    its keys and has its string values masked by their contents; any other text is masked as it is
    (:func:`~opslake.analysis.masking.input_template`)."""
    if text[:1] in ("{", "["):
        text = _JSON_STRING.sub(QUOTE_MARK + r"\1" + QUOTE_MARK, text)
    return input_template(text).replace(QUOTE_MARK, '"')


def success_template(input_summary: str | None) -> str:
    """The shape of a call: for a gateway call ("METHOD /path?query body", see
    :func:`opslake.ingest.observe.describe_request`) the method, the query's keys (sorted, once
    each) and the body's shape (:func:`input_shape`); any other text is masked whole.

    The engine computes the same text (:func:`.evidence_sql.success_template_sql`): a request is
    text that starts with a method, one space and a path without whitespace (up to the next space)."""
    text = input_summary or ""
    method, sep, rest = text.partition(" ")
    token, _, body = rest.partition(" ")
    if not sep or method not in REQUEST_METHODS or not token or _BREAKS.search(token):
        return input_shape(text)
    query = token.partition("?")[2]
    keys = sorted({key for key in _QUERY_VALUES.sub("", query).split("&") if key})
    head = method + (f" ?{'&'.join(keys)}" if keys else "")
    shape = input_shape(body)
    return f"{head} {shape}" if shape else head


#: Stripped from the end of a lesson before texts are compared: "set", "set." and "set!" say the same.
_TRAILING_PUNCTUATION = " .,;:!?…"


def lesson_key(text: str) -> str:
    """The one normal form under which two texts are the same lesson: NFKC (and typographic quotes
    and dashes as ASCII, :func:`~opslake.analysis.fence.compatible`), casefolded, whitespace
    collapsed, trailing punctuation stripped. Reporters are counted per lesson by this key (here
    and when a later window gives the same text, :mod:`.merging`), never per spelling: one honest
    lesson written with and without a final period is one lesson with all its reporters."""
    return " ".join(compatible(text).casefold().split()).rstrip(_TRAILING_PUNCTUATION)


def group_key(*parts: str | None) -> str:
    """``successes|/sql|task|<hash>``: a group's key from its parts (a missing part is ``-``)."""
    return "|".join(part or "-" for part in parts)


def short_hash(text: str) -> str:
    """16 hex characters of the SHA-256 of ``text`` (the engine: ``substr(lower(to_hex(sha256(…))), 1, 16)``)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def log_kind(success: bool, outcome: str) -> EntryKind:
    """A logged success or lesson teaches what to do; a logged failure what to avoid."""
    return "do" if success and outcome != "failure" else "avoid"


def _log_kind(log: LogRow) -> EntryKind:
    return log_kind(log.success, log.outcome)


# ---- tallies: what the engine counts per group ----------------------------------------------------
#: Excerpts are the first distinct texts among a group's first this many (non-empty) texts.
EXCERPT_SCAN = MAX_EVIDENCE
#: Witnesses kept per API key before the total cap (:func:`cap_witnesses`); a runtime key never
#: counts more reporters than this.
WITNESSES_PER_KEY = RUNTIME_MAX_REPORTERS


@dataclass(frozen=True)
class GroupTally:
    """One group's evidence, counted: everything :func:`groups_from_tallies` needs, bounded by
    :data:`MAX_TRACKED_AGENTS` agents and witnesses and :data:`MAX_EVIDENCE` op ids and texts
    whatever the group's size, so that the engine can hand a day's groups to a Lambda.

    ``op_ids`` are the group's last ops by (ts, op_id), oldest first; ``texts`` the first texts
    (excerpts), in that order; ``head`` the first op's text (successes: the call shape; ``/log``:
    the operation). ``approach_witnesses`` (``/log`` groups): each approach as given (stripped)
    with its witnesses, at most :data:`WITNESSES_PER_KEY` per key."""

    group_key: str
    source: Literal["successes", "log"]
    kind: EntryKind
    endpoint: str
    task_class: str | None
    head: str
    count: int
    agent_count: int
    agents: tuple[str, ...]
    witnesses: tuple[str, ...]
    op_ids: tuple[str, ...]
    texts: tuple[str, ...]
    approach_witnesses: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _tally(
    key: str,
    source: Literal["successes", "log"],
    kind: EntryKind,
    rows: list[Any],
    head: str,
    texts: Iterable[str | None],
    witnesses: Iterable[str],
    approach_witnesses: tuple[tuple[str, tuple[str, ...]], ...] = (),
) -> GroupTally:
    """A tally of rows sorted by (ts, op_id), whose ops count as ``witnesses``."""
    agents = sorted({r.agent_id for r in rows})
    first = rows[0]
    return GroupTally(
        group_key=key, source=source, kind=kind, endpoint=first.endpoint, task_class=first.task_class,
        head=head, count=len(rows), agent_count=len(agents), agents=tuple(agents[:MAX_TRACKED_AGENTS]),
        witnesses=tuple(cap_witnesses(witnesses)), op_ids=tuple(r.op_id for r in rows[-MAX_EVIDENCE:]),
        texts=tuple(t for t in texts if t)[:EXCERPT_SCAN], approach_witnesses=approach_witnesses,
    )  # fmt: skip


def _per_key(witnesses: Iterable[str]) -> tuple[str, ...]:
    """At most :data:`WITNESSES_PER_KEY` witnesses per key (the alphabetically first), sorted."""
    return tuple(cap_witnesses(witnesses, total=10**9))


def tally_successes(successes: Iterable[SuccessRow], trust: ReporterTrust | None = None) -> list[GroupTally]:
    """The success groups' tallies, in memory: by (endpoint, task class, call shape); ``/log``
    records, opslake's own routes and keys ``trust`` does not count are left out."""
    trust = trust or ReporterTrust()
    by_key: dict[str, list[SuccessRow]] = defaultdict(list)
    for row in successes:
        if row.event_kind == "log" or row.endpoint in IGNORED_ENDPOINTS or not trust.counts(row.reporter_id):
            continue
        template = success_template(row.input_summary)
        key = group_key("successes", row.endpoint, row.task_class, short_hash(template))
        by_key[key].append(row)
    tallies = []
    for key, rows in by_key.items():
        rows.sort(key=lambda r: (r.ts, r.op_id))
        witnesses = [w for r in rows if (w := trust.witness(r.reporter_id, r.agent_id)) is not None]
        tallies.append(
            _tally(key, "successes", "do", rows, success_template(rows[0].input_summary),
                   (r.input_summary for r in rows), witnesses)
        )  # fmt: skip
    return tallies


def log_operation(operation: str) -> str:
    """A ``/log`` operation as it is grouped and shown: generalized (:func:`~.generalize.generalize`:
    "staff job: assembler in Tucson, AZ" → "staff job: {role} in {city}, {state}"), so one lesson
    about many cities is one group; an operation naming no instance is kept as written."""
    general, replaced = generalize(operation)
    return general if replaced else operation


def log_group_key(log: LogRow) -> str | None:
    """A ``/log`` record's group: (endpoint, task class, do/avoid, normalized generalized
    operation); None for a record without an operation. (The engine's tally,
    :func:`~.evidence_sql.log_tallies_sql`, still groups by the literal operation: its groups of
    one lesson in several cities are drafted alike and merged as near-duplicates.)"""
    operation = normalize(log_operation(log.operation))
    if not operation:
        return None
    return group_key("log", log.endpoint, log.task_class, _log_kind(log), short_hash(ascii_lower(operation)))


def tally_logs(logs: Iterable[LogRow], trust: ReporterTrust | None = None) -> list[GroupTally]:
    """The ``/log`` groups' tallies, in memory: by (endpoint, task class, do/avoid, normalized
    operation); records from keys ``trust`` does not count are left out."""
    trust = trust or ReporterTrust()
    by_key: dict[str, list[LogRow]] = defaultdict(list)
    for log in logs:
        key = log_group_key(log)
        if key is not None and trust.counts(log.reporter_id):
            by_key[key].append(log)
    tallies = []
    for key, rows in by_key.items():
        rows.sort(key=lambda r: (r.ts, r.op_id))
        witnesses: list[str] = []
        per_approach: dict[str, set[str]] = defaultdict(set)
        for r in rows:
            witness = trust.witness(r.reporter_id, r.agent_id)
            if witness is not None:
                witnesses.append(witness)
                per_approach[r.approach].add(witness)
        approaches = tuple((a, _per_key(ws)) for a, ws in sorted(per_approach.items()))
        head = rows[0]
        tallies.append(
            _tally(key, "log", _log_kind(head), rows, head.operation, (r.evidence for r in rows), witnesses,
                   approaches)
        )  # fmt: skip
    return tallies


# ---- tallies → groups -----------------------------------------------------------------------------
def _excerpts(texts: Iterable[str]) -> tuple[str, ...]:
    seen: list[str] = []
    for text in texts:
        if text and text not in seen:
            seen.append(text)
        if len(seen) == MAX_DRAFT_EXCERPTS:
            break
    return tuple(seen)


def _ranked_approaches(
    tally: GroupTally, trust: ReporterTrust
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """(approaches, their witnesses): one lesson in several spellings is one approach
    (:func:`lesson_key`), shown in the spelling most reporters used; the approach vouched for by
    most independent reporters first (a key claiming many agents is one reporter); ties: the
    shorter, then alphabetical."""
    support: dict[str, set[str]] = defaultdict(set)
    spellings: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for approach, witnesses in tally.approach_witnesses:
        support[lesson_key(approach)] |= set(witnesses)
        spellings[lesson_key(approach)][approach] |= set(witnesses)
    spelled = {key: min(by, key=lambda a: (-trust.count(by[a]), len(a), a)) for key, by in spellings.items()}
    weight = {key: trust.count(witnesses) for key, witnesses in support.items()}
    keys = sorted(support, key=lambda k: (-weight[k], len(spelled[k]), spelled[k]))
    return (
        tuple(spelled[k] for k in keys),
        tuple(tuple(cap_witnesses(support[k]))[:MAX_TRACKED_AGENTS] for k in keys),
    )


def group_of(tally: GroupTally, trust: ReporterTrust) -> CandidateGroup:
    """The candidate group a tally makes."""
    witnesses = set(cap_witnesses(tally.witnesses))
    common: dict[str, Any] = {
        "group_key": tally.group_key, "kind": tally.kind, "endpoint": tally.endpoint,
        "task_class": tally.task_class, "op_ids": tally.op_ids[-MAX_EVIDENCE:],
        "agents": tuple(sorted(tally.agents))[:MAX_TRACKED_AGENTS], "agent_count": tally.agent_count,
        "count": tally.count, "excerpts": _excerpts(tally.texts[:EXCERPT_SCAN]),
        "reporters": tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], "reporter_count": trust.count(witnesses),
    }  # fmt: skip
    if tally.source == "successes":
        return CandidateGroup(source="successes", template=tally.head, **common)
    operation = tally.head.strip()
    approaches, approach_reporters = _ranked_approaches(tally, trust)
    return CandidateGroup(
        source="log", template=normalize(operation), operation=operation, approaches=approaches,
        approach_reporters=approach_reporters, **common,
    )  # fmt: skip


def diagnosis_groups(
    diagnoses: Iterable[Diagnosis], *, min_agents: int = 2, trust: ReporterTrust | None = None
) -> list[CandidateGroup]:
    """ "Avoid" diagnoses (newest per signature) with ``agent_count >= min_agents`` and at least one
    independent reporter (a diagnosis made before reporters were counted has an unknown count: it
    becomes a candidate that waits for approval)."""
    trust = trust or ReporterTrust()
    newest: dict[str, Diagnosis] = {}
    for diagnosis in diagnoses:
        current = newest.get(diagnosis.signature_id)
        if current is None or (diagnosis.created_at, diagnosis.diagnosis_id) > (
            current.created_at,
            current.diagnosis_id,
        ):
            newest[diagnosis.signature_id] = diagnosis
    groups = []
    for diagnosis in newest.values():
        if not diagnosis.avoid or diagnosis.agent_count < min_agents or diagnosis.reporter_count == 0:
            continue
        witnesses = set(cap_witnesses(diagnosis.reporters or ()))
        groups.append(
            CandidateGroup(
                group_key=group_key("diagnosis", diagnosis.signature_id), source="diagnosis", kind="avoid",
                endpoint=diagnosis.endpoint, task_class=None, template=diagnosis.template,
                op_ids=tuple(diagnosis.evidence_op_ids[-MAX_EVIDENCE:]), agents=(),
                agent_count=diagnosis.agent_count, count=diagnosis.failure_count,
                excerpts=_excerpts(t for t in (diagnosis.template, diagnosis.cause) if t),
                signature_id=diagnosis.signature_id, diagnosis=diagnosis,
                reporters=tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], reporter_count=trust.count(witnesses),
            )
        )  # fmt: skip
    return groups


def groups_from_tallies(
    tallies: Iterable[GroupTally],
    diagnoses: Iterable[Diagnosis] = (),
    *,
    min_successes: int = 3,
    min_agents: int = 2,
    trust: ReporterTrust | None = None,
) -> list[CandidateGroup]:
    """Groups with enough evidence, sorted by ``group_key``: a tally needs ``min_successes`` ops
    from ``min_agents`` distinct claimed agents; diagnoses as :func:`diagnosis_groups` says.

    Each group carries its independent reporters; :func:`~.merging.merge_candidates` publishes an
    entry only when they are enough."""
    trust = trust or ReporterTrust()
    groups = [group_of(t, trust) for t in tallies if t.count >= min_successes and t.agent_count >= min_agents]
    groups += diagnosis_groups(diagnoses, min_agents=min_agents, trust=trust)
    groups.sort(key=lambda g: g.group_key)
    return groups


def candidate_groups(
    successes: Iterable[SuccessRow],
    logs: Iterable[LogRow],
    diagnoses: Iterable[Diagnosis] = (),
    *,
    min_successes: int = 3,
    min_agents: int = 2,
    trust: ReporterTrust | None = None,
) -> list[CandidateGroup]:
    """Groups with enough evidence from rows in memory, sorted by ``group_key`` (the consolidator
    has the engine tally instead: the same groups, :mod:`.evidence_sql`).

    * ops from keys ``trust`` does not count (untrusted ones, opslake's own, none) are left out;
    * successes: by (endpoint, task class, call shape :func:`success_template`) — ``/log`` records
      and opslake's own routes are left out;
    * ``/log`` records: by (endpoint, task class, normalized operation, do/avoid) — a "success" or
      "lesson" is a *do*, a "failure" an *avoid*; approaches ranked by independent reporters;
    * both need ``min_successes`` ops from ``min_agents`` distinct claimed agents;
    * "avoid" diagnoses: :func:`diagnosis_groups`.
    """
    trust = trust or ReporterTrust()
    return groups_from_tallies(
        [*tally_successes(successes, trust), *tally_logs(logs, trust)],
        diagnoses,
        min_successes=min_successes,
        min_agents=min_agents,
        trust=trust,
    )
