"""POST /search: ranked full-text search over the allowlisted datasets and the active playbook entries."""

from __future__ import annotations

from opslake import runtime
from opslake.config import get_settings
from opslake.errors import ServiceUnavailableError
from opslake.http.bodies import request_body
from opslake.ingest.observe import caller_name, summarize
from opslake.models.playbooks import PlaybookEntry
from opslake.query.api import ApiQueryConfig
from opslake.tools.app import create_tool_app, query_engine
from opslake.tools.search import parse_search_request, search
from opslake.tools.snapshots import SnapshotUnavailableError, playbook_snapshot

settings = get_settings()
settings.require("lake_bucket")
config = ApiQueryConfig.from_settings(settings)
app = create_tool_app()
snapshot = playbook_snapshot(lambda: runtime.client("s3"), settings)


def playbook_entries() -> list[PlaybookEntry]:
    try:
        current = snapshot.get()
    except SnapshotUnavailableError as exc:
        raise ServiceUnavailableError(
            "playbooks cannot be read right now; retry shortly, or search other sources",
            retry_after_s=settings.queue_retry_after_s,
        ) from exc
    return list(current.entries) if current is not None else []


@app.post("/search")
def run_search() -> dict:
    # Parsed in the route (not by route validation) so that a refused body is observed too.
    request = parse_search_request(request_body(app.current_event))
    answer = search(
        query_engine(),
        config,
        request,
        allowed_tables=settings.allowed_tables,
        playbook_entries=playbook_entries,
        reader=caller_name(app),  # its held-out entries stay hidden (the name its record carries)
        holdout_salt=settings.playbook_holdout_salt,
    )
    summarize(
        app,
        f"{answer.returned} results",
        sources=",".join(answer.sources),
        terms=len(answer.terms),
        candidates=sum(answer.candidates.values()),
    )
    return answer.model_dump()


handler = runtime.api_handler(app)
