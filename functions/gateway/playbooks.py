"""GET /playbooks: the active playbook entries that apply to a task, most confident first.

Every answer carries an ``ETag`` (a hash of the body, so it changes whenever the snapshot or the
selection does); a request whose ``If-None-Match`` names it gets ``304 Not Modified`` and no body.

The same selection is servable as Markdown (``text/markdown``, grouped by endpoint and trigger, as
``opslake playbooks export`` writes it): with ``?format=md``, or an ``Accept`` header that prefers
``text/markdown`` to ``application/json``. JSON stays the default and nothing is refused (no 406).

Holdout experiments (issue 16): the selection is split by the caller's arm of each entry, a hash of
its API key name (the op record's ``reporter_id``) and the entry id; the treatment entries are
served and the others withheld, with no backfill. The op record says both (``entry_ids``,
``withheld_ids``, ``holdout`` "1"), on a 200 and a 304 alike: the consolidator compares the arms.
The body, hence the ETag, differs per key, so the answer is ``Cache-Control: private``.
"""

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.errors import ServiceUnavailableError
from opslake.http.bodies import parse_query
from opslake.ingest.observe import caller_name, summarize
from opslake.models.playbooks import PlaybookSnapshot
from opslake.models.tools import PlaybooksQuery
from opslake.observability import MetricUnit, metrics
from opslake.tools.app import create_tool_app
from opslake.tools.playbooks import etag_matches, playbooks_answer
from opslake.tools.snapshots import SnapshotUnavailableError, playbook_snapshot

settings = get_settings()
settings.require("lake_bucket")
app = create_tool_app()
snapshot = playbook_snapshot(lambda: runtime.client("s3"), settings)


@app.get("/playbooks")
def get_playbooks() -> Response:
    query = parse_query(PlaybooksQuery, app.current_event.query_string_parameters)
    try:
        current: PlaybookSnapshot | None = snapshot.get()
    except SnapshotUnavailableError as exc:
        raise ServiceUnavailableError(
            "playbooks cannot be read right now; retry shortly", retry_after_s=settings.queue_retry_after_s
        ) from exc
    headers = app.current_event.headers
    answer = playbooks_answer(
        current,
        query,
        reader=caller_name(app),
        accept=headers.get("accept"),
        salt=settings.playbook_holdout_salt,
    )
    # the op record says both arms on a 200 and a 304 alike, and so does the count: a 304 tells the
    # reader its copy is current, so it still acts on those entries (one place for REST and MCP)
    metrics.add_metric(name="PlaybookEntriesServed", unit=MetricUnit.Count, value=answer.served)
    if etag_matches(headers.get("if-none-match"), answer.etag):
        summary = f"not modified ({answer.summary})"
        summarize(app, summary, not_modified=True, format=answer.format, **answer.recorded)
        return Response(status_code=304, body="", headers=answer.headers)
    summarize(app, answer.summary, format=answer.format, **answer.recorded)
    return Response(
        status_code=200, content_type=answer.content_type, body=answer.body, headers=answer.headers
    )


handler = runtime.api_handler(app)
