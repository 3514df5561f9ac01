"""The tool catalog's contract: what opslake has learned about every tool (endpoint) it sees in the
traffic, or that a team registered (table ``tool_catalog``, and ``catalog/current.json``, the object
the jobs read).

Per tool: its calls and failures, the independent reporters who called it (witnesses, as playbook
entries keep them), its arguments (the keys of a call's JSON arguments, a request body's fields,
query keys and path parameters) with the shapes their values take
(:mod:`opslake.analysis.catalog.shapes`), its error templates (the analyzer's signatures) and the
tools called before it in the same session. Counts accumulate over the consolidator's windows; every
list is bounded, so the catalog's size depends on the number of distinct tools, never on ops.

What a reader may be told about a tool comes from here: an item counts as known only when enough
independent reporters showed it (:mod:`opslake.analysis.catalog.known`) or a team declared it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from opslake.models.ops import MAX_WITNESS_CHARS, UtcMs

MAX_TOOLS = 300
MAX_ARGUMENTS = 30  # per tool, the most called first
MAX_SHAPES = 64  # per argument, the most called first (word values: an instance is known by them)
MAX_ERRORS = 20  # per tool, the most frequent first
MAX_PREDECESSORS = 12  # per tool
MAX_WITNESSES = 40  # per item (at most 5 per key, as entries keep them)
MAX_ENUM_VALUES = 20  # of a declared enum
MAX_NAME_CHARS = 200
MAX_SHAPE_CHARS = 200
MAX_DESCRIPTION_CHARS = 500

Count = Annotated[int, Field(ge=0)]
Witnesses = Annotated[
    list[Annotated[str, Field(max_length=MAX_WITNESS_CHARS)]], Field(max_length=MAX_WITNESSES)
]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ShapeStat(_Frozen):
    """One shape an argument's values take (``W99999``, ``high``, ``<num>``) and how often."""

    shape: Annotated[str, Field(max_length=MAX_SHAPE_CHARS)]
    calls: Count = 0
    failures: Count = 0
    witnesses: Witnesses = Field(default_factory=list)


class ArgumentStat(_Frozen):
    """One argument of a tool: how often calls carried it, and the shapes of its values.
    ``distinct_shapes`` is at least the number of shapes seen (the list keeps the most called)."""

    name: Name
    calls: Count = 0
    failures: Count = 0
    witnesses: Witnesses = Field(default_factory=list)
    shapes: Annotated[list[ShapeStat], Field(max_length=MAX_SHAPES)] = Field(default_factory=list)
    distinct_shapes: Count = 0
    declared: bool = False
    required: bool | None = None  # declared by the tool's schema
    enum: Annotated[
        list[Annotated[str, Field(max_length=MAX_SHAPE_CHARS)]], Field(max_length=MAX_ENUM_VALUES)
    ] = Field(default_factory=list)
    pattern: Annotated[str, Field(max_length=MAX_SHAPE_CHARS)] | None = None
    type: Annotated[str, Field(max_length=40)] | None = None  # declared JSON Schema type


class ErrorStat(_Frozen):
    """An error template of the tool: one of the analyzer's signatures on its endpoint."""

    signature_id: Name
    template: Annotated[str, Field(max_length=1_000)]
    count: Count = 0
    reporter_count: Count = 0


class Predecessor(_Frozen):
    """Another tool called earlier in the same session (same API key) as calls of this one."""

    endpoint: Name
    calls: Count = 0  # calls of this tool with that tool called before them
    failures: Count = 0  # of those, the failed ones
    witnesses: Witnesses = Field(default_factory=list)


class ToolStat(_Frozen):
    """Everything the catalog knows about one tool (an endpoint: ``tool:close_ticket``, ``/match``)."""

    endpoint: Name
    calls: Count = 0
    failures: Count = 0
    witnesses: Witnesses = Field(default_factory=list)
    first_seen: UtcMs | None = None
    last_seen: UtcMs | None = None
    arguments: Annotated[list[ArgumentStat], Field(max_length=MAX_ARGUMENTS)] = Field(default_factory=list)
    errors: Annotated[list[ErrorStat], Field(max_length=MAX_ERRORS)] = Field(default_factory=list)
    preceded_by: Annotated[list[Predecessor], Field(max_length=MAX_PREDECESSORS)] = Field(
        default_factory=list
    )
    declared: bool = False
    #: one of opslake's own routes: its calls were recorded by the API itself (``source`` gateway
    #: or mcp, which no client may claim), so it exists whoever called it
    route: bool = False
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS)] | None = None  # declared; data only

    def argument(self, name: str) -> ArgumentStat | None:
        return next((a for a in self.arguments if a.name == name), None)


class ToolCatalog(_Frozen):
    """The catalog: every tool seen or declared, the most called first."""

    updated_at: UtcMs | None = None
    tools: Annotated[list[ToolStat], Field(max_length=MAX_TOOLS)] = Field(default_factory=list)

    def tool(self, endpoint: str) -> ToolStat | None:
        return next((t for t in self.tools if t.endpoint == endpoint), None)
