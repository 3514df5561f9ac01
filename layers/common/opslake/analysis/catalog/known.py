"""What an entry may name, read from data at run time: the tool catalog (what two or more
independent reporters' calls showed, or a team declared) and opslake's own tables and columns (from
the Glue catalog). No list in code restates a sample dataset or the routes.

:class:`Vocabulary` is what the learning jobs pass to the contrasts, the drafting, the lesson fence
and the quality gate: :meth:`Vocabulary.known_names` gives the fence its validated parts (tools and
routes, arguments, tables and columns, error codes), and the catalog's details (value shapes,
enums, instances, error templates, preceding tools) answer the gate's question "does this text name
something a reader can use?".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from opslake.analysis.catalog.shapes import has_digits, is_typed, pattern, spoken
from opslake.analysis.fence import KnownNames, default_known, endpoint_refusal
from opslake.analysis.reporters import ReporterTrust
from opslake.models.catalog import ArgumentStat, ShapeStat, ToolCatalog, ToolStat

#: An argument with at most this many distinct word shapes is an enum (its values are constants
#: worth naming); with more, its word values are instances (cities, names) a lesson must not name.
MAX_ENUM_SHAPES = 8
#: A shape must be this share of an argument's calls at least to be called its form.
MIN_FORM_SHARE = 0.05


@dataclass(frozen=True)
class Vocabulary:
    """The catalog and the tables, with who counts (``trust``) and how many independent reporters
    make an item known (``min_reporters``; a declared item is known without traffic)."""

    catalog: ToolCatalog = field(default_factory=ToolCatalog)
    tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    trust: ReporterTrust = field(default_factory=ReporterTrust)
    min_reporters: int = 2
    #: Endpoints known besides the catalog's (e.g. the routes of the local stack's template.yaml)
    routes: tuple[str, ...] = ()

    def vouched(self, witnesses: Iterable[str], declared: bool = False) -> bool:
        return declared or self.trust.count(list(witnesses)) >= self.min_reporters

    @cached_property
    def tools(self) -> dict[str, ToolStat]:
        """The tools known: declared, one of opslake's own routes (the API recorded its calls), or
        called by enough independent reporters, whose endpoint may be named
        (:func:`~opslake.analysis.fence.endpoint_refusal`)."""
        return {
            t.endpoint: t
            for t in self.catalog.tools
            if self.vouched(t.witnesses, t.declared or t.route) and endpoint_refusal(t.endpoint) is None
        }

    def tool(self, endpoint: str) -> ToolStat | None:
        return self.tools.get(endpoint)

    def arguments(self, endpoint: str) -> list[ArgumentStat]:
        """The known arguments of a known tool (declared, or sent by enough reporters), whose names
        are plain identifiers."""
        tool = self.tool(endpoint)
        if tool is None:
            return []
        return [
            a
            for a in tool.arguments
            if self.vouched(a.witnesses, a.declared) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", a.name)
        ]

    def argument(self, endpoint: str, name: str) -> ArgumentStat | None:
        return next((a for a in self.arguments(endpoint) if a.name == name), None)

    def forms(self, endpoint: str, name: str) -> list[str]:
        """The shapes an argument's values take in calls that count (enough reporters, at least
        :data:`MIN_FORM_SHARE` of its calls, and mostly successful ones: a shape that fails is no
        form to state), the most called first."""
        argument = self.argument(endpoint, name)
        if argument is None or not argument.calls:
            return []
        return [
            s.shape
            for s in argument.shapes
            if self.vouched(s.witnesses)
            and s.calls >= MIN_FORM_SHARE * argument.calls
            and s.failures * 2 < s.calls
        ]

    def shapes(self, argument: ArgumentStat) -> list[ShapeStat]:
        """An argument's value shapes that enough reporters sent (one key cannot add values)."""
        return [s for s in argument.shapes if self.vouched(s.witnesses)]

    def is_enum(self, argument: ArgumentStat) -> bool:
        """Whether an argument's values are a few constants: a declared enum, or at most
        :data:`MAX_ENUM_SHAPES` word shapes, counting those enough reporters sent (one key sending
        many values cannot turn an enum's constants into instances)."""
        if argument.enum:
            return True
        shapes = self.shapes(argument)
        words = [s for s in shapes if not is_typed(s.shape) and not has_digits(s.shape)]
        return bool(words) and len(shapes) <= MAX_ENUM_SHAPES and len(words) == len(shapes)

    @cached_property
    def instances(self) -> dict[str, str]:
        """Word values of known arguments that take many (cities, names, products), as enough
        reporters sent them, each with the argument it is a value of: an entry naming one is tied
        to that instance. A known name (a tool, an argument) is never an instance."""
        names = {n.lower() for n in (*self.tools, *self.fields)}
        found: dict[str, str] = {}
        for endpoint in self.tools:
            for argument in self.arguments(endpoint):
                if self.is_enum(argument):
                    continue
                for s in self.shapes(argument):
                    value = s.shape.strip()
                    typed = is_typed(value) or has_digits(value)
                    if not typed and len(value) >= 2 and value.lower() not in names:
                        found.setdefault(value, argument.name)
        return found

    @cached_property
    def fields(self) -> frozenset[str]:
        """Every known argument's name."""
        return frozenset(a.name for endpoint in self.tools for a in self.arguments(endpoint))

    @cached_property
    def enum_values(self) -> frozenset[str]:
        """Constants of known enum arguments (lower case): naming one names a catalog item."""
        found: set[str] = set()
        for endpoint in self.tools:
            for argument in self.arguments(endpoint):
                if self.is_enum(argument):
                    found |= {v.lower() for v in argument.enum}
                    found |= {s.shape.lower() for s in argument.shapes if self.vouched(s.witnesses)}
        return frozenset(found)

    @cached_property
    def form_texts(self) -> frozenset[str]:
        """How the known forms with digits are said (``W + 5 digits``, ``W[0-9]{5}``), lower case."""
        found: set[str] = set()
        for endpoint in self.tools:
            for argument in self.arguments(endpoint):
                for shape in self.forms(endpoint, argument.name):
                    if has_digits(shape):
                        found |= {spoken(shape).lower(), pattern(shape).lower()}
                if argument.pattern:
                    found.add(argument.pattern.strip("^$").lower())
        return frozenset(found)

    @cached_property
    def templates(self) -> dict[str, list[str]]:
        """Each known tool's error templates (the analyzer's signatures, from enough reporters)."""
        return {
            endpoint: [e.template for e in tool.errors if e.reporter_count >= self.min_reporters]
            for endpoint, tool in self.tools.items()
        }

    @cached_property
    def known_names(self) -> KnownNames:
        """The fence's validated parts: opslake's fixed names (error codes, placeholders), the known
        tools and routes, their arguments, and the tables with their columns."""
        arguments = [a.name for endpoint in self.tools for a in self.arguments(endpoint)]
        columns = [c for cols in self.tables.values() for c in cols]
        return default_known().extended(
            [*self.tools, *self.routes], [*arguments, *self.tables, *columns], tables=self.tables
        )


def vocabulary_of(
    catalog: ToolCatalog | None = None,
    tables: Mapping[str, Iterable[str]] | None = None,
    *,
    trust: ReporterTrust | None = None,
    min_reporters: int = 2,
    routes: Iterable[str] = (),
) -> Vocabulary:
    """A :class:`Vocabulary` (tables' columns as tuples, lower case)."""
    return Vocabulary(
        catalog=catalog or ToolCatalog(),
        tables={t.lower(): tuple(c.lower() for c in cols) for t, cols in (tables or {}).items()},
        trust=trust or ReporterTrust(),
        min_reporters=min_reporters,
        routes=tuple(routes),
    )
