"""Folding a window's tallies (:mod:`.catalog_sql`), the analyzer's signatures and the declared
schemas (:mod:`.declared`) into the catalog kept between runs. Pure: no I/O.

Counts add up run after run (each window is folded once: the consolidator commits the catalog with
its watermark); witnesses are unioned and capped per key first
(:func:`~opslake.analysis.reporters.cap_witnesses`); every list keeps its most called items
(declared ones first), so the catalog stays bounded whatever the traffic. Error templates are the
analyzer's signatures as they stand (already counted over time), replaced at each fold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opslake.analysis.reporters import RUNTIME_MAX_REPORTERS, cap_witnesses
from opslake.models.catalog import (
    MAX_ARGUMENTS,
    MAX_ERRORS,
    MAX_PREDECESSORS,
    MAX_SHAPES,
    MAX_TOOLS,
    MAX_WITNESSES,
    ArgumentStat,
    ErrorStat,
    Predecessor,
    ShapeStat,
    ToolCatalog,
    ToolStat,
)


def _witnesses(*groups: Iterable[str]) -> list[str]:
    return cap_witnesses([w for g in groups for w in g], per_key=RUNTIME_MAX_REPORTERS, total=MAX_WITNESSES)


def _parse_witnesses(value: Any) -> list[str]:
    if value is None:
        return []
    found = json.loads(value) if isinstance(value, str) else value
    return [str(w) for w in found if w]


@dataclass
class _Shape:
    calls: int = 0
    failures: int = 0
    witnesses: list[str] = field(default_factory=list)


@dataclass
class _Argument:
    calls: int = 0
    failures: int = 0
    witnesses: list[str] = field(default_factory=list)
    shapes: dict[str, _Shape] = field(default_factory=dict)
    distinct_shapes: int = 0
    declared: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Tool:
    calls: int = 0
    failures: int = 0
    witnesses: list[str] = field(default_factory=list)
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    arguments: dict[str, _Argument] = field(default_factory=dict)
    preceded_by: dict[str, _Shape] = field(default_factory=dict)
    errors: list[ErrorStat] = field(default_factory=list)
    declared: bool = False
    description: str | None = None
    route: bool = False


def _utc(value: object) -> datetime | None:
    """A time from the engine as UTC (Athena's ``timestamp`` has no zone: it is UTC)."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return min((t for t in (a, b) if t is not None), default=None)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return max((t for t in (a, b) if t is not None), default=None)


def _thaw(catalog: ToolCatalog) -> dict[str, _Tool]:
    tools: dict[str, _Tool] = {}
    for tool in catalog.tools:
        arguments = {
            a.name: _Argument(
                a.calls, a.failures, list(a.witnesses),
                {s.shape: _Shape(s.calls, s.failures, list(s.witnesses)) for s in a.shapes},
                a.distinct_shapes,
                a.model_dump(include={"declared", "required", "enum", "pattern", "type"}) if a.declared else {},
            )
            for a in tool.arguments
        }  # fmt: skip
        tools[tool.endpoint] = _Tool(
            tool.calls, tool.failures, list(tool.witnesses), tool.first_seen, tool.last_seen, arguments,
            {p.endpoint: _Shape(p.calls, p.failures, list(p.witnesses)) for p in tool.preceded_by},
            list(tool.errors), tool.declared, tool.description, tool.route,
        )  # fmt: skip
    return tools


def _add(stat: _Shape | _Argument | _Tool, row: Mapping[str, Any]) -> None:
    stat.calls += int(row.get("calls") or 0)
    stat.failures += int(row.get("failures") or 0)
    stat.witnesses = _witnesses(stat.witnesses, _parse_witnesses(row.get("witnesses")))


def _keys(witnesses: Iterable[str]) -> int:
    """How many keys the witnesses are of, up to two (a runtime key's witness is ``key/agent``,
    with a ``/`` in the key escaped)."""
    return min(2, len({w.split("/", 1)[0] for w in witnesses}))


def _order(name: str, item: _Shape | _Argument | _Tool) -> tuple[bool, bool, int, int, str]:
    """Declared first, then opslake's routes, then what two keys showed, then the most called: one
    key sending hundreds of names crowds out none of what others showed."""
    declared = bool(getattr(item, "declared", False))
    return (not declared, not getattr(item, "route", False), -_keys(item.witnesses), -item.calls, name)


def _rank(items: Mapping[str, _Shape | _Argument | _Tool]) -> list[str]:
    """Names in the order the catalog keeps them (:func:`_order`); never one that nobody calls
    any more and no team declares (a withdrawn declaration)."""
    kept = [n for n, item in items.items() if item.calls or getattr(item, "declared", False)]
    return sorted(kept, key=lambda n: _order(n, items[n]))


def _freeze(tools: dict[str, _Tool], now: datetime) -> ToolCatalog:
    frozen = []
    for endpoint in _rank(tools)[:MAX_TOOLS]:
        tool = tools[endpoint]
        arguments = []
        for name in _rank(tool.arguments)[:MAX_ARGUMENTS]:
            a = tool.arguments[name]
            shapes = [(n, a.shapes[n]) for n in _rank(a.shapes)[:MAX_SHAPES]]
            arguments.append(
                ArgumentStat(
                    name=name, calls=a.calls, failures=a.failures, witnesses=a.witnesses,
                    shapes=[ShapeStat(shape=s, calls=v.calls, failures=v.failures, witnesses=v.witnesses)
                            for s, v in shapes],
                    distinct_shapes=max(a.distinct_shapes, len(a.shapes)), **a.declared,
                )
            )  # fmt: skip
        preceded = [(n, tool.preceded_by[n]) for n in _rank(tool.preceded_by)[:MAX_PREDECESSORS]]
        frozen.append(
            ToolStat(
                endpoint=endpoint, calls=tool.calls, failures=tool.failures, witnesses=tool.witnesses,
                first_seen=tool.first_seen, last_seen=tool.last_seen, arguments=arguments,
                errors=tool.errors[:MAX_ERRORS],
                preceded_by=[Predecessor(endpoint=e, calls=p.calls, failures=p.failures, witnesses=p.witnesses)
                             for e, p in preceded],
                declared=tool.declared, description=tool.description, route=tool.route,
            )
        )  # fmt: skip
    return ToolCatalog(updated_at=now, tools=frozen)


def fold(
    catalog: ToolCatalog,
    rows: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    signatures: Sequence[Mapping[str, Any]] | None = None,
    declared: Sequence[ToolStat] | None = None,
) -> ToolCatalog:
    """The catalog with a window's rows (:func:`~.catalog_sql.catalog_window_sql`) added, the
    error templates taken from ``signatures`` (rows of :func:`~.catalog_sql.signatures_sql`;
    None keeps the ones known) and the ``declared`` tools' schemas laid over what was seen: the
    registered schemas as they stand now (one withdrawn or corrected is no longer declared; None,
    when they could not be read, keeps the declarations known)."""
    tools = _thaw(catalog)
    for row in rows:
        endpoint, kind, name = str(row["endpoint"]), row["kind"], row.get("name")
        tool = tools.setdefault(endpoint, _Tool())
        if kind == "tool":
            _add(tool, row)
            tool.first_seen = _earliest(tool.first_seen, _utc(row.get("first_seen")))
            tool.last_seen = _latest(tool.last_seen, _utc(row.get("last_seen")))
            tool.route = tool.route or bool(row.get("by_server"))
        elif kind == "argument" and name:
            _add(tool.arguments.setdefault(str(name), _Argument()), row)
        elif kind == "shape" and name and row.get("shape") is not None:
            argument = tool.arguments.setdefault(str(name), _Argument())
            _add(argument.shapes.setdefault(str(row["shape"]), _Shape()), row)
            argument.distinct_shapes = max(argument.distinct_shapes, int(row.get("distinct_shapes") or 0))
        elif kind == "preceded_by" and name:
            _add(tool.preceded_by.setdefault(str(name), _Shape()), row)
    if signatures is not None:
        by_endpoint: dict[str, list[ErrorStat]] = {}
        for sig in signatures:
            by_endpoint.setdefault(str(sig["endpoint"]), []).append(
                ErrorStat(
                    signature_id=str(sig["signature_id"]), template=str(sig["template"])[:1_000],
                    count=int(sig.get("count") or 0), reporter_count=int(sig.get("reporter_count") or 0),
                )
            )  # fmt: skip
        for endpoint, tool in tools.items():
            tool.errors = sorted(by_endpoint.get(endpoint, []), key=lambda e: (-e.count, e.signature_id))
    if declared is None:
        return _freeze(tools, now)
    for tool in tools.values():
        tool.declared, tool.description = False, None
        for argument in tool.arguments.values():
            argument.declared = {}
    for spec in declared:
        tool = tools.setdefault(spec.endpoint, _Tool())
        tool.declared, tool.description = True, spec.description
        for arg in spec.arguments:
            argument = tool.arguments.setdefault(arg.name, _Argument())
            argument.declared = arg.model_dump(include={"required", "enum", "pattern", "type"}) | {
                "declared": True
            }
    return _freeze(tools, now)
