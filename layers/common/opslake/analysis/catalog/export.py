"""The catalog as the analysts' table ``tool_catalog``: one row per tool, argument, shape, error
template and preceding tool, with its counts, its independent reporters under today's trust levels,
and whether the learning logic may name it (``known``). Pure."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from opslake.analysis.catalog.known import Vocabulary


def catalog_rows(vocabulary: Vocabulary, now: datetime) -> list[dict[str, Any]]:
    """Rows of ``tool_catalog`` (see :data:`opslake.lake.derived.TOOL_CATALOG_SCHEMA`)."""
    rows: list[dict[str, Any]] = []
    count = vocabulary.trust.count

    def row(endpoint: str, item: str, **fields: Any) -> None:
        rows.append(
            {"endpoint": endpoint, "item": item, "name": None, "shape": None, "detail": None, "calls": 0,
             "failures": 0, "reporters": 0, "declared": False, "known": False, "first_seen": None,
             "last_seen": None, "updated_at": now, **fields}
        )  # fmt: skip

    for tool in vocabulary.catalog.tools:
        known_tool = tool.endpoint in vocabulary.tools
        row(
            tool.endpoint, "tool", calls=tool.calls, failures=tool.failures, reporters=count(tool.witnesses),
            declared=tool.declared, known=known_tool, first_seen=tool.first_seen, last_seen=tool.last_seen,
        )  # fmt: skip
        known_arguments = {a.name for a in vocabulary.arguments(tool.endpoint)}
        for argument in tool.arguments:
            detail = ", ".join(
                f"{k}={v}" for k, v in (("type", argument.type), ("required", argument.required),
                                         ("pattern", argument.pattern), ("enum", "|".join(argument.enum)))
                if v not in (None, "", [])
            )  # fmt: skip
            row(
                tool.endpoint, "argument", name=argument.name, detail=detail or None, calls=argument.calls,
                failures=argument.failures, reporters=count(argument.witnesses), declared=argument.declared,
                known=argument.name in known_arguments,
            )  # fmt: skip
            for shape in argument.shapes:
                row(
                    tool.endpoint, "shape", name=argument.name, shape=shape.shape, calls=shape.calls,
                    failures=shape.failures, reporters=count(shape.witnesses),
                    known=argument.name in known_arguments and vocabulary.vouched(shape.witnesses),
                )  # fmt: skip
        for error in tool.errors:
            row(
                tool.endpoint, "error", name=error.signature_id, detail=error.template, failures=error.count,
                reporters=error.reporter_count, known=known_tool and error.reporter_count >= vocabulary.min_reporters,
            )  # fmt: skip
        for before in tool.preceded_by:
            row(
                tool.endpoint, "preceded_by", name=before.endpoint, calls=before.calls, failures=before.failures,
                reporters=count(before.witnesses), known=known_tool and vocabulary.vouched(before.witnesses),
            )  # fmt: skip
    return rows
