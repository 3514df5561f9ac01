"""Contrasts: what the failing ops of a signature do differently from the successful ops of the same
endpoint and task class, stated as a conditional entry (when, do, instead of) with concrete names.

:func:`contrast_groups` reads the rows of :func:`~.contrast_sql.contrast_samples_sql` and applies
the rules below to each failure group; each finding is a :class:`Fix` and becomes one candidate
group (``source="contrast"``) whose key names the fix, so its entry id is stable across runs.

==============  =========================================================================================
kind            found when
==============  =========================================================================================
``column``      the error names an unresolved column, and successes whose SQL is the failing SQL with
                one identifier in its place (literals aside) give the real column of the ``FROM`` table
``fields``      the error lists the missing fields, or JSON body keys in >= 80 % of successes and
                <= 20 % of failures (stated whole or not at all: at most ``MAX_FIX_NAMES`` of them)
``id_format``   the ids in the failing paths have shapes no success has (digits read as 9)
``id_source``   not-found ids of the right form: the calls that answered earlier in successful
                sessions (>= 80 %; and, when some do, in <= 20 % of failing ones)
``aggregate``   answers cut at the row limit after SQL without an aggregate, where successes on the
                same tables aggregate or limit
``json_body``   failing bodies are not JSON; >= 90 % of successes' are
``prompt_bound`` the largest successful prompt is smaller than the smallest failing one
==============  =========================================================================================

Only validated names reach the text: the catalog's tables and columns (:data:`~opslake.analysis.fence.CATALOG`),
the tools' request fields (``TOOL_FIELDS``), known routes, the tools' id patterns
(:data:`~opslake.models.tools.WORKER_ID_PATTERN`) and numbers. The wrong names an entry quotes as
"instead of" are plain identifiers seen from two reporters at least. The canonical phrasings are
the ones the simulator recognises (plan §7.3).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from opslake.analysis.fence import CATALOG, HTTP_METHODS, TOOL_FIELDS, KnownNames, default_known
from opslake.analysis.heuristics import _COLUMN_NAMES, _MISSING_FIELDS, _REQUIRED_FIELD, _clean
from opslake.analysis.playbooks.grouping import CandidateGroup, group_key, input_shape
from opslake.analysis.reporters import ReporterTrust, cap_witnesses
from opslake.models.playbooks import (
    MAX_ACTION_CHARS,
    MAX_DRAFT_EXCERPTS,
    MAX_EVIDENCE,
    MAX_FIX_NAMES,
    MAX_TRACKED_AGENTS,
    FixKind,
)
from opslake.models.tools import WORKER_ID_PATTERN

SUCCESS_SHARE = 0.8  # a trait of the successes: in at least this share of them
FAILURE_SHARE = 0.2  # and in at most this share of the failures
JSON_SUCCESS_SHARE = 0.9
MIN_SUCCESSES = 2  # successes a fix needs behind it
MIN_NAME_REPORTERS = 2  # reporters that must have written a wrong name before an entry quotes it
MIN_SUCCESS_REPORTERS = 2  # keys whose successes must back a fix (one key's successes prove nothing)
MAX_QUOTED = 3
WORKER_ROUTE = "/worker/{id}"
#: Forms of the tools' id patterns, as a reader says them.
ID_FORMS = {WORKER_ROUTE: ("W + 5 digits", WORKER_ID_PATTERN)}
AGGREGATE_NAMES = ("count(*)", "avg()")
JSON_ENCODER_NAME = "json.dumps"
_AGGREGATE = re.compile(r"\b(?:count|avg|sum|min|max|approx_distinct)\s*\(|\bgroup\s+by\b", re.I)
_SQL_LIMIT = re.compile(r"\blimit\s+\d+\s*$", re.I)
_SQL_TABLES = re.compile(r"(?i)\b(?:from|join)\s+[\"`]?([A-Za-z_]\w*)")
_SQL_TOKEN = re.compile(
    r"'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"|\d+(?:\.\d+)?|[A-Za-z_][A-Za-z0-9_]*|<>|!=|<=|>=|\|\||\S"
)
_NOT_FOUND = re.compile(r"not found|does not exist|\bno \w+ with (?:id|name)\b", re.I)
_TRUNCATED = re.compile(r"truncated|row limit|row cap", re.I)
_SHAPE = re.compile(r"^[A-Za-z]{0,4}[-_]?9{1,12}$")


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
    and successful samples behind it."""

    kind: FixKind
    names: tuple[str, ...]
    when: str
    do: str
    instead_of: str | None
    failures: tuple[Sample, ...]
    successes: tuple[Sample, ...] = field(default=())


# ---- helpers ------------------------------------------------------------------------------------
def _share(items: Sequence[Any], test: Any) -> float:
    return sum(1 for i in items if test(i)) / len(items) if items else 0.0


def _sql_tokens(sql: str) -> list[str]:
    """SQL as tokens, literals masked (strings ``'?'``, numbers ``0``), identifiers lower case."""
    out = []
    for token in _SQL_TOKEN.findall(sql):
        if token.startswith("'"):
            out.append("'?'")
        elif token[0].isdigit():
            out.append("0")
        elif token.startswith('"'):
            out.append(token.strip('"').lower())
        else:
            out.append(token.lower())
    return out


def _tables(sql: str) -> list[str]:
    found: list[str] = []
    for name in _SQL_TABLES.findall(sql):
        if name.lower() in CATALOG and name.lower() not in found:
            found.append(name.lower())
    return found


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _or(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _quoted_names(names_by_reporter: Mapping[str, set[str]]) -> list[str]:
    """The wrong names written by enough reporters (most reporters first), as plain identifiers."""
    kept = [
        (name, len(reporters))
        for name, reporters in names_by_reporter.items()
        if len(reporters) >= MIN_NAME_REPORTERS and _clean(name) == name
    ]
    kept.sort(key=lambda p: (-p[1], p[0]))
    return [name for name, _ in kept[:MAX_QUOTED]]


def _route_call(method: str | None, endpoint: str) -> str:
    return f"{method} {endpoint}" if method else endpoint


def _method(samples: Iterable[Sample]) -> str | None:
    methods = Counter(m for s in samples if (m := parse_call(s.input_summary).method))
    return methods.most_common(1)[0][0] if methods else None


# ---- rules --------------------------------------------------------------------------------------
def _unresolved_column(error: str) -> str | None:
    for pattern in _COLUMN_NAMES:
        match = pattern.search(error)
        if match:
            return match[1].rsplit(".", 1)[-1].strip('"').lower()
    return None


def column_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``column``: the real column behind each unresolved name, from successes shaped like the
    failing SQL with one identifier in the hole; one fix per (table, column)."""
    success_tokens = [(s, _sql_tokens(sql)) for s in successes if (sql := parse_call(s.input_summary).sql)]
    found: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    support: dict[tuple[str, str], dict[str, Sample]] = defaultdict(dict)
    wrong: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for failure in failures:
        name = _unresolved_column(failure.error)
        sql = parse_call(failure.input_summary).sql
        if not name or not sql:
            continue
        tables = _tables(sql)
        tokens = _sql_tokens(sql)
        holes = [i for i, t in enumerate(tokens) if t == name]
        if not tables or not holes:
            continue
        # each filler's votes are the keys that wrote it (not its ops): one key sending many
        # successful queries over another column cannot steer the fix, and a column needs two keys
        voters: dict[str, set[str]] = defaultdict(set)
        by_filler: dict[str, list[Sample]] = defaultdict(list)
        for success, other in success_tokens:
            if len(other) != len(tokens) or len({other[i] for i in holes}) != 1:
                continue
            if all(a == b for i, (a, b) in enumerate(zip(tokens, other, strict=True)) if i not in holes):
                filler = other[holes[0]]
                if filler != name and filler in CATALOG[tables[0]]:
                    voters[filler].add(success.reporter_id or "")
                    by_filler[filler].append(success)
        fillers = {c: len(keys) for c, keys in voters.items() if len(keys) >= MIN_SUCCESS_REPORTERS}
        if not fillers:
            continue
        column = min(fillers, key=lambda c: (-fillers[c], c))
        key = (tables[0], column)
        found[key].append(failure)
        support[key].update((s.op_id, s) for s in by_filler[column])
        wrong[key][name].add(failure.reporter_id or "")
    fixes = []
    for (table, column), fails in sorted(found.items()):
        quoted = _quoted_names(wrong[(table, column)])
        fixes.append(
            Fix(
                "column", (table, column), f"SQL over {table}", f"Use the column {column} of {table}",
                ", ".join(quoted) if quoted else "a column name guessed from the question",
                tuple(fails), tuple(support[(table, column)].values()),
            )
        )  # fmt: skip
    return fixes


def _required_from_errors(failures: Sequence[Sample]) -> list[tuple[str, ...]]:
    """The missing fields the errors list, each group with its alternatives ("city or state")."""
    groups: list[tuple[str, ...]] = []
    for failure in failures:
        listed: list[str] = []
        if match := _MISSING_FIELDS.search(failure.error):
            listed = [p.strip() for p in match[1].split(",")]
        listed += _REQUIRED_FIELD.findall(failure.error)
        for part in listed:
            options = tuple(
                sorted({o.strip() for o in re.split(r"\s+or\s+|/", part) if o.strip() in TOOL_FIELDS})
            )
            if options and options not in groups:
                groups.append(options)
        if groups:
            return groups
    return groups


def fields_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``fields``: the request fields successes send and failures leave out (the error's list of
    missing fields wins, with its alternatives)."""
    failing = [(f, b) for f in failures if isinstance(b := parse_call(f.input_summary).body, dict)]
    passing = [(s, b) for s in successes if isinstance(b := parse_call(s.input_summary).body, dict)]
    if not failing or len(passing) < MIN_SUCCESSES:
        return []
    groups = _required_from_errors(failures)
    if not groups:
        keys = sorted({k for _, b in passing for k in b if k in TOOL_FIELDS})
        groups = [
            (k,)
            for k in keys
            if _share(passing, lambda p, k=k: k in p[1]) >= SUCCESS_SHARE
            and _share(failing, lambda p, k=k: k in p[1]) <= FAILURE_SHARE
        ]

    def has(body: Mapping[str, Any], options: tuple[str, ...]) -> bool:
        return any(o in body for o in options)

    # a group counts when the failures lack it and the successes send it
    groups = [
        g
        for g in groups
        if _share(passing, lambda p, g=g: has(p[1], g)) >= SUCCESS_SHARE
        and _share(failing, lambda p, g=g: not has(p[1], g)) >= 1 - FAILURE_SHARE
    ]
    if not groups:
        return []
    groups.sort(key=len)
    phrases = [g[0] if len(g) == 1 else f"a {_or(list(g))}" for g in groups]
    method = _method(f for f, _ in failing) or _method(s for s, _ in passing)
    endpoint = failures[0].endpoint
    do = f"Send {_and(phrases)} in the {_route_call(method, endpoint)} body"
    # a fix is stated whole or not at all: more names than an entry holds, or an action cut short,
    # would serve a partial list of the fields (a reader following it still fails)
    if len(groups) > MAX_FIX_NAMES or len(do) > MAX_ACTION_CHARS:
        return []
    sent = Counter(tuple(k for k in b if k in TOOL_FIELDS) for _, b in failing).most_common(1)[0][0]
    instead = f"a body with only {_and(list(sent))}" if sent else "a body without them"
    return [
        Fix(
            "fields", tuple("|".join(g) for g in groups), f"Building a {_route_call(method, endpoint)} body", do,
            instead,
            tuple(f for f, _ in failing), tuple(s for s, b in passing if all(has(b, g) for g in groups)),
        )
    ]  # fmt: skip


def _param_values(samples: Iterable[Sample], endpoint: str) -> list[tuple[Sample, str]]:
    """Each sample's value of the endpoint's path parameter (``/worker/{id}``: the id)."""
    route = [p for p in endpoint.split("/") if p]
    positions = [i for i, p in enumerate(route) if p.startswith("{")]
    if len(positions) != 1:
        return []
    out = []
    for sample in samples:
        call = parse_call(sample.input_summary)
        if call.method and len(call.segments) == len(route):
            out.append((sample, call.segments[positions[0]]))
    return out


def shape(value: str) -> str:
    """An id's shape: digits read as 9, letters and punctuation kept (``w-123`` → ``w-999``)."""
    return re.sub(r"\d", "9", value)


def _form(endpoint: str, shapes: Counter[str]) -> tuple[str, str] | None:
    """(how a reader says the id form, its regular expression): the tool's pattern, else the
    successes' shape when it is letters and digits only."""
    if endpoint in ID_FORMS:
        return ID_FORMS[endpoint]
    common = shapes.most_common(1)[0][0] if shapes else ""
    match = re.fullmatch(r"([A-Za-z]{0,4}[-_]?)(9+)", common)
    if not match:
        return None
    prefix, digits = match[1], len(match[2])
    return (f"{prefix} + {digits} digits" if prefix else f"{digits} digits"), f"^{prefix}[0-9]{{{digits}}}$"


def _noun(endpoint: str) -> str:
    first = next((p for p in endpoint.split("/") if p), "item")
    return first[:-1] if first.endswith("s") else first


def id_format_fixes(failures: Sequence[Sample], successes: Sequence[Sample], known: KnownNames) -> list[Fix]:
    """``id_format``: failing ids whose shapes no success has; the form from the tool's pattern."""
    endpoint = failures[0].endpoint
    if not known.names_route(endpoint):
        return []
    good = _param_values(successes, endpoint)
    bad = _param_values(failures, endpoint)
    good_shapes = Counter(shape(v) for _, v in good)
    if len(good) < MIN_SUCCESSES or not bad or not any(c.isdigit() for c in "".join(v for _, v in good)):
        return []
    off = [(s, v) for s, v in bad if shape(v) not in good_shapes]
    if len(off) * 2 < len(bad):
        return []
    form = _form(endpoint, good_shapes)
    if form is None:
        return []
    spoken, pattern = form
    # the failing forms, shown as shapes (never an instance): the most frequent first
    bad_shapes = Counter(shape(v) for _, v in off)
    shown = [s for s, _ in sorted(bad_shapes.items(), key=lambda p: (-p[1], p[0])) if _SHAPE.match(s)][:2]
    noun = _noun(endpoint)
    method = _method(s for s, _ in off) or "GET"
    regex = pattern.strip("^$")
    return [
        Fix(
            "id_format", (pattern,), f"Looking up a {noun} with {_route_call(method, endpoint)}",
            f"Use {noun} ids of the form {spoken} ({regex})",
            f"ids like {_or(shown)}" if shown else f"{noun} ids of another form",
            tuple(s for s, _ in off), tuple(s for s, v in good if re.fullmatch(pattern, v)),
        )
    ]  # fmt: skip


def id_source_fixes(failures: Sequence[Sample], successes: Sequence[Sample], known: KnownNames) -> list[Fix]:
    """``id_source``: ids of the right form that do not exist; the calls that answered earlier in
    the successful sessions (and, when some do, rarely in the failing ones) are where ids come from."""
    endpoint = failures[0].endpoint
    not_found = [f for f in failures if f.error_type == "not_found" or _NOT_FOUND.search(f.error)]
    good = _param_values(successes, endpoint)
    if not known.names_route(endpoint) or not not_found or len(good) < MIN_SUCCESSES:
        return []
    good_shapes = {shape(v) for _, v in good}
    form = ID_FORMS.get(endpoint)
    well_formed = [
        s
        for s, v in _param_values(not_found, endpoint)
        if (re.fullmatch(form[1], v) if form else shape(v) in good_shapes)
    ]
    if len(well_formed) * 2 < len(not_found):
        return []

    def sessions(samples: Iterable[Sample]) -> dict[tuple[str | None, str | None], set[str]]:
        by: dict[tuple[str | None, str | None], set[str]] = defaultdict(set)
        for sample in samples:
            by[sample.session] |= set(sample.earlier_ok)
        return by

    ok, bad = sessions(s for s, _ in good), sessions(well_formed)
    sources = sorted({c for calls in ok.values() for c in calls})
    candidates = []
    for call in sources:
        method, _, route = call.partition(" ")
        if method not in HTTP_METHODS or route == endpoint or not known.names_route(route):
            continue
        ok_share = _share(list(ok.values()), lambda calls, c=call: c in calls)
        bad_share = _share(list(bad.values()), lambda calls, c=call: c in calls)
        if ok_share >= SUCCESS_SHARE:
            candidates.append((call, bad_share <= FAILURE_SHARE))
    distinct = [c for c, d in candidates if d]
    chosen = (distinct or [c for c, _ in candidates])[:2]
    if not chosen:
        return []
    noun = _noun(endpoint)
    method = _method(well_formed) or "GET"
    return [
        Fix(
            "id_source", tuple(c.partition(" ")[2] for c in chosen),
            f"Looking up a {noun} with {_route_call(method, endpoint)}",
            f"Take {noun} ids from a {_or(chosen)} answer; never guess them", f"{noun} ids written from memory",
            tuple(well_formed), tuple(s for s, _ in good if any(c in s.earlier_ok for c in chosen)),
        )
    ]  # fmt: skip


def aggregate_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``aggregate``: the runtime found answers cut at the row limit after SQL that lists rows;
    successes on the same tables aggregate (or limit) in SQL."""
    cut = [
        (f, sql)
        for f in failures
        if (f.error_type == "result_truncated" or _TRUNCATED.search(f.error))
        and (sql := parse_call(f.linked_input or f.input_summary).sql)
    ]
    listing = [(f, sql) for f, sql in cut if not _AGGREGATE.search(sql)]
    if not listing or len(listing) * 2 < len(cut):
        return []
    tables = {t for _, sql in listing for t in _tables(sql)}
    on_tables = [
        (s, sql) for s in successes if (sql := parse_call(s.input_summary).sql) and tables & set(_tables(sql))
    ]
    if len(on_tables) < MIN_SUCCESSES:
        return []
    bounded = [(s, sql) for s, sql in on_tables if _AGGREGATE.search(sql) or _SQL_LIMIT.search(sql.strip())]
    if len(bounded) < SUCCESS_SHARE * len(on_tables) or not any(_AGGREGATE.search(sql) for _, sql in bounded):
        return []
    endpoint = failures[0].endpoint
    call = _route_call(_method(replace(f, input_summary=f.linked_input or "") for f, _ in listing), endpoint)
    return [
        Fix(
            "aggregate", AGGREGATE_NAMES, f"Answering a count, average or top-N question with {call}",
            f"Aggregate in SQL (count(*), avg()) instead of listing rows: {endpoint} cuts answers at its row limit",
            "rows listed and then counted outside SQL", tuple(f for f, _ in listing), tuple(s for s, _ in bounded),
        )
    ]  # fmt: skip


def json_body_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``json_body``: the failing bodies are not JSON where the successes' are."""
    bodies = [(f, parse_call(f.input_summary)) for f in failures]
    broken = [f for f, c in bodies if c.body_text.lstrip()[:1] in ("{", "[") and not c.parsed]
    passing = [(s, c) for s in successes if (c := parse_call(s.input_summary)).body_text.strip()]
    if not broken or len(broken) * 2 < len(failures) or len(passing) < MIN_SUCCESSES:
        return []
    parsed = [s for s, c in passing if c.parsed]
    if len(parsed) < JSON_SUCCESS_SHARE * len(passing):
        return []
    call = _route_call(_method(broken) or "POST", failures[0].endpoint)
    return [
        Fix(
            "json_body", (JSON_ENCODER_NAME,), f"Sending a JSON body to {call}",
            f"Build the {call} body with a JSON encoder (json.dumps), never by hand",
            "a body written by hand that is not valid JSON", tuple(broken), tuple(parsed),
        )
    ]  # fmt: skip


def round_down(value: int, digits: int = 2) -> int:
    """``value`` cut to its first ``digits`` significant digits (11873 → 11000): a bound that stays
    the same from run to run while the largest success moves a little (the bound is one of the
    fix's names, so of its entry's id)."""
    scale = 10 ** max(0, len(str(value)) - digits)
    return value // scale * scale


def prompt_bound_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``prompt_bound``: every successful model call's prompt was smaller than every failing one's;
    the bound is the largest success's size, rounded down (:func:`round_down`)."""
    failing = [f for f in failures if f.input_tokens is not None]
    passing = [s for s in successes if s.input_tokens is not None]
    if not failing or len(passing) < MIN_SUCCESSES:
        return []
    largest = max(s.input_tokens or 0 for s in passing)
    smallest = min(f.input_tokens or 0 for f in failing)
    if largest >= smallest:
        return []
    bound = round_down(largest)
    endpoint = failures[0].endpoint
    return [
        Fix(
            "prompt_bound", (str(bound),), f"Calling the model ({endpoint})",
            f"Keep model prompts under {bound} input tokens", f"prompts of {smallest} input tokens or more",
            tuple(failing), tuple(passing),
        )
    ]  # fmt: skip


def fixes_for(failures: Sequence[Sample], successes: Sequence[Sample], known: KnownNames) -> list[Fix]:
    """Every rule's fixes for one failure group (same endpoint, task class and signature)."""
    if not failures:
        return []
    found = [
        *column_fixes(failures, successes),
        *fields_fixes(failures, successes),
        *id_format_fixes(failures, successes, known),
        *id_source_fixes(failures, successes, known),
        *aggregate_fixes(failures, successes),
        *json_body_fixes(failures, successes),
        *prompt_bound_fixes(failures, successes),
    ]
    # a fix is what other keys' successes do: backed by one key alone, it is that key's word; and
    # an entry holds at most MAX_FIX_NAMES names (every rule above stays within it; kept here too)
    return [
        f
        for f in found
        if len({s.reporter_id for s in f.successes}) >= MIN_SUCCESS_REPORTERS
        and len(f.names) <= MAX_FIX_NAMES
    ]


# ---- groups -------------------------------------------------------------------------------------
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
    failing_inputs = [f.linked_input or f.input_summary for f in fix.failures]
    excerpts = list(dict.fromkeys(t for t in (*failing_inputs, *(f.error for f in fix.failures)) if t))
    op_ids = [*(s.op_id for s in fix.failures), *(s.op_id for s in fix.successes)]
    return CandidateGroup(
        group_key=group_key("contrast", endpoint, task_class, fix.kind, ",".join(sorted(fix.names))),
        source="contrast", kind="do", endpoint=endpoint, task_class=task_class,
        template=input_shape(failing_inputs[0]) if failing_inputs and failing_inputs[0] else fix.kind,
        op_ids=tuple(op_ids[:MAX_EVIDENCE]), agents=tuple(agents[:MAX_TRACKED_AGENTS]), agent_count=len(agents),
        count=len(fix.failures), excerpts=tuple(excerpts[:MAX_DRAFT_EXCERPTS]), signature_id=signature_id,
        reporters=tuple(sorted(witnesses))[:MAX_TRACKED_AGENTS], reporter_count=trust.count(witnesses),
        fix_kind=fix.kind, fix_names=fix.names, instead_of=fix.instead_of, fix_action=fix.do, fix_when=fix.when,
    )  # fmt: skip


def contrast_groups(
    rows: Sequence[Mapping[str, Any]], *, trust: ReporterTrust, known: KnownNames | None = None
) -> list[CandidateGroup]:
    """The candidate groups the contrast rows make (sorted by ``group_key``): per failure group
    (endpoint, task class, signature) every rule's fixes, each one group; the same fix found for
    two signatures of one (endpoint, task class) is kept once (the first signature's)."""
    known = known or default_known()
    samples = [Sample.of(r) for r in rows if trust.counts(r.get("reporter_id"))]
    failures: dict[tuple[str, str | None, str | None], list[Sample]] = defaultdict(list)
    successes: dict[tuple[str, str | None], list[Sample]] = defaultdict(list)
    for sample in samples:
        if sample.side == "failure":
            failures[(sample.endpoint, sample.task_class, sample.signature_id)].append(sample)
        elif sample.side == "success":
            successes[(sample.endpoint, sample.task_class)].append(sample)
    groups: dict[str, CandidateGroup] = {}
    for (endpoint, task_class, signature_id), failing in sorted(failures.items(), key=lambda i: str(i[0])):
        for fix in fixes_for(failing, successes.get((endpoint, task_class), []), known):
            group = _group(fix, endpoint, task_class, signature_id, trust)
            groups.setdefault(group.group_key, group)
    return sorted(groups.values(), key=lambda g: g.group_key)
