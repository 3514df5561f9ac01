"""A call's arguments, read from its recorded input: the Python twin of the catalog query's
arguments (:mod:`.catalog_sql`), for the contrast's samples.

* A JSON object input (a tool call's arguments): its top-level keys and values.
* A gateway request ("METHOD /path?query body"): the body's top-level keys, the query's keys and
  the route's path parameters (``GET /worker/W00042`` on ``/worker/{id}`` → ``{"id": "W00042"}``).

Anything else has no arguments (``None``): free text, a JSON array, a truncated document.
"""

from __future__ import annotations

import json
import re
from typing import Any

from opslake.analysis.catalog.shapes import value_shape

REQUEST = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) /")


def _object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def call_arguments(input_summary: str | None, endpoint: str) -> dict[str, Any] | None:
    """The call's arguments by name (None when its input shows none)."""
    text = input_summary or ""
    if not REQUEST.match(text):
        return _object(text)
    _, _, rest = text.partition(" ")
    target, _, body = rest.partition(" ")
    path, _, query = target.partition("?")
    parsed = _object(body) if body.strip() else {}
    if parsed is None:
        return None  # a body that is no JSON object (cut short, hand-built): its arguments are unknown
    found: dict[str, Any] = dict(parsed)
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if key:
            found[key] = value
    route, segments = endpoint.split("/"), path.split("/")
    if endpoint.startswith("/") and len(route) == len(segments):
        for part, value in zip(route, segments, strict=True):
            if part.startswith("{") and part.endswith("}"):
                found[part[1:-1]] = value
    return found


def argument_shapes(input_summary: str | None, endpoint: str) -> dict[str, str] | None:
    """The shape of each argument's value (:func:`~.shapes.value_shape`), None without arguments."""
    found = call_arguments(input_summary, endpoint)
    return None if found is None else {name: value_shape(value) for name, value in found.items()}
