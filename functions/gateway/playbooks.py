"""GET /playbooks: the active playbook entries that apply to a task, most confident first.

Every answer carries an ``ETag`` (a hash of the body, so it changes whenever the snapshot or the
selection does); a request whose ``If-None-Match`` names it gets ``304 Not Modified`` and no body.
"""

import hashlib
import json
from typing import Any

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.errors import ServiceUnavailableError
from opslake.http.bodies import parse_query
from opslake.http.responses import json_response
from opslake.ingest.observe import summarize
from opslake.models.playbooks import PlaybookSnapshot
from opslake.models.tools import PlaybooksQuery
from opslake.tools.app import create_tool_app
from opslake.tools.snapshots import SnapshotUnavailableError, playbook_snapshot

settings = get_settings()
settings.require("lake_bucket")
app = create_tool_app()


snapshot = playbook_snapshot(lambda: runtime.client("s3"), settings)


def etag_of(body: str) -> str:
    """A strong validator of one answer's exact bytes."""
    return '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` (``*`` or a list of possibly weak tags) names ``etag``."""
    if not if_none_match:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return any(tag == "*" or tag.removeprefix("W/") == etag for tag in tags)


@app.get("/playbooks")
def get_playbooks() -> Response:
    query = parse_query(PlaybooksQuery, app.current_event.query_string_parameters)
    try:
        current: PlaybookSnapshot | None = snapshot.get()
    except SnapshotUnavailableError as exc:
        raise ServiceUnavailableError(
            "playbooks cannot be read right now; retry shortly", retry_after_s=settings.queue_retry_after_s
        ) from exc
    answer: dict[str, Any]
    served_ids = ""
    if current is None:
        summary = "0 entries (no snapshot yet)"
        answer = {"entries": [], "generated_at": None}
    else:
        entries = current.select(
            endpoint=query.endpoint,
            task_class=query.task_class,
            q=query.q,
            entry_id=query.entry_id,  # one entry (an MCP resources/read): still only an active one
            limit=query.limit,
        )
        summary = f"{len(entries)} entries"
        answer = {"entries": [e.served() for e in entries], "generated_at": current.generated_at.isoformat()}
        # which agent read which entries: the consolidator measures an entry on its readers
        served_ids = ",".join(e.entry_id for e in entries)
    etag = etag_of(json.dumps(answer, separators=(",", ":"), default=str))
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if etag_matches(app.current_event.headers.get("if-none-match"), etag):
        summarize(app, f"not modified ({summary})", not_modified=True, entry_ids=served_ids)
        return Response(status_code=304, body="", headers=headers)
    summarize(app, summary, entry_ids=served_ids)
    return json_response(200, answer, headers)


handler = runtime.api_handler(app)
