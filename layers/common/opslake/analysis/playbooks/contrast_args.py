"""Contrast rules over a call's arguments, for any tool: the value's shape, a missing or extra
argument, the call that should come first, what changed when an agent recovered, and the error that
states its own rule (see the table in :mod:`.contrast`).

Every name an entry states comes from the vocabulary (:class:`~opslake.analysis.catalog.known.Vocabulary`):
an argument is named only when the catalog knows it for that tool (enough independent reporters sent
it, or a team declared it), a form only when it is one (a shape with digits, a JSON type, or a value
of an enum: few distinct words); a word value of an argument that takes many (a city, a name) is an
instance and is never stated as a form. Arguments are read with
:func:`~opslake.analysis.catalog.arguments.call_arguments`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opslake.analysis.catalog.arguments import call_arguments
from opslake.analysis.catalog.known import Vocabulary
from opslake.analysis.catalog.shapes import has_digits, is_typed, pattern, spoken, value_shape
from opslake.analysis.heuristics import classify, missing_field_parts
from opslake.analysis.masking import template_of
from opslake.analysis.playbooks.contrast import (
    FAILURE_SHARE,
    MIN_SUCCESS_REPORTERS,
    MIN_SUCCESSES,
    SUCCESS_SHARE,
    Fix,
    Sample,
    and_list,
    method_of,
    or_list,
    parse_call,
    route_call,
    share,
)
from opslake.models.playbooks import MAX_ACTION_CHARS, MAX_FIX_NAMES

#: At most this many forms are stated for one argument (more: the values have no one form).
MAX_FORMS = 4
#: The successes' forms must cover this share of their calls.
FORM_COVERAGE = 0.9
MAX_QUOTED_SHAPES = 2
#: An argument the successes send in place of an extra one: in this share of them at least, and
#: in at most this share of the failures (the failures never tried it).
ALTERNATIVE_SHARE = 0.1
ALTERNATIVE_AMONG_FAILURES = 0.05
MAX_ALTERNATIVES = 4
#: A recovery is a pattern when this share of the recovered failures changed the same way.
RECOVERY_SHARE = 0.6
_NOT_FOUND = re.compile(
    r"not found|does not exist|doesn't exist|no such|unknown \w+ id|\bno \w+ with (?:id|name)\b", re.I
)
_MISSING = re.compile(r"\bmissing\b|\brequired\b|\bmust (?:be )?(?:provided|given|specified|set)\b", re.I)
#: Words that make an error a stated rule ("must", "only", "not allowed", "first" …).
_RULE = re.compile(
    r"\b(?:must|only|cannot|can ?not|can't|not allowed|not permitted|requires?|required|should|at most"
    r"|at least|exceeds?|exceeded|not available|unavailable|insufficient|does not match|do not match"
    r"|doesn't match|not supported|unsupported|expected|before|after|first|already|too (?:many|large|long)"
    r"|out of range|no longer|not eligible|limit|not enough|(?:does not|doesn't|do not) add up"
    r"|mismatch(?:ed)?|too (?:low|high|few|short|small|big|early|late|old)|out of stock"
    r"|(?:less|more|greater|fewer) than|make sure)\b",
    re.I,
)
#: A route (``POST /log``) or another tool (``tool:x``) in an error: a refusal that sends its reader
#: to another service states no rule of this tool, and it is how a planted error would steer agents.
_ELSEWHERE = re.compile(r"(?<![\w/<>.])/[A-Za-z][\w{}\-]*|\b[A-Za-z][\w\-]*:[A-Za-z_][\w\-]*")
#: Categories whose errors are no rule of the tool (a timeout, a throttle, an unknown id …).
_NO_RULE_CATEGORIES = frozenset(
    {"timeout", "rate_limit", "auth", "not_found", "unknown_column", "unknown_table"}
)
_NAME_OK = re.compile(r"[A-Za-z0-9_.:+/\- ]{1,40}")


# ---- arguments of the samples --------------------------------------------------------------------
def _arguments(sample: Sample) -> dict[str, Any] | None:
    return call_arguments(sample.input_summary, sample.endpoint)


def _path_parameters(endpoint: str) -> list[str]:
    return [p[1:-1] for p in endpoint.split("/") if p.startswith("{") and p.endswith("}")]


@dataclass(frozen=True)
class Where:
    """How an entry names a tool's call and where its arguments go."""

    call: str  # "POST /match", "tool:create_ticket"
    endpoint: str
    body: bool  # a request with a body (the arguments are "the POST /match body")

    @property
    def place(self) -> str:
        return f"the {self.call} body" if self.body else f"the {self.endpoint} arguments"

    @property
    def sent(self) -> str:
        return "a body" if self.body else "arguments"

    def argument(self, name: str) -> str:
        """An argument as a reader says it: a path parameter of ``/worker/{id}`` is "worker ids"."""
        if name in _path_parameters(self.endpoint):
            first = next((p for p in self.endpoint.split("/") if p and not p.startswith("{")), "")
            noun = first[:-1] if first.endswith("s") else first
            return f"{noun} {name}s" if noun else f"{name}s"
        return name


def _where(failures: Sequence[Sample], successes: Sequence[Sample]) -> Where:
    endpoint = failures[0].endpoint
    method = method_of(failures) or method_of(successes)
    body = method is not None and any(parse_call(s.input_summary).body_text for s in [*failures, *successes])
    return Where(route_call(method, endpoint), endpoint, body)


def _known(vocabulary: Vocabulary, endpoint: str) -> set[str]:
    return {a.name for a in vocabulary.arguments(endpoint)}


def _form_phrase(
    vocabulary: Vocabulary, endpoint: str, name: str, forms: Sequence[str], failing: Iterable[str] = ()
) -> tuple[str, str] | None:
    """(how the action states the forms, the fix's name for them), or None when they are no form:
    digits shapes ("of the form W + 5 digits (W[0-9]{5})"), JSON types ("as a number"), or the
    values of an enum ("as one of high, low or normal"); a word value of an argument that takes
    many (a city) is an instance."""
    argument = vocabulary.argument(endpoint, name)
    if argument is None:
        return None
    if all(has_digits(f) for f in forms):
        said = f"of the form {or_list([f'{spoken(f)} ({pattern(f)})' for f in forms])}"
        if len(said) > MAX_ACTION_CHARS // 2:  # the patterns alone say it in fewer characters
            said = f"of the form {or_list([pattern(f) for f in forms])}"
        return said, "|".join(f"^{pattern(f)}$" for f in forms)
    if all(is_typed(f) for f in forms):
        return f"as {or_list([spoken(f) for f in forms])}", "|".join(forms)
    if vocabulary.is_enum(argument) and not any(has_digits(f) or is_typed(f) for f in forms):
        others = (v for v in vocabulary.forms(endpoint, name) if not has_digits(v) and not is_typed(v))
        values = sorted({*forms, *others} - set(failing))
        if argument.enum:
            values = sorted(argument.enum)
        return f"as one of {or_list(values)}", "|".join(values)
    return None


def _quoted_shapes(shapes: Iterable[str]) -> list[str]:
    """The failing shapes an entry may show as "instead of": the most frequent, plain ones."""
    counted = Counter(s for s in shapes if _NAME_OK.fullmatch(s))
    return [s for s, _ in sorted(counted.items(), key=lambda p: (-p[1], p[0]))][:MAX_QUOTED_SHAPES]


# ---- value shape ------------------------------------------------------------------------------------
def value_shape_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """``value_shape``: an argument whose failing values have shapes no success has, where the
    successes' values take a few forms."""
    endpoint = failures[0].endpoint
    where = _where(failures, successes)
    failing = [(f, a) for f in failures if (a := _arguments(f)) is not None]
    passing = [(s, a) for s in successes if (a := _arguments(s)) is not None]
    fixes = []
    for name in sorted({n for _, a in failing for n in a} & _known(vocabulary, endpoint)):
        bad = [(f, value_shape(a[name])) for f, a in failing if name in a]
        good = [(s, value_shape(a[name])) for s, a in passing if name in a]
        if not bad or len(good) < MIN_SUCCESSES:
            continue
        seen = Counter(shape for _, shape in good)
        off = [(f, shape) for f, shape in bad if shape not in seen]
        if len(off) < SUCCESS_SHARE * len(bad):
            continue
        forms: list[str] = []
        for shape, _ in seen.most_common():
            if sum(seen[f] for f in forms) >= FORM_COVERAGE * len(good):
                break
            forms.append(shape)
        if len(forms) > MAX_FORMS:
            continue
        phrase = _form_phrase(vocabulary, endpoint, name, forms, (shape for _, shape in off))
        if phrase is None:
            continue
        stated, names = phrase
        shown = _quoted_shapes(shape for _, shape in off)
        said = where.argument(name)
        verb = "Use" if said != name else "Send"
        fixes.append(
            Fix(
                "value_shape", (name, names), f"Calling {where.call}", f"{verb} {said} {stated}",
                f"{said} like {or_list(shown)}" if shown else f"{said} of another form",
                tuple(f for f, _ in off), tuple(s for s, shape in good if shape in forms),
            )
        )  # fmt: skip
    return fixes


# ---- missing and extra arguments ---------------------------------------------------------------------
def _required_by_errors(failures: Sequence[Sample], known: set[str]) -> list[tuple[str, ...]]:
    """The arguments the errors say are missing, each group with its alternatives ("city or
    state"): a list after "missing required …:", pydantic's "<name>: Field required", or a known
    argument named in an error that says something is missing or required."""
    groups: list[tuple[str, ...]] = []
    for failure in failures:
        listed = missing_field_parts(failure.error)
        if not listed and _MISSING.search(failure.error):
            listed = [
                n for n in sorted(known) if re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", failure.error)
            ]
        for part in listed:
            options = tuple(sorted({o.strip(" '\"`") for o in re.split(r"\s+or\s+|/", part)} & known))
            if options and options not in groups:
                groups.append(options)
        if groups:
            return groups
    return groups


def missing_argument_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """``missing_argument``: the arguments successes send and failures leave out (the error's list
    of missing arguments wins, with its alternatives)."""
    endpoint = failures[0].endpoint
    known = _known(vocabulary, endpoint)
    failing = [(f, a) for f in failures if (a := _arguments(f)) is not None]
    passing = [(s, a) for s in successes if (a := _arguments(s)) is not None]
    if not failing or len(passing) < MIN_SUCCESSES or not known:
        return []
    groups = _required_by_errors(failures, known)
    if not groups:
        names = sorted({k for _, a in passing for k in a} & known)
        groups = [
            (k,)
            for k in names
            if share(passing, lambda p, k=k: k in p[1]) >= SUCCESS_SHARE
            and share(failing, lambda p, k=k: k in p[1]) <= FAILURE_SHARE
        ]

    def has(arguments: dict[str, Any], options: tuple[str, ...]) -> bool:
        return any(o in arguments for o in options)

    groups = [
        g
        for g in groups
        if share(passing, lambda p, g=g: has(p[1], g)) >= SUCCESS_SHARE
        and share(failing, lambda p, g=g: not has(p[1], g)) >= 1 - FAILURE_SHARE
    ]
    if not groups:
        return []
    groups.sort(key=len)
    where = _where(failures, successes)
    phrases = [g[0] if len(g) == 1 else f"a {or_list(list(g))}" for g in groups]
    do = f"Send {and_list(phrases)} in {where.place}"
    # a fix is stated whole or not at all: more names than an entry holds, or an action cut short,
    # would serve a partial list (a reader following it still fails)
    if len(groups) > MAX_FIX_NAMES or len(do) > MAX_ACTION_CHARS:
        return []
    sent = Counter(tuple(k for k in a if k in known) for _, a in failing).most_common(1)[0][0]
    instead = f"{where.sent} with only {and_list(list(sent))}" if sent else f"{where.sent} without them"
    when = f"Building a {where.call} body" if where.body else f"Calling {where.call}"
    return [
        Fix(
            "missing_argument", tuple("|".join(g) for g in groups), when, do, instead,
            tuple(f for f, _ in failing), tuple(s for s, a in passing if all(has(a, g) for g in groups)),
        )
    ]  # fmt: skip


def extra_argument_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """``extra_argument``: an argument the failures send and the successes do not."""
    endpoint = failures[0].endpoint
    known = _known(vocabulary, endpoint)
    failing = [(f, a) for f in failures if (a := _arguments(f)) is not None]
    passing = [(s, a) for s in successes if (a := _arguments(s)) is not None]
    if not failing or len(passing) < MIN_SUCCESSES:
        return []
    extra = [
        k
        for k in sorted({k for _, a in failing for k in a} & known)
        if share(failing, lambda p, k=k: k in p[1]) >= SUCCESS_SHARE
        and share(passing, lambda p, k=k: k in p[1]) <= FAILURE_SHARE
        and k not in _path_parameters(endpoint)
    ]
    if not extra or len(extra) > MAX_FIX_NAMES:
        return []
    where = _where(failures, successes)
    do = f"Leave {and_list(extra)} out of {where.place}"
    # what the successes send that the failures do not (the argument in its place: a block's type
    # itself, not a "type" holding it), when it fits the action whole
    instead = [
        k
        for k in sorted(
            {k for _, a in passing for k in a} & known,
            key=lambda k: (-share(passing, lambda p, k=k: k in p[1]), k),
        )
        if share(passing, lambda p, k=k: k in p[1]) >= ALTERNATIVE_SHARE
        and share(failing, lambda p, k=k: k in p[1]) <= ALTERNATIVE_AMONG_FAILURES
    ][:MAX_ALTERNATIVES]
    while instead and len(f"{do}; send {or_list(instead)} instead") > MAX_ACTION_CHARS:
        instead.pop()
    if instead and len(extra) + len(instead) <= MAX_FIX_NAMES:
        do = f"{do}; send {or_list(instead)} instead"
    else:
        instead = []
    return [
        Fix(
            "extra_argument", (*extra, *instead), f"Calling {where.call}", do,
            f"{where.sent} with {and_list(extra)}", tuple(f for f, a in failing if set(extra) & set(a)),
            tuple(s for s, a in passing if not set(extra) & set(a)), left_out=tuple(extra),
        )
    ]  # fmt: skip


# ---- the call before --------------------------------------------------------------------------------
def _call_endpoint(call: str) -> str:
    """The endpoint of an ``earlier_ok`` item ("POST /match" → "/match", "tool:search" as is)."""
    method, sep, rest = call.partition(" ")
    return rest if sep and method in ("GET", "POST", "PUT", "PATCH", "DELETE") else call


def _words(name: str) -> set[str]:
    """The words of a name of four letters or more, its kind aside (``tool:find_reservation`` →
    find, reservation; ``/worker/{id}`` → worker)."""
    return {w for w in re.split(r"[^a-z]+", name.rpartition(":")[2].lower()) if len(w) >= 4}


def _guessed_argument(failures: Sequence[Sample]) -> str | None:
    """The argument whose value the errors echo (the id that was not found), the most common."""
    found: Counter[str] = Counter()
    for failure in failures:
        for name, value in (_arguments(failure) or {}).items():
            text = str(value)
            if len(text) >= 3 and text in failure.error:
                found[name] += 1
    return found.most_common(1)[0][0] if found else None


def preceding_call_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """``preceding_call``: a call that answered earlier in the successful sessions and (unless the
    values asked for were not found: then the agent had the answer and guessed anyway) not in the
    failing ones. Not found: "take the ids from its answer"; else: "call it first"."""
    endpoint = failures[0].endpoint
    known = vocabulary.known_names
    not_found = [f for f in failures if f.error_type == "not_found" or _NOT_FOUND.search(f.error)]
    missing = len(not_found) * 2 >= len(failures)
    failing = not_found if missing else list(failures)
    if not failing or len(successes) < MIN_SUCCESSES:
        return []

    def sessions(samples: Iterable[Sample]) -> list[set[str]]:
        by: dict[tuple[str | None, str | None], set[str]] = defaultdict(set)
        for sample in samples:
            by[sample.session] |= set(sample.earlier_ok)
        return list(by.values())

    ok, bad = sessions(successes), sessions(failing)
    candidates: list[tuple[str, bool]] = []
    for call in sorted({c for calls in ok for c in calls}):
        target = _call_endpoint(call)
        if target == endpoint or not known.names_route(target):
            continue
        if share(ok, lambda calls, c=call: c in calls) >= SUCCESS_SHARE:
            candidates.append((call, share(bad, lambda calls, c=call: c in calls) <= FAILURE_SHARE))
    distinct = [c for c, d in candidates if d]
    chosen = distinct or ([c for c, _ in candidates] if missing else [])
    if not chosen:
        return []
    where = _where(failing, successes)
    parameters = _path_parameters(endpoint)
    guessed = (
        (_guessed_argument(failing) or (parameters[0] if len(parameters) == 1 else None)) if missing else None
    )
    if guessed:
        # where the ids come from: of the calls made first, the ones named like what was guessed
        # (tool:find_reservation for a reservation_id), when some are
        words = _words(guessed) | _words(endpoint)
        named = [c for c in chosen if _words(_call_endpoint(c)) & words]
        chosen = named or chosen
    chosen = chosen[:2]
    names = tuple(_call_endpoint(c) for c in chosen)
    backed = tuple(s for s in successes if any(c in s.earlier_ok for c in chosen))
    if missing:
        said = where.argument(guessed) if guessed else "ids"
        said = said if said.endswith("s") else f"{said} values"
        do = f"Take {said} from a {or_list(chosen)} answer; never guess them"
        return [Fix("preceding_call", names, f"Calling {where.call}", do, f"{said} written from memory",
                    tuple(failing), backed, id_source=True)]  # fmt: skip
    return [
        Fix(
            "preceding_call", names, f"Calling {where.call}", f"Call {or_list(chosen)} before {where.call}",
            f"{where.call} without a {or_list(chosen)} call first", tuple(failing), backed,
        )
    ]  # fmt: skip


# ---- recovery ------------------------------------------------------------------------------------------
def _changes(before: dict[str, Any], after: dict[str, Any]) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for name in after.keys() - before.keys():
        found.add(("added", name))
    for name in before.keys() - after.keys():
        found.add(("removed", name))
    for name in before.keys() & after.keys():
        old, new = value_shape(before[name]), value_shape(after[name])
        if old != new:
            found.add(("shape", name, old, new))
    return found


def recovery_fixes(failures: Sequence[Sample], vocabulary: Vocabulary) -> list[Fix]:
    """``recovery``: within sessions, the next successful call of the tool after a failure changed
    its arguments the same way in most of them, and in sessions of two keys at least: the
    arguments added (one fix naming them all), left out (one fix), or a value's form changed (one
    fix per argument)."""
    endpoint = failures[0].endpoint
    known = _known(vocabulary, endpoint)
    pairs = []
    for failure in failures:
        before, after = _arguments(failure), call_arguments(failure.next_ok_input, endpoint)
        if before is not None and after is not None:
            pairs.append((failure, _changes(before, after)))
    if len(pairs) < MIN_SUCCESSES:
        return []
    counted = Counter(change for _, changes in pairs for change in changes if change[1] in known)
    common = [c for c, n in counted.items() if n >= RECOVERY_SHARE * len(pairs)]

    def backed(changes: Sequence[tuple[str, ...]]) -> tuple[tuple[Sample, ...], tuple[str, ...]]:
        recovered = tuple(f for f, made in pairs if all(c in made for c in changes))
        return recovered, tuple(sorted({f.reporter_id or "" for f in recovered}))

    where = _where(failures, [])
    fixes = []
    for verb, template in (("added", "Send {names} in {place}"), ("removed", "Leave {names} out of {place}")):
        changes = sorted(c for c in common if c[0] == verb)
        recovered, keys = backed(changes)
        if not changes or len(keys) < MIN_SUCCESS_REPORTERS:
            continue
        names = [c[1] for c in changes]
        instead = f"{where.sent} {'without' if verb == 'added' else 'with'} {and_list(names)}"
        do = template.format(names=and_list(names), place=where.place)
        fixes.append(
            Fix(
                "recovery", tuple(names), f"Calling {where.call}", do, instead, recovered, success_keys=keys,
                left_out=tuple(names) if verb == "removed" else (),
            )
        )  # fmt: skip
    for change in sorted(c for c in common if c[0] == "shape"):
        recovered, keys = backed([change])
        phrase = _form_phrase(vocabulary, endpoint, change[1], [change[3]], [change[2]])
        if phrase is None or len(keys) < MIN_SUCCESS_REPORTERS:
            continue
        said, shown = where.argument(change[1]), _quoted_shapes([change[2]])
        verb = "Use" if said != change[1] else "Send"
        fixes.append(
            Fix(
                "recovery", (change[1], phrase[1]), f"Calling {where.call}", f"{verb} {said} {phrase[0]}",
                f"{said} like {shown[0]}" if shown else f"{said} of another form", recovered, success_keys=keys,
            )
        )  # fmt: skip
    return fixes


# ---- the error as the rule --------------------------------------------------------------------------
def _template(failures: Sequence[Sample], vocabulary: Vocabulary) -> str:
    """The failure group's masked error: the catalog's template of its signature (merged variants
    included), else the first sample's error masked as the analyzer masks it."""
    first = failures[0]
    tool = vocabulary.tool(first.endpoint)
    if tool is not None:
        for error in tool.errors:
            if error.signature_id == first.signature_id:
                return error.template
    return template_of(first.endpoint, first.error_type, first.error)


#: Where a message's clauses part ("Error executing tool x: Invalid filename: …", "… failed. Fix one: …").
_CLAUSE_START = re.compile(r"(?<=[:.;]) (?=\S)")


def _rule_clause(quoted: str, room: int) -> str:
    """A quote longer than ``room`` from the latest clause start that keeps the first clause stating
    the rule (the words :data:`_RULE` finds) within ``room``, when its head is what does not fit
    ("Error executing tool x: Invalid filename: <*>, must be an absolute path" → "Invalid filename:
    <*>, must be an absolute path"); else the quote as it was (cut from its start)."""
    rule = _RULE.search(quoted)
    if rule is None:
        return quoted
    stop = re.compile(r"[.;](?:\s|$)").search(quoted, rule.end())
    end = stop.end() - 1 if stop else len(quoted)  # the rule's sentence, whole
    if end <= room - 1:
        return quoted
    # a clause that starts with a masked value ("<uuid>. Make sure …") starts at its next one
    starts = [
        m.end()
        for m in _CLAUSE_START.finditer(quoted)
        if m.end() <= rule.start() and not quoted.startswith("<", m.end())
    ]
    for start in starts:  # the earliest start that keeps the rule's sentence in the room
        if end - start <= room - 1:
            return quoted[start:]
    return quoted


def error_rule_fixes(failures: Sequence[Sample], vocabulary: Vocabulary) -> list[Fix]:
    """``error_rule`` (an ``avoid`` entry): the error's template states a rule in words ("must",
    "only", "not allowed", "first" …), is no timeout, throttle, unknown id or name, and names no
    route or other tool: the entry quotes it, masked. Its reporters are the failing ops' witnesses, like any contrast's."""
    first = failures[0]
    template = _template(failures, vocabulary)
    quoted = template.split(" | ", 2)[2] if template.count(" | ") >= 2 else ""
    category, _ = classify(
        first.error_type, [first.error_type or "", quoted, *(f.error for f in failures[:5])]
    )
    if not quoted or category in _NO_RULE_CATEGORIES or not _RULE.search(quoted):
        return []
    if len(re.findall(r"[A-Za-z]{2,}", quoted)) < 4 or "'" in quoted:
        return []
    if any(m != first.endpoint for m in _ELSEWHERE.findall(quoted)):
        return []  # it names a route or another tool: no rule of this tool
    call = route_call(method_of(failures), first.endpoint)
    head = f"{call} refuses '"
    room = MAX_ACTION_CHARS - len(head) - 1
    if len(quoted) > room:
        quoted = _rule_clause(quoted, room)
    if len(quoted) > room:
        quoted = quoted[: room - 1].rsplit(" ", 1)[0] + "…"
    return [
        Fix(
            "error_rule",
            (first.signature_id or "rule",),
            f"Calling {call}",
            f"{head}{quoted}'",
            None,
            tuple(failures),
            kind_of_entry="avoid",
        )
    ]


# ---- all of them ---------------------------------------------------------------------------------
def argument_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """The argument rules' fixes for one failure group (the contrasts first, then recoveries)."""
    return [
        *value_shape_fixes(failures, successes, vocabulary),
        *extra_argument_fixes(failures, successes, vocabulary),  # before missing: it may say both
        *missing_argument_fixes(failures, successes, vocabulary),
        *preceding_call_fixes(failures, successes, vocabulary),
        *recovery_fixes(failures, vocabulary),
    ]
