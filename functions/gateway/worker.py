"""GET /worker/{id}: one worker of the staffing dataset, with their placements count."""

from __future__ import annotations

from opslake import runtime
from opslake.config import get_settings
from opslake.ingest.observe import summarize
from opslake.query.api import ApiQueryConfig
from opslake.tools.app import create_tool_app, query_engine
from opslake.tools.datasets import get_worker

config = ApiQueryConfig.from_settings(get_settings())
app = create_tool_app()


@app.get("/worker/<worker_id>")
def worker(worker_id: str) -> dict:
    # API Gateway URL-decodes pathParameters ({id} in the template); the argument is the raw segment.
    answer = get_worker(
        query_engine(), config, (app.current_event.path_parameters or {}).get("id", worker_id)
    )
    summarize(app, f"worker {answer['worker']['worker_id']}", worker_id=answer["worker"]["worker_id"])
    return answer


handler = runtime.api_handler(app)
