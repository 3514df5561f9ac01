"""The quality gate: an entry is published only when its action tells a reader something to do.

:func:`quality_refusal` applies to heuristic and model text alike (after the lesson fence, which
judges safety; this gate judges use). Its rules, in order, on the fence's skeleton (NFKC,
casefolded, look-alike letters read as the ASCII they imitate), so case and Unicode change nothing:

- **empty**: no action;
- **R1 restates the endpoint**: without its routes and ``kind:name`` labels (a route's concrete
  values, such as ``workers`` in ``/tables/workers``, stay), HTTP methods, placeholders, filler
  ("call", "use", "as other agents did" …) and phrases that say nothing ("read the error"), no word is
  left: "Call GET /worker/{id} as other agents did", "Use /sql";
- **R2 nothing actionable**: the action names no catalog item (the vocabulary read at run time:
  :class:`~opslake.analysis.catalog.known.Vocabulary`): a table, column or tool argument (an English
  word among them — role, city — only beside a word saying what it is: field, column, argument …,
  beside another such name: "role, city and state", or beside one of its values or forms), a value
  of an enum argument beside its argument, a form (an id form or pattern), a tool or route other
  than the entry's endpoint or a route's concrete value, a quoted error template of the tool, a
  number with a unit, an SQL aggregate or clause, or a JSON encoder;
- **R3 one instance**: the trigger, action or instead-of still holds a value of one instance
  (:func:`~.generalize.instance_values`: an id, a word value the catalog saw an argument take among
  many, a request's literal).

The consolidator generalizes first (:func:`~.generalize.generalize`) and gates the generalized text:
what generalization wrote counts for nothing, so an entry that was only its instance is refused by
R1 or R2. Reasons start with :data:`QUALITY`.
"""

from __future__ import annotations

import re

from opslake.analysis.catalog.known import Vocabulary
from opslake.analysis.catalog.shapes import is_typed, spoken
from opslake.analysis.fence import (
    HTTP_METHODS,
    MAX_CHECKED_CHARS,
    PLACEHOLDERS,
    KnownNames,
    compatible,
    english_words,
    skeleton,
)
from opslake.analysis.playbooks.generalize import GENERALIZED_FORMS, PLACEHOLDER, instance_values

QUALITY = "quality: "
#: The labels a refusal's reason starts with after :data:`QUALITY` (:func:`quality_label`).
EMPTY = "empty action"
TOO_LONG = "too long"
RESTATES = "restates the endpoint"
NOTHING_ACTIONABLE = "names nothing actionable"
ONE_INSTANCE = "tied to one instance"

#: Words that carry no advice once the endpoint is gone (the plan's list, and their inflections).
FILLER = frozenset((
    "call", "calls", "calling", "called", "use", "uses", "using", "used", "as", "other", "others", "agent",
    "agents", "did", "do", "does", "the", "a", "an", "shaped", "like", "same", "way", "task", "tasks", "it",
    "this", "that", "to", "via", "with", "of", "for", "on",
))  # fmt: skip
#: Phrases that count for nothing: they tell a reader nothing it could do differently.
EMPTY_PHRASES = re.compile(
    r"\bas\s+(?:the\s+)?other\s+agents?\s+(?:did|do|have\s+done)\b|\bbe\s+careful\b"
    r"|\b(?:read|see|check)\s+(?:the\s+)?(?:error|errors|message|messages|docs|documentation)\b"
    r"|\b(?:check|change|fix|verify|validate)\s+(?:the\s+|your\s+)?(?:input|inputs|request|call|arguments)\b"
    r"|\bdo\s+not\s+repeat\s+(?:an?\s+|the\s+)?(?:identical|same)\s+(?:call|request)s?\b"
    r"|\btry\s+again\b|\bretry\b"
)
#: Words that say what a name is, so that an English word among the known names counts as the name.
_NAME_CONTEXT = frozenset((
    "field", "fields", "column", "columns", "table", "tables", "body", "parameter", "parameters", "key",
    "keys", "argument", "arguments", "schema",
))  # fmt: skip
_PATH = re.compile(r"(?<![\w/])/[a-z0-9_{}:.\-]+(?:/[a-z0-9_{}:.\-]*)*")
_LABEL = re.compile(r"\b[a-z][a-z0-9_\-]{0,30}:[a-z0-9_{}\-/.]{1,60}")
_WORD = re.compile(r"[a-z][a-z0-9_]*|\d+")
_ID_FORM = re.compile(
    r"\^\S{1,60}\$|\+\s*(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten)\s+(?:digits?|letters?)"
    r"|\bof\s+the\s+form\b"
)
_NUMBER_UNIT = re.compile(
    r"\b\d[\d,.]*\s*(?:input\s+|output\s+)?(?:tokens?|rows?|characters?|chars|bytes|[kmg]b|seconds?|secs?|ms"
    r"|milliseconds?|minutes?|hours?|days?|items?|results?|requests?|calls?|retries|times|%|percent)(?!\w)"
)
_SQL_AGGREGATE = re.compile(r"\b(?:count|avg|sum|min|max|approx_distinct)\s*\(", re.I)
_SQL_CLAUSE = re.compile(r"\b(?:WHERE|LIMIT|GROUP BY|ORDER BY|HAVING|JOIN|DISTINCT)\b")  # as SQL writes them
_JSON_ENCODER = re.compile(r"\bjson\s+encoder\b|\bjson\.dumps\b|\bJSON\.stringify\b", re.I)
# a placeholder right after a "/" is a route parameter (/worker/{id}), not what generalization wrote
_GENERALIZED = re.compile(
    "|".join(re.escape(skeleton(p)) for p in sorted(GENERALIZED_FORMS, key=len, reverse=True))
    + "|(?<!/)"
    + PLACEHOLDER.pattern.replace("A-Z", "")
)
_JSON_KEY = re.compile(r"\"([a-z_][a-z0-9_]{0,40})\"\s*:")
_ARTICLES = frozenset({"a", "an", "or"})
_QUOTE = re.compile(r"'([^'\n]{4,200})'")


def quality_refusal(
    trigger: str,
    action: str,
    instead_of: str | None,
    endpoint: str | None,
    task_class: str | None,
    *,
    vocabulary: Vocabulary | None = None,
) -> str | None:
    """Why an entry (its trigger, action, instead-of, for this endpoint and task class) says nothing
    a reader can act on, else ``None``. The reason starts with ``"quality: "``; rules in the module doc.
    ``vocabulary``: the catalog and tables read at run time (default: none, only opslake's fixed names)."""
    del task_class  # a task class is a label, never advice; kept for the contract's shape
    if not action or not action.strip():
        return QUALITY + EMPTY
    if max(len(trigger), len(action), len(instead_of or "")) > MAX_CHECKED_CHARS:
        return QUALITY + f"{TOO_LONG}: longer than {MAX_CHECKED_CHARS} characters"
    vocabulary = vocabulary or Vocabulary()
    names = vocabulary.known_names
    if endpoint and endpoint not in names.routes:
        names = names.extended([endpoint])
    own = skeleton(endpoint).strip() if endpoint else None
    form = _without_generalized(skeleton(action))
    content, routes, values = _content(form, own, names)
    if not content:
        if own and (own in routes or not routes):
            return QUALITY + f"{RESTATES}: the action only restates its endpoint ({endpoint})"
        return QUALITY + f"{NOTHING_ACTIONABLE}: the action only names a call, nothing to do differently"
    if not _names_a_specific(action, content, routes, values, own, names, vocabulary, endpoint):
        return (
            QUALITY
            + f"{NOTHING_ACTIONABLE}: the action names no tool, argument, form, column, table, route, "
            "error rule, limit or SQL clause"
        )
    for label, text in (("trigger", trigger), ("action", action), ("instead of", instead_of or "")):
        keep = template_quotes(text, vocabulary, endpoint)
        found = instance_values(text, vocabulary.instances, vocabulary.fields, keep) if text else []
        if found:
            return QUALITY + f"{ONE_INSTANCE}: the {label} holds {found[0].kind} {found[0].value!r}"
    return None


def quality_label(reason: str) -> str | None:
    """The short stable label of a gate refusal (what a report counts refusals by: "restates the
    endpoint", "names nothing actionable", "tied to one instance" …), else None (not the gate's)."""
    if not reason.startswith(QUALITY):
        return None
    return reason[len(QUALITY) :].partition(":")[0].strip()


def _without_generalized(form: str) -> str:
    """The skeleton with what generalization wrote removed: it names no instance, and no specific."""
    return _GENERALIZED.sub(" ", form)


def _content(form: str, own: str | None, names: KnownNames) -> tuple[list[str], list[str], list[str]]:
    """(the words that say something, the routes and labels named, the routes' concrete values):
    the action without deny-listed phrases, routes and labels, methods, placeholders and filler. An
    unknown route's parts are words, not values: only a validated route's parameter is a name."""
    form = EMPTY_PHRASES.sub(" ", form)
    routes: list[str] = []
    values: list[str] = []
    words_in_paths: list[str] = []

    segments = frozenset(part for r in names.routes for part in r.strip("/").split("/") if part)

    def route(match: re.Match[str]) -> str:
        path = match[0].rstrip(".,;:)")
        routes.append(path)
        own_parts = set(own.strip("/").split("/")) if own else set()
        for part in path.strip("/").split("/"):
            if part and not part.startswith("{") and part not in segments and part not in own_parts:
                # a concrete value of a validated route (workers in /tables/workers), else a word
                (values if names.names_route(path) else words_in_paths).append(part)
        return " "

    def label(match: re.Match[str]) -> str:
        routes.append(match[0].rstrip(".,;:)"))
        return " "

    if own and own != "/" and own in form:
        routes.append(own)
        form = form.replace(own, " ")
    form = _PATH.sub(route, _LABEL.sub(label, form))
    methods = {m.lower() for m in HTTP_METHODS}
    # placeholders as written ({num}, <date>) say nothing; the same word unmarked may be a name
    # (an argument called date)
    words = [
        w
        for w in _WORD.findall(re.sub(r"\{[a-z_]{1,20}\}|<[a-z_*]{1,20}>", " ", form))
        if w not in FILLER and w not in methods
    ]
    return [*words, *words_in_paths, *values], routes, values


def _names_a_specific(
    action: str,
    content: list[str],
    routes: list[str],
    values: list[str],
    own: str | None,
    names: KnownNames,
    vocabulary: Vocabulary,
    endpoint: str | None,
) -> bool:
    """Whether the action names something a reader can use (R2 in the module doc)."""
    if values:
        return True
    if endpoint and _names_catalog_item(action, content, vocabulary, endpoint):
        return True
    other_routes = [r for r in routes if r != own and names.names_route(r) and not _same_route(r, own)]
    if other_routes:
        return True
    written = compatible(action)
    if _SQL_AGGREGATE.search(written) or _SQL_CLAUSE.search(written) or _JSON_ENCODER.search(written):
        return True
    spoken = EMPTY_PHRASES.sub(" ", _without_generalized(skeleton(action)))
    if _ID_FORM.search(spoken) or _NUMBER_UNIT.search(spoken):
        return True
    tabled = set(vocabulary.tables) | {c for cols in vocabulary.tables.values() for c in cols}
    real = vocabulary.fields | tabled

    # for an agent's own tool, an argument of some other tool is a word that happens to be a name
    # there ("paths" of a file reader, in advice about a shell tool), not something of this tool
    tool = vocabulary.tool(endpoint) if endpoint else None
    elsewhere: frozenset[str] = frozenset()
    if tool is not None and not tool.route:
        elsewhere = vocabulary.fields - {a.name for a in vocabulary.arguments(tool.endpoint)} - tabled

    def is_name(word: str) -> bool:
        """A known name, not only one of the normalizer's placeholder words (num, date, id …), and
        not only another tool's argument."""
        return names.knows(word) and (word not in PLACEHOLDERS or word in real) and word not in elsewhere

    if any(is_name(key) for key in _JSON_KEY.findall(spoken)):
        return True  # a request's field shown as a JSON key
    english = english_words()
    context = any(w in _NAME_CONTEXT for w in content)
    named = {w for w in content if w not in _NAME_CONTEXT and is_name(w)}
    if len(named) >= 2:
        return True  # a list of names ("role, city and state") says what to send, context or not
    return any(context or word not in english for word in named)


def _same_route(path: str, own: str | None) -> bool:
    """Whether ``path`` is the endpoint itself (``/worker/{id}`` for ``/worker/{id}``)."""
    if not own or not own.startswith("/"):
        return False
    return KnownNames.of([own]).names_route(path)


def _names_catalog_item(action: str, content: list[str], vocabulary: Vocabulary, endpoint: str) -> bool:
    """Whether the action names an item the catalog knows of the entry's tool: one of its arguments
    beside one of that argument's values or forms, one of its forms as said (``W + 5 digits``,
    ``W[0-9]{5}``), or a quote of one of its error templates."""
    lowered = compatible(action).lower()
    arguments = {a.name.lower(): a for a in vocabulary.arguments(endpoint)}
    said = set(content)
    for name, argument in arguments.items():
        if name not in said:
            continue
        shapes = {s.shape.lower() for s in argument.shapes} | {v.lower() for v in argument.enum}
        # a JSON type as an entry says it ("as an object", "as a number"): its word is the form
        shapes |= {
            w for s in argument.shapes if is_typed(s.shape) for w in _WORD.findall(spoken(s.shape).lower())
        }
        shapes -= _ARTICLES
        if said & (shapes - {name}):
            return True
    if any(form in lowered for form in vocabulary.form_texts):
        return True
    return bool(template_quotes(action, vocabulary, endpoint))


def template_quotes(text: str, vocabulary: Vocabulary, endpoint: str | None) -> list[str]:
    """The quotes in ``text`` (in its compatibility form) of one of the endpoint's error templates
    (a part of one, twelve characters or more): the tool's own constant text."""
    if not endpoint or not text:
        return []
    templates = [t.split(" | ", 2)[-1] for t in vocabulary.templates.get(endpoint, [])]
    if not templates:
        return []
    # a quote cut short ends in "…" (three dots once in its compatibility form)
    quoted = [q.rstrip("….").strip() for q in _QUOTE.findall(compatible(text))]
    return [q for q in quoted if len(q) >= 12 and any(q in t for t in templates)]
