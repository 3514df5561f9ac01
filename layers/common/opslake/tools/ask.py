"""The logic of ``POST /ask``: a question in, an answer grounded in the lake out.

The seed's rules — "never hallucinate" and "never guess column names; describe first" — as a
bounded pipeline:

1. the **catalog**: the allowlisted tables ``POST /sql`` may read, with their real columns, as Glue
   describes them (:class:`~opslake.tools.datasets.TableCatalog`), never from memory;
2. **plan**: one model call answers JSON (:class:`AskPlan`): the SQL, or "cannot answer" and why;
3. **query**: the SQL runs through ``POST /sql``'s guard and limits (:func:`opslake.tools.sql.run_sql`,
   at most :data:`MAX_ROWS` rows). A refusal by the guard or the engine (the agent-mistake 400s of
   ``/sql``) gets one **repair** round: the plan is asked again with the error text;
4. **answer**: one model call answers from the rows (:class:`AskDraft`);
5. **grounding check** (:mod:`opslake.tools.grounding`, pure code): every number, name and quoted
   string of the answer must be in the rows the model was shown, the question or the SQL. An answer
   that fails is regenerated once with the unsupported words named, then **refused** — never trusted.

At most :data:`MAX_MODEL_CALLS` model calls and :data:`MAX_QUERIES` queries per question, all inside
one :class:`Deadline` (API Gateway gives up at 29 s): each model call and each query gets the time
left. Model and engine sit behind small interfaces (:class:`AskModel`, a SQL runner), so this module
does no I/O of its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from opslake.errors import BadGatewayError, BadRequestError, ServiceUnavailableError, SqlError
from opslake.http.bodies import parse_body

if TYPE_CHECKING:
    from opslake.tools import grounding

MAX_QUESTION_CHARS = 500
#: Rows a query may hand to the answer (and to the caller as sources).
MAX_ROWS = 50
MAX_MODEL_CALLS = 4
MAX_QUERIES = 2
#: The whole question's budget: API Gateway answers 504 after 29 s.
DEADLINE_S = 25.0
#: A model call or query is not started with less time than this left.
MIN_STEP_S = 1.0
#: Time kept for the answer call while a query runs.
ANSWER_RESERVE_S = 6.0

Status = Literal["answered", "no_rows", "cannot_answer", "refused"]
T = TypeVar("T", bound=BaseModel)


# ---- request and answer -------------------------------------------------------------------------
class AskRequest(BaseModel):
    """The body of ``POST /ask`` (also the MCP tool's input schema)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    question: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_QUESTION_CHARS,
            description="a question about the lake's tables, e.g. 'how many welders are in Houston?'",
        ),
    ]
    tables: Annotated[
        list[str] | None,
        Field(
            min_length=1,
            max_length=10,
            description="tables the answer may use (default: every allowed table)",
        ),
    ] = None

    @field_validator("question")
    @classmethod
    def _has_words(cls, value: str) -> str:
        # "\u200b", "?!" or a NUL pass min_length but would spend a model call on nothing
        if not any(c.isalnum() for c in value):
            raise ValueError("the question has no letter or digit; ask it in words")
        return value

    @field_validator("tables")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        return list(dict.fromkeys(value)) if value is not None else None


def parse_ask_request(body: str | None) -> AskRequest:
    """The body as an :class:`AskRequest`; a 400 naming each bad field otherwise."""
    return parse_body(AskRequest, body)


class AskPlan(BaseModel):
    """The plan the model answers (its JSON schema is sent to the model)."""

    model_config = ConfigDict(extra="forbid")

    answerable: bool
    sql: Annotated[str, Field(max_length=20_000)]
    reason: Annotated[str, Field(max_length=1_000)]


class AskDraft(BaseModel):
    """The answer the model writes from the rows (its JSON schema is sent to the model)."""

    model_config = ConfigDict(extra="forbid")

    answer: Annotated[str, Field(min_length=1, max_length=4_000)]


class Attempt(BaseModel):
    """One query that ran (or was refused): its SQL and what came of it."""

    sql: str
    error: str | None = None
    error_type: str | None = None
    row_count: int | None = None


class Sources(BaseModel):
    """What the answer rests on: the SQL that ran, its tables, and the rows the model was shown."""

    sql: str
    tables: list[str]
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool = Field(description="the query had more rows than the answer was given")
    engine: str | None


class AskAnswer(BaseModel):
    question: str
    status: Status
    answer: str | None = Field(description="the grounded answer; null when refused or nothing to answer")
    grounded: bool
    grounding: dict[str, Any] | None = Field(description="what the check found (numbers, names, quotes)")
    reason: str | None = Field(default=None, description="why the lake cannot answer, or why refused")
    sources: Sources | None
    tried: list[Attempt]
    model: str
    model_calls: int
    queries: int


# ---- interfaces ---------------------------------------------------------------------------------
class AskModel(Protocol):
    """What the pipeline needs of a model: JSON of a schema within a timeout (one call each)."""

    name: str

    def complete(self, messages: list[dict[str, str]], answer_model: type[T], *, timeout_s: float) -> T: ...


class InvalidModelAnswer(Exception):
    """The model answered, but not JSON of the asked schema (an :class:`AskModel` raises it)."""


SqlRunner = Callable[[str, float], Mapping[str, Any]]
"""Runs guarded SQL with a timeout: ``run_sql``'s answer, or its :class:`SqlError` family."""


class AskModelError(BadGatewayError):
    """The model kept answering something other than the asked JSON: a 502 naming it."""

    code = "ask_model_invalid"


class AskTimeoutError(ServiceUnavailableError):
    """The question's budget ran out before an answer: a 503 with ``Retry-After``."""

    code = "ask_timeout"


@dataclass
class Deadline:
    """The time a question may take, from ``clock`` (monotonic seconds)."""

    total_s: float = DEADLINE_S
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    def remaining(self, reserve_s: float = 0.0) -> float:
        return self.total_s - (self.clock() - self.started) - reserve_s


# ---- the pipeline -------------------------------------------------------------------------------
@dataclass
class _Run:
    request: AskRequest
    model: AskModel
    deadline: Deadline
    retry_after_s: int
    calls: int = 0
    queries: int = 0
    tried: list[Attempt] = field(default_factory=list)

    def call(self, messages: list[dict[str, str]], answer_model: type[T], what: str) -> T:
        """One model call within the budgets; an invalid answer is asked once more if a call is left."""
        while True:
            if self.calls >= MAX_MODEL_CALLS:
                raise AskModelError(
                    f"the model did not give a usable {what} within {MAX_MODEL_CALLS} calls; retry later",
                    detail={"model_calls": self.calls},
                )
            timeout = self.deadline.remaining()
            if timeout < MIN_STEP_S:
                raise AskTimeoutError(
                    f"/ask ran out of its {self.deadline.total_s:.0f} s budget before the {what}; retry, "
                    "or ask a narrower question",
                    retry_after_s=self.retry_after_s,
                )
            self.calls += 1
            try:
                return self.model.complete(messages, answer_model, timeout_s=timeout)
            except InvalidModelAnswer as exc:
                if self.calls >= MAX_MODEL_CALLS:
                    raise AskModelError(
                        f"the model answered the {what} with something other than the asked JSON: {exc}",
                        detail={"model_calls": self.calls},
                    ) from exc

    def query(self, run: SqlRunner, sql: str) -> Mapping[str, Any]:
        self.queries += 1
        timeout = self.deadline.remaining(ANSWER_RESERVE_S)
        if timeout < MIN_STEP_S:
            raise AskTimeoutError(
                f"/ask ran out of its {self.deadline.total_s:.0f} s budget before the query; retry",
                retry_after_s=self.retry_after_s,
            )
        result = run(sql, timeout)
        if not result["tables"]:  # SELECT 42: rows the model wrote itself are not the lake's
            raise SqlError(
                "the query reads no table: an answer must come from the rows of the catalog's tables",
                code="ask_no_table",
            )
        from opslake.tools.ask_prompts import MAX_ROWS_CHARS, row_chars

        # prompt_rows keeps at least one row: one that alone outgrows the answer prompt (SELECT note
        # AS a1, note AS a2, ...) would send it whole
        width = row_chars(result["rows"][0]) if result["rows"] else 0
        if width > MAX_ROWS_CHARS:
            raise SqlError(
                f"one row of the result is {width:,} characters as prompt data, more than the "
                f"{MAX_ROWS_CHARS:,} an answer may read; select only the columns the question needs",
                code="ask_row_too_wide",
            )
        return result

    def answer(self, status: Status, **fields: Any) -> AskAnswer:
        values: dict[str, Any] = {"answer": None, "grounded": False, "grounding": None, "sources": None}
        values.update(fields)
        return AskAnswer(
            question=self.request.question,
            status=status,
            tried=self.tried,
            model=self.model.name,
            model_calls=self.calls,
            queries=self.queries,
            **values,
        )


def catalog_for(request: AskRequest, tables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The catalog the plan sees: the asked (or every) allowed table, with its real columns; a 400
    naming the available tables when an asked one is not among them."""
    wanted = request.tables or list(tables)
    missing = [t for t in wanted if t not in tables]
    if missing:
        shown = [t[:60] for t in missing]
        raise BadRequestError(
            f"table(s) {', '.join(shown)} cannot be asked about; available tables: {', '.join(tables) or '(none)'}",
            detail={"field": "tables", "unavailable": shown, "available": list(tables)},
        )
    described = []
    for name in wanted:
        info = tables[name]
        described.append(
            {
                "table": name,
                "description": info.description,
                "columns": [{"name": c.name, "type": c.type} for c in info.columns],
                "partition_keys": [{"name": c.name, "type": c.type} for c in info.partition_keys],
            }
        )
    return described


def _cannot(reason: str, evidence_names: Sequence[str]) -> tuple[str, bool]:
    """The planner's reason, if it names nothing the question and catalog do not name and states no
    number at all (the question's numbers are the caller's guess, not a fact to hand back)."""
    from opslake.tools import grounding

    checked = grounding.check(reason, grounding.Evidence.of([], names=evidence_names))
    if checked.grounded:
        return reason, True
    return "the model found no table or column of the catalog that answers the question", False


def ask(
    request: AskRequest,
    *,
    tables: Mapping[str, Any],
    run_sql: SqlRunner,
    model: AskModel,
    deadline: Deadline | None = None,
    retry_after_s: int = 5,
) -> AskAnswer:
    """Answer ``request`` from the lake (see the module docstring); ``tables`` is the allowlisted
    catalog (name → :class:`~opslake.tools.datasets.TableInfo`)."""
    # Imported here: the prompts and the check load the analysis package (~140 ms), which the
    # MCP function's cold start (it imports AskRequest for the schema) need not pay.
    from opslake.tools import ask_prompts, grounding

    catalog = catalog_for(request, tables)
    run = _Run(request, model, deadline or Deadline(), retry_after_s)
    names = [t["table"] for t in catalog] + [
        c["name"] for t in catalog for c in t["columns"] + t["partition_keys"]
    ]

    plan = run.call(
        ask_prompts.plan_messages(request.question, catalog, max_rows=MAX_ROWS), AskPlan, "query plan"
    )
    result: Mapping[str, Any] | None = None
    while True:
        if not plan.answerable or not plan.sql.strip():
            reason, _ = _cannot(plan.reason.strip() or "no reason given", [request.question, *names])
            return run.answer("cannot_answer", grounded=True, reason=reason)
        sql = plan.sql.strip()
        try:
            result = run.query(run_sql, sql)
        except SqlError as exc:  # the guard's or the engine's refusal: the plan's mistake
            run.tried.append(Attempt(sql=sql, error=exc.message, error_type=exc.code))
            if run.queries >= MAX_QUERIES or run.calls >= MAX_MODEL_CALLS - 1:
                return run.answer(
                    "cannot_answer",
                    grounded=True,
                    reason=f"the query failed ({exc.code}) and its repair did too; see tried",
                )
            if run.deadline.remaining() < MIN_STEP_S:  # what was tried beats a bare 503
                return run.answer(
                    "cannot_answer",
                    grounded=True,
                    reason=f"the query failed ({exc.code}) and no time was left to repair it; see tried",
                )
            plan = run.call(
                ask_prompts.plan_messages(
                    request.question, catalog, max_rows=MAX_ROWS, failed_sql=sql, error=exc.message
                ),
                AskPlan,
                "repaired query plan",
            )
            continue
        break

    columns = [str(c["name"]) for c in result["columns"]]
    shown = ask_prompts.prompt_rows(result["rows"])
    # rows left out (by the query's row cap or the prompt's size) make the rows a sample, not all
    truncated = bool(result["truncated"]) or len(shown) < len(result["rows"])
    facts = grounding.sql_facts(sql)
    # rows that fill the query's own LIMIT may be the first of many: their count is no fact either
    limited = truncated or (facts.limit is not None and len(result["rows"]) >= facts.limit)
    run.tried.append(Attempt(sql=sql, row_count=len(result["rows"])))
    sources = Sources(
        sql=sql,
        tables=list(result["tables"]),
        columns=columns,
        rows=[list(row) for row in result["rows"][: len(shown)]],
        row_count=len(shown),
        truncated=truncated,
        engine=result.get("engine"),
    )
    if not shown:
        return run.answer(
            "no_rows",
            answer=(
                "The query returned no rows, so the lake gave no answer to the question as asked "
                "(see sources.sql)."
            ),
            grounded=True,
            sources=sources,
            reason="the query returned no rows",
        )

    # The question is not evidence: a name or number only the question holds ("is it Bob, with
    # 900?") is what the caller supposes, not what the lake says; what the query filtered on is in
    # the SQL's facts, and a number both hold ("top 3", LIMIT 3) was the caller's and used.
    lake_rows = [[c for i, c in enumerate(row) if i not in facts.constants] for row in shown]
    evidence = grounding.Evidence.of(
        lake_rows,
        texts=[*facts.texts, *grounding.asked_numbers(request.question, facts)],
        names=[*facts.identifiers, *columns, *names],
        row_count=None if limited else len(shown),
    )
    unsupported: list[str] = []
    checked: grounding.Grounding | None = None
    for _ in range(2):  # the answer, and once more with what it could not support
        if run.calls >= MAX_MODEL_CALLS or (checked and run.deadline.remaining() < MIN_STEP_S):
            break  # the rows in hand, refused below, beat a bare 503
        draft = run.call(
            ask_prompts.answer_messages(
                request.question, sql, columns, shown, truncated=limited, unsupported=unsupported
            ),
            AskDraft,
            "answer",
        )
        checked = grounding.check(draft.answer, evidence)
        if checked.grounded:
            return run.answer(
                "answered", answer=draft.answer, grounded=True, grounding=checked.as_dict(), sources=sources
            )
        unsupported = checked.unsupported
    return run.answer(
        "refused",
        grounded=False,
        grounding=checked.as_dict() if checked else None,
        sources=sources,
        reason=(
            "the model's answer stated numbers or names that are not in the rows "
            f"({', '.join(unsupported)}); it was refused. The rows under sources are the lake's answer."
        ),
    )


def retry_after(seconds: float, floor: int) -> int:
    """A whole ``Retry-After`` of at least ``floor`` seconds."""
    return max(floor, math.ceil(seconds))
