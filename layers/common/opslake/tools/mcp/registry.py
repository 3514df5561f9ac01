"""The MCP tools: one declarative entry per gateway tool, saying what an agent reads in
``tools/list`` and how a ``tools/call`` becomes the REST request the tool's own route answers.

Adding a tool is adding one :class:`ToolSpec` to :data:`TOOLS` (and its handler's IAM to
``McpFunction`` in template.yaml): the input schema is the ``model_json_schema()`` of the pydantic
model the REST route validates (named ``"module:Class"``, imported on first ``tools/list``, so
``initialize`` stays cheap), and the call is dispatched to ``functions/gateway/<module>.py``'s
resolver, which observes it as it observes the REST call.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

#: How a tool's arguments reach its route: as the JSON body, as the route's path parameters (each
#: ``{name}`` from the argument of that name), as query-string parameters, or not at all.
ArgumentsAs = Literal["body", "path", "query", "none"]

_PATH_PARAMETER = re.compile(r"\{([^}]+)\}")


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool and the REST route behind it."""

    name: str
    description: str
    method: Literal["GET", "POST"]
    #: The API Gateway resource (the op record's ``endpoint``), e.g. ``/worker/{id}``.
    route: str
    #: The handler module under functions/gateway/ whose resolver answers the route.
    module: str
    #: The pydantic model the route validates, as ``"module:Class"``.
    input_model: str
    arguments_as: ArgumentsAs = "body"

    @property
    def path_parameters(self) -> tuple[str, ...]:
        return tuple(_PATH_PARAMETER.findall(self.route))

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the route's own model (cached: schemas are built once per container)."""
        return _schema(self.input_model)

    def listed(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it (no ``outputSchema``: the client would check
        ``structuredContent``, the REST answer, against it)."""
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema()}


@cache
def _schema(reference: str) -> dict[str, Any]:
    module, _, name = reference.partition(":")
    model = getattr(importlib.import_module(module), name)
    schema: dict[str, Any] = model.model_json_schema()
    return schema


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="sql",
        description=(
            "Run one read-only SQL query (Athena/Trino dialect: a single SELECT or WITH) over the "
            "allowlisted tables and get at most `limit` rows. Describe a table first (tool `table`): "
            "never guess column names. A refused or failed query says why."
        ),
        method="POST",
        route="/sql",
        module="sql",
        input_model="opslake.models.tools:SqlRequest",
    ),
    ToolSpec(
        name="match",
        description=(
            "Find workers in a role and a place (city and/or state), ranked by how well their "
            "skills and certifications cover a free-text need; filters on availability, rating."
        ),
        method="POST",
        route="/match",
        module="match",
        input_model="opslake.tools.datasets:MatchRequest",
    ),
    ToolSpec(
        name="search",
        description=(
            "Ranked full-text search (BM25) over the dataset tables' text and the active playbook "
            "entries. Each result names its source (table and row key, or entry id) and the terms "
            "it matched."
        ),
        method="POST",
        route="/search",
        module="search",
        input_model="opslake.tools.search:SearchRequest",
    ),
    ToolSpec(
        name="ask",
        description=(
            "Ask a question about the lake's tables in plain words: a model writes one SQL query from "
            "the real catalog, it runs like `sql`, and the answer comes from its rows, with its "
            "sources (the SQL, the rows, the tables). An answer stating a number or name the rows do "
            "not hold is refused (the rows are still returned); a question the data cannot answer "
            "says so, with what was tried."
        ),
        method="POST",
        route="/ask",
        module="ask",
        input_model="opslake.tools.ask:AskRequest",
    ),
    ToolSpec(
        name="log",
        description=(
            "Write down what you tried and how it went (success, failure or a lesson): it becomes "
            "an op record the analyzer learns from, and the answer carries its op_id. Log a "
            "failure's cause and a workaround you found."
        ),
        method="POST",
        route="/log",
        module="log",
        input_model="opslake.models.tools:LogRequest",
    ),
    ToolSpec(
        name="tables",
        description="List the tables you may query with `sql`, with their columns and partition keys.",
        method="GET",
        route="/tables",
        module="tables",
        input_model="opslake.models.tools:NoArgs",
        arguments_as="none",
    ),
    ToolSpec(
        name="table",
        description="Describe one table: its columns with types and its partition keys.",
        method="GET",
        route="/tables/{name}",
        module="tables",
        input_model="opslake.models.tools:TableArgs",
        arguments_as="path",
    ),
    ToolSpec(
        name="worker",
        description="One worker of the staffing dataset by id (W and five digits), with their placements count.",
        method="GET",
        route="/worker/{id}",
        module="worker",
        input_model="opslake.models.tools:WorkerArgs",
        arguments_as="path",
    ),
    ToolSpec(
        name="playbooks",
        description=(
            "The active playbook entries (lessons distilled from agents' past calls) that apply to "
            "an endpoint, a task class or words, most confident first. Read them before a task."
        ),
        method="GET",
        route="/playbooks",
        module="playbooks",
        input_model="opslake.models.tools:PlaybooksQuery",
        arguments_as="query",
    ),
    ToolSpec(
        name="model",
        description=(
            "Which LLM the analyzer diagnoses failures with: configured, reachable, its circuit "
            "breaker and token usage (or the heuristic diagnoser when there is none)."
        ),
        method="GET",
        route="/model",
        module="model",
        input_model="opslake.models.tools:NoArgs",
        arguments_as="none",
    ),
)

#: The tools by name.
BY_NAME: dict[str, ToolSpec] = {tool.name: tool for tool in TOOLS}
assert len(BY_NAME) == len(TOOLS), "two tools share a name"
