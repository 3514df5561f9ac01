"""The inputs of the gateway tools whose routes validate them in the handler: one source of truth for
the REST route (which validates the body, query or path with them) and for the MCP tool's
``inputSchema`` (``model_json_schema()`` of the same class, see :mod:`opslake.tools.mcp`).

They live here, not in the handler modules, so that ``tools/list`` can describe every tool without
importing any handler (and its clients, engine and guard). ``POST /match`` and ``POST /search``
keep theirs next to their logic (:mod:`opslake.tools.datasets`, :mod:`opslake.tools.search`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from opslake.models.ops import MAX_ID_CHARS, MAX_SUMMARY_CHARS, Id

#: ``GET /worker/{id}``'s rule (:data:`opslake.tools.datasets.WORKER_ID`; a test keeps them equal).
WORKER_ID_PATTERN = r"^W[0-9]{5}$"
MAX_LOG_TEXT_CHARS = MAX_SUMMARY_CHARS  # so the approach and the context fit their summaries uncut


class SqlRequest(BaseModel):
    """The body of ``POST /sql``."""

    model_config = ConfigDict(extra="forbid", strict=False)

    sql: Annotated[str, Field(min_length=1, max_length=20_000, description="one Athena SELECT/WITH query")]
    limit: Annotated[int, Field(ge=1, le=10_000, description="most rows to return")] = 1_000


class LogRequest(BaseModel):
    """The body of ``POST /log``."""

    model_config = ConfigDict(extra="forbid")

    operation: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, description="what was attempted")]
    approach: Annotated[
        str, Field(min_length=1, max_length=MAX_LOG_TEXT_CHARS, description="how it was done")
    ]
    result: Literal["success", "failure", "lesson"]
    context: Annotated[str, Field(max_length=MAX_LOG_TEXT_CHARS)] | None = None
    task_class: Id | None = None
    endpoint: Id | None = Field(default=None, description="the tool or route the outcome is about")
    op_id: Id | None = Field(default=None, description="idempotency key; a ULID is assigned when missing")


Text = Annotated[str | None, Field(min_length=1, max_length=200)]


class PlaybooksQuery(BaseModel):
    """The query string of ``GET /playbooks``."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Text = None
    task_class: Text = None
    q: Text = Field(default=None, description="words that must all appear in the trigger or action")
    entry_id: Text = Field(default=None, description="only this entry (when it is active)")
    limit: Annotated[int, Field(ge=1, le=50)] = 10
    format: Literal["json", "md"] | None = Field(
        default=None,
        description="md: the entries as Markdown, grouped by endpoint and trigger (default: JSON, or "
        "Markdown when the Accept header prefers text/markdown)",
    )


class WorkerArgs(BaseModel):
    """The path parameter of ``GET /worker/{id}`` (the route answers 400 for anything else)."""

    id: Annotated[
        str, Field(pattern=WORKER_ID_PATTERN, description="a worker id: W and five digits, e.g. W00042")
    ]


class TableArgs(BaseModel):
    """The path parameter of ``GET /tables/{name}`` (the route answers 404, naming the tables, for
    a name that is not an allowlisted table)."""

    name: Annotated[str, Field(min_length=1, description="a table name, as GET /tables lists them")]


class NoArgs(BaseModel):
    """No arguments (``GET /tables``, ``GET /model`` read none): an MCP call sending one is refused,
    naming it, as the body routes refuse an unknown field (over REST a query string is ignored)."""

    model_config = ConfigDict(extra="forbid")
