"""POST /match: workers in a role and place, ranked by how well their skills cover a free-text need."""

from __future__ import annotations

from opslake import runtime
from opslake.config import get_settings
from opslake.http.bodies import request_body
from opslake.ingest.observe import summarize
from opslake.query.api import ApiQueryConfig
from opslake.tools.app import create_tool_app, query_engine
from opslake.tools.datasets import match_workers, parse_match_request

config = ApiQueryConfig.from_settings(get_settings())
app = create_tool_app()


@app.post("/match")
def match() -> dict:
    # Parsed in the route (not by route validation) so that a refused body is observed too.
    request = parse_match_request(request_body(app.current_event))
    answer = match_workers(query_engine(), config, request)
    place = {k: v for k, v in (("city", request.city), ("state", request.state)) if v}
    summarize(app, f"{answer.returned} matches", role=request.role or "", count=request.count, **place)
    return answer.model_dump()


handler = runtime.api_handler(app)
