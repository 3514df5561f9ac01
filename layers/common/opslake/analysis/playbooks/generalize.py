"""Generalization: an entry's text with the values of one instance (an id, a city, a request's
literals) replaced by what they stand for, so that a lesson holds for every agent, not one request.

:func:`generalize` returns the generalized text and what it replaced. A text it leaves unchanged
names no instance; the quality gate (:mod:`.quality`) refuses a text it would still change, and
judges the generalized text with the replacements counting for nothing (an entry that was only its
instance says nothing once generalized). Pure and stdlib only, besides the fence's normalization
and the staffing sample's vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from opslake.analysis.fence import TOOL_FIELDS, compatible, skeleton
from opslake.datasets.staffing import _CLIENTS, CITIES, ROLES

#: What a worker id becomes outside a path (inside one it becomes ``{id}``, a route parameter).
WORKER_ID_PHRASE = "a worker id (W + five digits)"
#: What another id (letters and three digits or more: ``ord-1234``, ``w90519``) becomes.
ID_PHRASE = "an id"
#: Every text :func:`generalize` writes in place of an instance: the quality gate gives them no weight.
GENERALIZED_FORMS = (
    WORKER_ID_PHRASE, ID_PHRASE, "{id}", "{uuid}", "{date}", "{num}", "{str}", "{role}", "{city}",
    "{state}", "{client}", *(f"{{{f}}}" for f in TOOL_FIELDS),
)  # fmt: skip


@dataclass(frozen=True)
class Replaced:
    """One instance value :func:`generalize` replaced: its kind, the value, and what it became."""

    kind: str
    value: str
    placeholder: str


_STATES = frozenset(state for _, state in CITIES)
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")
# a worker id inside a path is a route parameter; with its noun and quotes it becomes the phrase
_WORKER_IN_PATH = re.compile(r"(?<=/)W\d{5}\b")
_WORKER_ID = re.compile(r"(?:\b(?P<noun>[Ww]orker(?:\s+[Ii][Dd])?s?)\s+)?(?P<q>['\"]?)\bW\d{5}\b(?P=q)")
# other id shapes: 1-4 letters, an optional separator, three digits or more (all-9 digits is a shape
# like ``w-999``, written by the contrast rules to show a form, not an instance)
_ID = re.compile(r"(?P<q>['\"]?)\b(?P<id>[A-Za-z]{1,4}[-_]?(?P<digits>\d{3,}))\b(?P=q)")
_ID_IN_PATH = re.compile(r"(?<=/)[A-Za-z]{1,4}[-_]?(?P<digits>\d{3,})\b")
_NOT_IDS = frozenset(
    {"sha256", "sha384", "sha512", "sha224", "iso8601", "rfc3339", "rfc822", "utf16", "utf32"}
)
_QUOTED_NUMBER = re.compile(r"(?P<q>['\"])-?\d+(?:\.\d+)?(?P=q)")


def _alternation(names: list[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


_CLIENT = re.compile(rf"\b(?:{_alternation(list(_CLIENTS))})\b", re.I)
_CITY_STATE = re.compile(
    rf"\b(?P<city>{_alternation([c for c, _ in CITIES])})\s*,\s*(?P<state>[A-Z]{{2}})\b", re.I
)
_CITY = re.compile(rf"\b(?:{_alternation([c for c, _ in CITIES])})\b", re.I)
_ROLE = re.compile(rf"\b(?:{_alternation([r.name for r in ROLES])})(?:s|es)?\b", re.I)
_QUOTED_STATE = re.compile(r"(?P<q>['\"])(?P<state>[A-Z]{2})(?P=q)")  # upper case: 'ok' is no state
# a request's literals: JSON string values and SQL string literals after a comparison
_JSON_VALUE = re.compile(
    r"\"(?P<key>[A-Za-z_][A-Za-z0-9_]{0,40})\"(?P<sep>\s*:\s*)\"(?P<value>[^\"{}\n]{1,200})\""
)
_SQL_LITERAL = re.compile(r"(?P<op>(?:=|<>|!=|\bi?like\b)\s*)'(?P<value>[^'{}\n]{1,200})'", re.I)
_SQL_IN = re.compile(r"\bin\s*\((?P<items>[^()\n]{1,400})\)", re.I)
_SQL_ITEM = re.compile(r"'[^'\n]{0,200}'")


def generalize(text: str) -> tuple[str, list[Replaced]]:
    """``text`` (in its compatibility form) with instance values replaced, and what was replaced:
    uuids, dates, worker ids (``W`` + five digits) and other id shapes, quoted numbers, the staffing
    vocabulary (clients, cities with their state, roles: ``{client}``, ``{city}, {state}``,
    ``{role}``), and a request's string literals (JSON values → ``{field}``, SQL → ``'{str}'``)."""
    replaced: list[Replaced] = []

    def sub(
        pattern: re.Pattern[str], kind: str, text: str, make: str | Callable[[re.Match[str]], str]
    ) -> str:
        def one(match: re.Match[str]) -> str:
            out = make if isinstance(make, str) else make(match)
            if out != match[0]:
                replaced.append(Replaced(kind, match[0], out))
            return out

        return pattern.sub(one, text)

    out = compatible(text)
    out = sub(_UUID, "uuid", out, "{uuid}")
    out = sub(_DATE, "date", out, "{date}")
    out = sub(_WORKER_IN_PATH, "worker_id", out, "{id}")
    out = sub(_WORKER_ID, "worker_id", out, _worker_phrase)
    out = sub(_ID_IN_PATH, "id", out, lambda m: m[0] if _is_shape(m[0], m["digits"]) else "{id}")
    out = sub(_ID, "id", out, lambda m: m[0] if _is_shape(m["id"], m["digits"]) else ID_PHRASE)
    out = sub(_QUOTED_NUMBER, "number", out, lambda m: f"{m['q']}{{num}}{m['q']}")
    out = sub(_CLIENT, "client", out, "{client}")
    out = sub(_CITY_STATE, "city", out, lambda m: "{city}, {state}" if m["state"] in _STATES else m[0])
    out = sub(_CITY, "city", out, "{city}")
    out = sub(_QUOTED_STATE, "state", out, _quoted_state)
    out = sub(_ROLE, "role", out, "{role}")
    out = sub(_JSON_VALUE, "literal", out, _json_value)
    out = sub(_SQL_LITERAL, "literal", out, lambda m: f"{m['op']}'{{str}}'")
    out = sub(_SQL_IN, "literal", out, _sql_in)
    return out, replaced


def instance_values(text: str) -> list[Replaced]:
    """The instance values ``text`` holds, read as written and through the fence's skeleton (so a
    full-width or look-alike ``Ԝ90519`` or ``Tucsоn`` is one too)."""
    _, as_written = generalize(text)
    if as_written:
        return as_written
    _, as_seen = generalize(skeleton(text))
    return as_seen


def _is_shape(name: str, digits: str) -> bool:
    return set(digits) == {"9"} or name.lower() in _NOT_IDS


def _worker_phrase(match: re.Match[str]) -> str:
    noun = match["noun"]
    return (
        WORKER_ID_PHRASE[0].upper() + WORKER_ID_PHRASE[1:] if noun and noun[0].isupper() else WORKER_ID_PHRASE
    )


def _quoted_state(match: re.Match[str]) -> str:
    return f"{match['q']}{{state}}{match['q']}" if match["state"].upper() in _STATES else match[0]


def _sql_in(match: re.Match[str]) -> str:
    items = _SQL_ITEM.sub(lambda m: m[0] if "{" in m[0] else "'{str}'", match["items"])
    return match[0].replace(match["items"], items)


def _json_value(match: re.Match[str]) -> str:
    key = match["key"]
    placeholder = f"{{{key}}}" if key in TOOL_FIELDS else "{str}"
    return f'"{key}"{match["sep"]}"{placeholder}"'
