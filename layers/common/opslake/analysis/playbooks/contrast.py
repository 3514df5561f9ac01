"""Contrasts: what the failing calls of a signature do differently from the successful calls of the
same endpoint and task class, stated as a conditional entry (when, do, instead of) with concrete
names taken from the tool catalog, and its counts (failures, successes, reporters).

:func:`contrast_groups` reads the rows of :func:`~.contrast_sql.contrast_samples_sql` and applies
the rules to each failure group; each finding is a :class:`Fix` and becomes one candidate group
(``source="contrast"``) whose key names the fix, so its entry id is stable across runs.

The rules are generic: they hold for any tool the traffic shows, with the vocabulary the catalog
learned from it (:class:`~opslake.analysis.catalog.known.Vocabulary`), never a list in code.

Over a call's **arguments** (:mod:`.contrast_args`; arguments are a tool call's JSON keys, a
request's body fields, query keys and path parameters):

==================  ===================================================================================
``value_shape``     an argument's shape in the failures that no success of the tool has, where the
                    successes' shapes are few (a form: ``W + 5 digits``; an enum: ``high``, ``low``)
``missing_argument`` arguments the error says are missing, or that >= 80 % of successes send and
                    <= 20 % of the failures do
``extra_argument``  an argument >= 80 % of the failures send and <= 20 % of the successes do
``preceding_call``  another call answered earlier in >= 80 % of the successful sessions (and, unless
                    the ids were not found, in <= 20 % of the failing ones): where values come from
``recovery``        within one session, what changed in the arguments between a failure and the next
                    successful call of the same tool (an argument added or left out, a value's form)
``error_rule``      (``avoid``) the error's template states a rule in words and no other rule found a
                    fix: the entry quotes it, masked
==================  ===================================================================================

Over **SQL, bodies and prompts** (:mod:`.contrast_rules`): the real ``column`` of a table (the Glue
catalog's), ``aggregate`` in SQL instead of listing rows past a row limit, a ``json_body`` built
with an encoder, a ``prompt_bound`` in tokens.

Only validated names reach the text: the catalog's tools, arguments, forms and templates, the
tables and columns of the Glue catalog, numbers. A fix must be backed by successes of two keys at
least (one key's successes are that key's word), and its reporters are the failing ops' witnesses.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opslake.analysis.catalog.known import Vocabulary
from opslake.analysis.fence import HTTP_METHODS
from opslake.analysis.playbooks.grouping import CandidateGroup, group_key, input_shape
from opslake.analysis.reporters import ReporterTrust, cap_witnesses
from opslake.models.ops import MAX_ID_CHARS
from opslake.models.playbooks import (
    MAX_DRAFT_EXCERPTS,
    MAX_EVIDENCE,
    MAX_FIX_NAMES,
    MAX_TRACKED_AGENTS,
    EntryKind,
    FixKind,
)

SUCCESS_SHARE = 0.8  # a trait of the successes: in at least this share of them
FAILURE_SHARE = 0.2  # and in at most this share of the failures
MIN_SUCCESSES = 2  # successes a fix needs behind it
MIN_SUCCESS_REPORTERS = 2  # keys whose successes must back a fix (one key's successes prove nothing)
#: Failure categories no call shape avoids (the tool or its backend was slow or throttled): no
#: argument contrast, and no success shape drafted, for them.
TRANSIENT_CATEGORIES = frozenset({"timeout", "rate_limit"})


# ---- samples and calls ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    """One row of :func:`~.contrast_sql.contrast_samples_sql`."""

    side: str
    endpoint: str
    task_class: str | None
    signature_id: str | None
    op_id: str
    agent_id: str
    reporter_id: str | None
    session_id: str | None
    error_type: str | None
    error: str
    input_summary: str
    linked_input: str | None
    earlier_ok: tuple[str, ...]
    input_tokens: int | None
    next_ok_input: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Sample:
        tokens = str(row.get("input_tokens") or "")
        return cls(
            side=str(row.get("side") or ""), endpoint=str(row.get("endpoint") or ""),
            task_class=row.get("task_class") or None, signature_id=row.get("signature_id"),
            op_id=str(row.get("op_id") or ""), agent_id=str(row.get("agent_id") or ""),
            reporter_id=row.get("reporter_id"), session_id=row.get("session_id"),
            error_type=row.get("error_type"), error=str(row.get("error") or ""),
            input_summary=str(row.get("input_summary") or ""), linked_input=row.get("linked_input") or None,
            earlier_ok=tuple(c for c in str(row.get("earlier_ok") or "").split(",") if c),
            input_tokens=int(tokens) if tokens.isdigit() and len(tokens) < 10 else None,
            next_ok_input=row.get("next_ok_input") or None,
        )  # fmt: skip

    @property
    def session(self) -> tuple[str | None, str | None]:
        return (self.reporter_id, self.session_id or self.op_id)


@dataclass(frozen=True)
class CallShape:
    """A gateway request as :func:`opslake.ingest.observe.describe_request` records it: method, path
    segments, query keys, the body (parsed JSON, or None) and its SQL (the ``sql`` field)."""

    method: str | None
    segments: tuple[str, ...]
    query_keys: tuple[str, ...]
    body_text: str
    body: Any
    parsed: bool
    sql: str | None


def parse_call(text: str | None) -> CallShape:
    """The parts of a recorded request ("METHOD /path?query body"); any other text is a body."""
    text = text or ""
    method, sep, rest = text.partition(" ")
    if not sep or method not in HTTP_METHODS or not rest.startswith("/"):
        method, rest = "", text
        path, body_text = "", text
    else:
        path, _, body_text = rest.partition(" ")
    route, _, query = path.partition("?")
    segments = tuple(p for p in route.split("/") if p)
    keys = tuple(sorted({k.partition("=")[0] for k in query.split("&") if k.partition("=")[0]}))
    body: Any = None
    parsed = False
    if body_text.strip():
        try:
            body, parsed = json.loads(body_text), True
        except (ValueError, RecursionError):
            body = None
    sql = body.get("sql") if isinstance(body, dict) and isinstance(body.get("sql"), str) else None
    if sql is None and not method and re.match(r"(?is)\s*(select|with)\b", text):
        sql = text
    return CallShape(method or None, segments, keys, body_text, body, parsed, sql)


@dataclass(frozen=True)
class Fix:
    """What a rule found: the fix (kind, concrete names, when / do / instead of) and the failing
    and successful samples behind it. ``kind_of_entry`` is ``avoid`` for a rule quoted as it is."""

    kind: FixKind
    names: tuple[str, ...]
    when: str
    do: str
    instead_of: str | None
    failures: tuple[Sample, ...]
    successes: tuple[Sample, ...] = field(default=())
    kind_of_entry: EntryKind = "do"
    #: the keys whose successes back the fix, when they are not ``successes``' (a recovery's are
    #: the failing sessions' own next calls)
    success_keys: tuple[str | None, ...] | None = None
    #: a preceding call that says where ids come from (the failures' ids were not found): the kind
    #: the rules before the catalog called ``id_source``
    id_source: bool = False
    #: the arguments the fix says to leave out ("Leave x out of …")
    left_out: tuple[str, ...] = ()

    @property
    def backers(self) -> set[str | None]:
        return set(self.success_keys) if self.success_keys is not None else keys_of(self.successes)

    @property
    def success_count(self) -> int:
        return len(self.successes) if self.success_keys is None else len(self.failures)


# ---- helpers shared by the rules ---------------------------------------------------------------------
def share(items: Sequence[Any], test: Any) -> float:
    return sum(1 for i in items if test(i)) / len(items) if items else 0.0


def and_list(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def or_list(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def route_call(method: str | None, endpoint: str) -> str:
    return f"{method} {endpoint}" if method else endpoint


def method_of(samples: Iterable[Sample]) -> str | None:
    methods = Counter(m for s in samples if (m := parse_call(s.input_summary).method))
    return methods.most_common(1)[0][0] if methods else None


def keys_of(samples: Iterable[Sample]) -> set[str | None]:
    return {s.reporter_id for s in samples}


# ---- groups -------------------------------------------------------------------------------------
def contrast_key(fix: Fix, endpoint: str, task_class: str | None) -> str:
    """The group key of a fix (its entry id derives from it): ``contrast|<endpoint>|<task
    class>|<kind>|<names>``. A fix the rules before the catalog stated keeps the key they gave it
    (``fields``; ``id_format`` of a path parameter, named by its pattern alone; ``id_source``), so
    an upgrade goes on with its entry and experiment instead of starting a twin."""
    kind, names = fix.kind, fix.names
    parameters = {p[1:-1] for p in endpoint.split("/") if p.startswith("{") and p.endswith("}")}
    if kind == "missing_argument":
        kind = "fields"
    elif kind == "value_shape" and names[0] in parameters and len(names) == 2:
        kind, names = "id_format", names[1:]
    elif kind == "preceding_call" and fix.id_source:
        kind = "id_source"
    return group_key("contrast", endpoint, task_class, kind, ",".join(sorted(names)))


def _group(
    fix: Fix, endpoint: str, task_class: str | None, signature_id: str | None, trust: ReporterTrust
) -> CandidateGroup:
    ops = [*fix.failures, *fix.successes]
    # the reporters vouch that the mistake happens: the failing ops' witnesses only (the successes
    # are any keys' ordinary calls; counting them let one key's failures publish an entry alone)
    witnesses = cap_witnesses(
        w for s in fix.failures if (w := trust.witness(s.reporter_id, s.agent_id)) is not None
    )
    agents = sorted({s.agent_id for s in ops})
    # claimed agents counted per key, as the samples' query counts them (contrast_sql.AGENT_RUN)
    runs = len({(s.reporter_id or "", s.agent_id) for s in ops})
    failing_inputs = [f.linked_input or f.input_summary for f in fix.failures]
    excerpts = list(dict.fromkeys(t for t in (*failing_inputs, *(f.error for f in fix.failures)) if t))
    op_ids = [*(s.op_id for s in fix.failures), *(s.op_id for s in fix.successes)]
    kind = fix.kind_of_entry
    return CandidateGroup(
        group_key=contrast_key(fix, endpoint, task_class),
        source="contrast", kind=kind, endpoint=endpoint, task_class=task_class,
        template=input_shape(failing_inputs[0]) if failing_inputs and failing_inputs[0] else fix.kind,
        op_ids=tuple(op_ids[:MAX_EVIDENCE]), agents=tuple(agents[:MAX_TRACKED_AGENTS]), agent_count=runs,
        count=len(fix.failures), excerpts=tuple(excerpts[:MAX_DRAFT_EXCERPTS]), signature_id=signature_id,
        reporters=tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], reporter_count=trust.count(witnesses),
        fix_kind=fix.kind, fix_names=fix.names, instead_of=fix.instead_of, fix_action=fix.do, fix_when=fix.when,
        fix_failures=len(fix.failures), fix_successes=fix.success_count,
    )  # fmt: skip


def fixes_for(failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary) -> list[Fix]:
    """Every rule's fixes for one failure group (same endpoint, task class and signature); the rule
    quoted as an ``avoid`` entry when no other rule found a fix for it, or in place of a "leave x
    out" when the tool's stated rule is about x (it takes x, in another form)."""
    from opslake.analysis.playbooks.contrast_args import argument_fixes, error_rule_fixes
    from opslake.analysis.playbooks.contrast_rules import request_fixes

    if not failures:
        return []
    found = [
        *request_fixes(failures, successes, vocabulary),
        # a timeout or a throttle: a smaller request may avoid it (a prompt's bound), an argument's
        # shape or a call made first does not, whatever the successes did
        *(argument_fixes(failures, successes, vocabulary) if not _transient(failures) else []),
    ]
    # a fix is what other keys' successes do: backed by one key alone, it is that key's word; and
    # an entry holds at most MAX_FIX_NAMES names
    kept: list[Fix] = []
    for fix in found:
        if len(fix.backers) < MIN_SUCCESS_REPORTERS or len(fix.names) > MAX_FIX_NAMES:
            continue
        if any(len(name) > MAX_ID_CHARS for name in fix.names):
            continue  # a name an entry cannot carry (four long forms joined): a fix too long to state
        if fix.kind == "recovery" and any(
            set(fix.names[:1]) & set(" ".join(k.names).replace("|", " ").split()) for k in kept
        ):
            continue  # a recovery that a contrast across sessions already states (the same argument)
        if fix.kind == "missing_argument" and any(
            k.kind == "extra_argument" and set(fix.names) <= set(k.names) for k in kept
        ):
            continue  # "leave x out; send y instead" already says to send y
        kept.append(fix)
    rule = error_rule_fixes(failures, vocabulary)
    # "leave x out" where the tool's own stated rule is about x (body.icon should be an object): the
    # tool takes x, in another form; the successes leaving it out is no reason to. Its rule is quoted.
    quoted = rule[0].do.casefold() if rule else ""
    if any(_named_in(name, quoted) for k in kept for name in k.left_out):
        return [*(k for k in kept if not any(_named_in(n, quoted) for n in k.left_out)), *rule]
    return kept or rule


def _named_in(name: str, text: str) -> bool:
    """Whether ``text`` names the argument ``name`` (a whole word: ``body.icon``, ``icon``, not ``icons``)."""
    return bool(text) and re.search(rf"(?<![\w-]){re.escape(name.casefold())}(?![\w-])", text) is not None


def _transient(failures: Sequence[Sample]) -> bool:
    """Whether most of a group's failures are a timeout or a throttle (the tool or its backend was
    slow or busy), as the consolidator tells them apart for success shapes."""
    from opslake.analysis.heuristics import classify

    slow = sum(
        1
        for f in failures
        if classify(f.error_type, [f.error_type or "", f.error])[0] in TRANSIENT_CATEGORIES
    )
    return slow * 2 > len(failures)


def contrast_groups(
    rows: Sequence[Mapping[str, Any]], *, trust: ReporterTrust, vocabulary: Vocabulary | None = None
) -> list[CandidateGroup]:
    """The candidate groups the contrast rows make (sorted by ``group_key``): per failure group
    (endpoint, task class, signature) every rule's fixes, each one group; the same fix found for
    two signatures of one (endpoint, task class) is kept once (the first signature's)."""
    vocabulary = vocabulary or Vocabulary()
    samples = [Sample.of(r) for r in rows if trust.counts(r.get("reporter_id"))]
    failures: dict[tuple[str, str | None, str | None], list[Sample]] = {}
    successes: dict[tuple[str, str | None], list[Sample]] = {}
    for sample in samples:
        if sample.side == "failure":
            failures.setdefault((sample.endpoint, sample.task_class, sample.signature_id), []).append(sample)
        elif sample.side == "success":
            successes.setdefault((sample.endpoint, sample.task_class), []).append(sample)
    # one group per fix (kind and names) of an (endpoint, task class): the first signature's, except
    # that "take the ids from X's answer" (ids not found) says more than "call X first"
    groups: dict[tuple[str, str | None, str, tuple[str, ...]], CandidateGroup] = {}
    kept_id_source: dict[tuple[str, str | None, str, tuple[str, ...]], bool] = {}
    for (endpoint, task_class, signature_id), failing in sorted(failures.items(), key=lambda i: str(i[0])):
        for fix in fixes_for(failing, successes.get((endpoint, task_class), []), vocabulary):
            group = _group(fix, endpoint, task_class, signature_id, trust)
            identity = (endpoint, task_class, fix.kind, tuple(sorted(fix.names)))
            kept = groups.get(identity)
            if kept is None or (fix.id_source and not kept_id_source.get(identity, False)):
                groups[identity] = group
                kept_id_source[identity] = fix.id_source
    return sorted(groups.values(), key=lambda g: g.group_key)
