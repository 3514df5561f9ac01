"""Value shapes: what an argument's value looks like, with the part that varies from call to call
masked, computed the same way in Python (:func:`value_shape`) and in the engine
(:func:`value_shape_sql`, Athena SQL that the embedded engine runs on DuckDB).

A shape keeps what tells a reader the value's *form* and drops what makes it one instance:

* JSON types other than strings are their type: ``<num>``, ``<bool>``, ``<object>``, ``<array>``,
  ``null``;
* a string is ``<uuid>``, ``<email>`` or ``<url>`` when it is one, ``<text>`` when it is prose
  (longer than :data:`MAX_SHAPED_CHARS` characters, or four spaces or more), and otherwise the
  string with every ASCII digit read as ``9``: ``W00042`` → ``W99999``, ``certificate_7815826`` →
  ``certificate_9999999``, ``2026-12-05`` → ``9999-99-99``, ``High`` → ``High``.

Words stay as they are: a value made of words is either one of a few constants (an enum: ``high``,
``gift_card``) or an instance (a city, a name), and the catalog tells the two apart by how many
distinct shapes an argument takes (:meth:`opslake.analysis.catalog.known.Vocabulary.is_enum`).

:func:`spoken` and :func:`pattern` say a shape the way an entry states it ("W + 5 digits",
``W[0-9]{5}``). Pure and stdlib only.
"""

from __future__ import annotations

import json
import re
from typing import Any

from opslake.query.sqltext import sql_string

MAX_SHAPED_CHARS = 40
#: The shapes that are no instance's form but a JSON type or a masked kind of string.
TYPE_SHAPES = ("<num>", "<bool>", "<object>", "<array>", "null", "<uuid>", "<email>", "<url>", "<text>")

_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_EMAIL = "^[^@ ]+@[^@ ]+[.][A-Za-z]{2,}$"
_URL = "^[A-Za-z][A-Za-z0-9+.-]*://"
_PROSE = "( [^ ]*){4}"  # four spaces or more: a sentence, not a value's form

_UUID_RE, _EMAIL_RE, _URL_RE, _PROSE_RE = (re.compile(p) for p in (_UUID, _EMAIL, _URL, _PROSE))


def string_shape(text: str) -> str:
    """The shape of a string value (see the module doc)."""
    if _UUID_RE.search(text):
        return "<uuid>"
    if _EMAIL_RE.search(text):
        return "<email>"
    if _URL_RE.search(text):
        return "<url>"
    if len(text) > MAX_SHAPED_CHARS or _PROSE_RE.search(text):
        return "<text>"
    return re.sub("[0-9]", "9", text)


def value_shape(value: Any) -> str:
    """The shape of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, int | float):
        return "<num>"
    if isinstance(value, dict):
        return "<object>"
    if isinstance(value, list):
        return "<array>"
    return string_shape(str(value))


def raw_shape(raw: str | None) -> str:
    """The shape of a value given as its JSON text (what the engine's ``json_format`` gives)."""
    if raw is None:
        return "null"
    try:
        return value_shape(json.loads(raw))
    except ValueError:
        return string_shape(raw)


def value_shape_sql(raw: str, text: str) -> str:
    """Athena SQL for :func:`raw_shape`: ``raw`` is the value's JSON text (``json_format`` of a
    ``json`` value), ``text`` the string itself for a JSON string (``json_extract_scalar(v, '$')``)."""
    string = (
        f"CASE WHEN regexp_like({text}, {sql_string(_UUID)}) THEN '<uuid>'"
        f" WHEN regexp_like({text}, {sql_string(_EMAIL)}) THEN '<email>'"
        f" WHEN regexp_like({text}, {sql_string(_URL)}) THEN '<url>'"
        f" WHEN length({text}) > {MAX_SHAPED_CHARS} OR regexp_like({text}, {sql_string(_PROSE)}) THEN '<text>'"
        f" ELSE regexp_replace({text}, '[0-9]', '9') END"
    )
    return (
        f"(CASE WHEN {raw} IS NULL OR {raw} = 'null' THEN 'null'"
        f" WHEN {raw} IN ('true', 'false') THEN '<bool>'"
        f" WHEN substr({raw}, 1, 1) = '{{' THEN '<object>'"
        f" WHEN substr({raw}, 1, 1) = '[' THEN '<array>'"
        f" WHEN substr({raw}, 1, 1) <> '\"' THEN '<num>'"
        f" ELSE {string} END)"
    )


#: How an entry says a type shape: in words, never as the ``<object>`` a reader (and the lesson
#: fence, which refuses markup) would take for a tag.
_SPOKEN_TYPES = {
    "<num>": "a number", "<bool>": "true or false", "<object>": "an object", "<array>": "an array",
    "<uuid>": "a UUID", "<email>": "an email address", "<url>": "a URL", "<text>": "text",
}  # fmt: skip


def is_typed(shape: str) -> bool:
    """Whether a shape is a JSON type or a masked kind (``<num>``, ``<uuid>`` …), not a form."""
    return shape in TYPE_SHAPES


def has_digits(shape: str) -> bool:
    return "9" in shape and not is_typed(shape)


def spoken(shape: str) -> str:
    """How an entry says a shape: a word value as it is (``high``), one run of digits after a
    prefix as "W + 5 digits" / "CUS- + 6 digits", digits alone as "6 digits", anything else as its
    shape (``9999-99-99``)."""
    if is_typed(shape):
        return _SPOKEN_TYPES.get(shape, shape)
    match = re.fullmatch(r"([^9]*?)(9+)", shape)
    if match and not re.search("[0-9]", match[1]):
        prefix, digits = match[1], len(match[2])
        return f"{prefix} + {digits} digits" if prefix else f"{digits} digits"
    return shape


def pattern(shape: str) -> str:
    """A regular expression of a shape's form: digit runs as ``[0-9]{n}``, the rest literal
    (``W99999`` → ``W[0-9]{5}``)."""
    out = []
    for literal, digits in re.findall(r"([^9]*)(9*)", shape):
        out.append(re.escape(literal).replace("\\-", "-").replace("\\_", "_"))
        if digits:
            out.append(f"[0-9]{{{len(digits)}}}")
    return "".join(out)
