"""Turn pydantic validation errors into messages a client (or an agent) can act on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

_FRIENDLY = {
    "extra_forbidden": "unknown field (not part of the op record contract; put extra data in 'attributes')",
    "missing": "field required",
}


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """``[{"field": "attributes.count", "message": "..."}]`` for each problem, in order."""
    problems = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"]) or "(op)"
        message = _FRIENDLY.get(err["type"], str(err["msg"]))
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        problems.append({"field": field, "message": message})
    return problems


def describe_problems(problems: list[dict[str, Any]]) -> str:
    """One line: ``duration_ms: Input should be a valid number; success: field required``."""
    return "; ".join(
        f"{p['field']}: {p['message']}" if p["field"] != "(op)" else p["message"] for p in problems
    )
