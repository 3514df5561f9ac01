"""POST /ask: a question in, an answer grounded in the lake out (plan SQL, run it guarded, answer, check)."""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from opslake import runtime
from opslake.analysis.reporters import ASK_REPORTER
from opslake.config import get_settings
from opslake.http.bodies import request_body
from opslake.ingest.observe import summarize
from opslake.llm.records import settle_llm_calls
from opslake.tools.app import create_tool_app, query_engine
from opslake.tools.ask import MAX_ROWS, AskAnswer, Deadline, ask, parse_ask_request
from opslake.tools.ask_model import LlmAskModel, ask_model_from_settings, require_model
from opslake.tools.datasets import TableCatalog

settings = get_settings()
settings.require("lake_bucket")
app = create_tool_app()


@cache
def catalog() -> TableCatalog:
    return TableCatalog.from_settings(runtime.client("glue"), settings)


@cache
def model() -> LlmAskModel:
    return ask_model_from_settings(settings, s3_client=runtime.client("s3"))


def run_sql(sql: str, timeout_s: float, *, allowed_tables: list[str]) -> dict[str, Any]:
    # sqlglot (the guard) is imported on first use, as in POST /sql.
    from opslake.tools.sql import run_sql as run

    return run(
        query_engine(),
        sql,
        limit=MAX_ROWS,
        allowed_tables=allowed_tables,
        database=settings.glue_database,
        timeout_s=min(settings.query_timeout_s, timeout_s),
        retry_after_s=settings.queue_retry_after_s,
    )


@app.post("/ask")
def run_ask() -> dict:
    deadline = Deadline()
    # Parsed in the route (not by route validation) so that a refused body is observed too.
    request = parse_ask_request(request_body(app.current_event))
    require_model(settings)
    llm = model()
    try:
        answer = ask(
            request,
            tables=catalog().tables(),
            # the asked tables bound what the query may read, not only what the plan is shown
            run_sql=partial(run_sql, allowed_tables=request.tables or settings.allowed_tables),
            model=llm,
            deadline=deadline,
            retry_after_s=settings.queue_retry_after_s,
        )
    finally:
        # Every model call becomes an op record (source "llm"), as the analyzer's do.
        settle_llm_calls(llm.client, runtime.ops_queue(), agent_id=ASK_REPORTER, purpose="ask")
    summarize(
        app,
        outcome(answer),
        status=answer.status,
        grounded=answer.grounded,
        model_calls=answer.model_calls,
        queries=answer.queries,
        tables=",".join(answer.sources.tables if answer.sources else []),
    )
    return answer.model_dump()


def outcome(answer: AskAnswer) -> str:
    """The record's output_summary: what came of the question, and why when it was not answered."""
    if answer.status == "answered":
        rows = answer.sources.row_count if answer.sources else 0
        return f"answered from {rows} row{'' if rows == 1 else 's'}"
    if answer.status == "refused" and answer.grounding:
        return "refused: unsupported " + ", ".join(answer.grounding["unsupported"])
    return f"{answer.status}: {answer.reason}" if answer.reason else answer.status


handler = runtime.api_handler(app)
