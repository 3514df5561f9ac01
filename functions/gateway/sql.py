"""POST /sql: one read-only Athena query over the allowed tables, at most ``limit`` rows back."""

from typing import Any

from opslake import runtime
from opslake.config import get_settings
from opslake.http.bodies import parse_body, request_body
from opslake.ingest.observe import summarize
from opslake.models.tools import SqlRequest
from opslake.tools.app import create_tool_app, query_engine

settings = get_settings()
app = create_tool_app()
#: API Gateway gives up after 29 s; the query is cancelled before that.
MAX_TIMEOUT_S = 25.0


@app.post("/sql")
def run_sql() -> dict[str, Any]:
    body = parse_body(SqlRequest, request_body(app.current_event))
    # sqlglot (the guard) is imported on first use: only this function needs it.
    from opslake.tools.sql import run_sql as run

    answer = run(
        query_engine(),
        body.sql,
        limit=body.limit,
        allowed_tables=settings.allowed_tables,
        database=settings.glue_database,
        timeout_s=min(settings.query_timeout_s, MAX_TIMEOUT_S),
        retry_after_s=settings.queue_retry_after_s,
    )
    summarize(
        app,
        f"{answer['row_count']} rows" + (" (truncated)" if answer["truncated"] else ""),
        tables=",".join(answer["tables"]),
        bytes_scanned=answer["bytes_scanned"] or 0,
    )
    return answer


handler = runtime.api_handler(app)
