"""Generalization: an entry's text with the values of one instance (an id, a city, a request's
literals) replaced by what they stand for, so that a lesson holds for every agent, not one request.

What counts as an instance is read from data, never from a list in code: ids, uuids, dates and
quoted numbers by their shape, and word values by the tool catalog — a word that an argument takes
among many (:attr:`~opslake.analysis.catalog.known.Vocabulary.instances`: cities, names,
products) becomes ``{<argument>}`` ("staff job: assembler in Tucson, AZ" → "staff job: {role} in
{city}, {state}" where the catalog saw ``role``, ``city`` and ``state`` take many values), and a
request's string literals become ``{<field>}`` or ``{str}``.

:func:`generalize` returns the generalized text and what it replaced. A text it leaves unchanged
names no instance; the quality gate (:mod:`.quality`) refuses a text it would still change, and
judges the generalized text with the replacements counting for nothing (an entry that was only its
instance says nothing once generalized). Pure, besides the fence's normalization.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from opslake.analysis.fence import compatible, skeleton

#: What an id (letters and three digits or more: ``ord-1234``, ``W90519``) becomes outside a path
#: (inside one it becomes ``{id}``, a route parameter).
ID_PHRASE = "an id"
#: Every text :func:`generalize` writes in place of an instance that is not a ``{name}``
#: placeholder: the quality gate gives them no weight.
GENERALIZED_FORMS = (ID_PHRASE,)
#: A placeholder generalization writes (``{num}``, ``{city}``): what the gate gives no weight.
PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]{0,40}\}")
MAX_INSTANCE_WORDS = 5_000  # instance values looked for in one text (the catalog bounds them anyway)


@dataclass(frozen=True)
class Replaced:
    """One instance value :func:`generalize` replaced: its kind, the value, and what it became."""

    kind: str
    value: str
    placeholder: str


_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")
# other id shapes: 1-4 letters, an optional separator, three digits or more (all-9 digits is a shape
# like ``w-999``, written by the contrast rules to show a form, not an instance)
_ID = re.compile(r"(?P<q>['\"]?)\b(?P<id>[A-Za-z]{1,4}[-_]?(?P<digits>\d{3,}))\b(?P=q)")
_ID_IN_PATH = re.compile(r"(?<=/)[A-Za-z]{1,4}[-_]?(?P<digits>\d{3,})\b")
_NOT_IDS = frozenset(
    {"sha256", "sha384", "sha512", "sha224", "iso8601", "rfc3339", "rfc822", "utf16", "utf32"}
)
_QUOTED_NUMBER = re.compile(r"(?P<q>['\"])-?\d+(?:\.\d+)?(?P=q)")
# a request's literals: JSON string values and SQL string literals after a comparison
_JSON_VALUE = re.compile(
    r"\"(?P<key>[A-Za-z_][A-Za-z0-9_]{0,40})\"(?P<sep>\s*:\s*)\"(?P<value>[^\"{}\n]{1,200})\""
)
_SQL_LITERAL = re.compile(r"(?P<op>(?:=|<>|!=|\bi?like\b)\s*)'(?P<value>[^'{}\n]{1,200})'", re.I)
_SQL_IN = re.compile(r"\bin\s*\((?P<items>[^()\n]{1,400})\)", re.I)
_SQL_ITEM = re.compile(r"'[^'\n]{0,200}'")


@dataclass(frozen=True)
class _Index:
    """The instance values by their first word (lower case), and each value's argument by the
    value in lower case."""

    by_first_word: dict[str, list[str]]
    argument: dict[str, str]


def _index(instances: Mapping[str, str]) -> _Index:
    """The index of ``instances``, built once per mapping (the vocabulary's, cached with it): a text
    is matched only against the values whose first word it holds, so its cost follows the text,
    not the thousands of values a catalog may hold."""
    cached = _INDEXES.get(id(instances))
    if cached is not None and cached[0] is instances:
        return cached[1]
    by_first_word: dict[str, list[str]] = {}
    for value in sorted(instances, key=lambda v: (-len(v), v))[:MAX_INSTANCE_WORDS]:
        first = _WORDS.search(value.lower())
        if first:
            by_first_word.setdefault(first[0], []).append(value)
    index = _Index(by_first_word, {value.lower(): name for value, name in instances.items()})
    if len(_INDEXES) >= _INDEXES_KEPT:
        _INDEXES.pop(next(iter(_INDEXES)))
    _INDEXES[id(instances)] = (instances, index)  # the mapping is kept: its id is not reused
    return index


_WORDS = re.compile(r"\w+")
_INDEXES: dict[int, tuple[Mapping[str, str], _Index]] = {}
_INDEXES_KEPT = 8


def _instances_pattern(instances: Mapping[str, str], text: str) -> re.Pattern[str] | None:
    """One pattern for the instance values ``text`` may hold (longest first, whole words, case
    aside, never a part of a name such as ``tool:local-python-execute``); a value of two characters
    (a state code) only quoted and in its own case (``'AZ'``: "in", "or", ``'ok'`` stay words)."""
    index = _index(instances).by_first_word
    words = set()
    for word in _WORDS.findall(text.lower()):
        words |= {word, word[:-1], word[:-2]} if word.endswith("s") else {word}
    values = sorted({v for w in words for v in index.get(w, ())}, key=lambda v: (-len(v), v))
    long = [re.escape(v) for v in values if len(v) >= 3]
    codes = [re.escape(v) for v in values if len(v) < 3]
    alternatives = []
    if long:
        # whole words, not a part of a name joined by - . or : (tool:local-python-execute)
        alternatives.append(
            r"(?i:(?<![\w{])(?<!\w[-.:])(?:" + "|".join(long) + r")(?:s|es)?(?![\w}])(?![-.:]\w))"
        )
    if codes:
        alternatives.append(r"(?<=['\"])(?:" + "|".join(codes) + r")(?=['\"])")
    return re.compile("|".join(alternatives)) if alternatives else None


def generalize(
    text: str,
    instances: Mapping[str, str] | None = None,
    fields: frozenset[str] = frozenset(),
    keep: Collection[str] = (),
) -> tuple[str, list[Replaced]]:
    """``text`` (in its compatibility form) with instance values replaced, and what was replaced:
    uuids, dates, ids (in a path ``{id}``, else "an id"), quoted numbers, the word values in
    ``instances`` (value, lower case → the argument it is a value of: ``{argument}``) and a
    request's string literals (JSON values → ``{key}`` when the key is one of ``fields``, else
    ``{str}``; SQL → ``'{str}'``, or ``'{argument}'`` when the literal is an instance).
    ``keep``: passages left as they are, such as a quote of the tool's own error template (the
    analyzer masked its variable parts already: what is left is the tool's constant text, even
    where a word of it is also some argument's value)."""
    kept = sorted({k for k in (compatible(k) for k in keep) if k}, key=len, reverse=True)
    if kept:
        parts = re.split("(" + "|".join(re.escape(k) for k in kept) + ")", compatible(text))
        replaced_all: list[Replaced] = []
        for index, part in enumerate(parts):
            if index % 2 == 0 and part:
                parts[index], found = generalize(part, instances, fields)
                replaced_all += found
        return "".join(parts), replaced_all
    replaced: list[Replaced] = []
    instances = instances or {}
    lowered = _index(instances).argument if instances else {}

    def sub(
        pattern: re.Pattern[str], kind: str, text: str, make: str | Callable[[re.Match[str]], str]
    ) -> str:
        def one(match: re.Match[str]) -> str:
            out = make if isinstance(make, str) else make(match)
            if out != match[0]:
                replaced.append(Replaced(kind, match[0], out))
            return out

        return pattern.sub(one, text)

    def instance(match: re.Match[str]) -> str:
        word = match[0].lower()
        name = lowered.get(word) or lowered.get(re.sub(r"(?:es|s)$", "", word)) or "str"
        return f"{{{name}}}"

    out = compatible(text)
    out = sub(_UUID, "uuid", out, "{uuid}")
    out = sub(_DATE, "date", out, "{date}")
    out = sub(_ID_IN_PATH, "id", out, lambda m: m[0] if _is_shape(m[0], m["digits"]) else "{id}")
    out = sub(_ID, "id", out, lambda m: m[0] if _is_shape(m["id"], m["digits"]) else ID_PHRASE)
    out = sub(_QUOTED_NUMBER, "number", out, lambda m: f"{m['q']}{{num}}{m['q']}")
    pattern = _instances_pattern(instances, out)
    if pattern is not None:
        out = sub(pattern, "instance", out, instance)
    out = sub(_JSON_VALUE, "literal", out, lambda m: _json_value(m, fields))
    out = sub(_SQL_LITERAL, "literal", out, lambda m: f"{m['op']}'{{str}}'")
    out = sub(_SQL_IN, "literal", out, _sql_in)
    return out, replaced


def instance_values(
    text: str,
    instances: Mapping[str, str] | None = None,
    fields: frozenset[str] = frozenset(),
    keep: Collection[str] = (),
) -> list[Replaced]:
    """The instance values ``text`` holds, read as written and through the fence's skeleton (so a
    full-width or look-alike ``Ԝ90519`` or ``Tucsоn`` is one too); ``keep`` as :func:`generalize`."""
    _, as_written = generalize(text, instances, fields, keep)
    if as_written:
        return as_written
    _, as_seen = generalize(skeleton(text), instances, fields, [skeleton(k) for k in keep])
    return as_seen


def _is_shape(name: str, digits: str) -> bool:
    return set(digits) == {"9"} or name.lower() in _NOT_IDS


def _sql_in(match: re.Match[str]) -> str:
    items = _SQL_ITEM.sub(lambda m: m[0] if "{" in m[0] else "'{str}'", match["items"])
    return match[0].replace(match["items"], items)


def _json_value(match: re.Match[str], fields: frozenset[str]) -> str:
    key = match["key"]
    placeholder = f"{{{key}}}" if key in fields else "{str}"
    return f'"{key}"{match["sep"]}"{placeholder}"'
