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

import hashlib
import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from opslake import runtime
from opslake.config import get_settings
from opslake.errors import ServiceUnavailableError
from opslake.http.bodies import parse_query
from opslake.ingest.observe import caller_name, summarize
from opslake.models.playbooks import PlaybookSnapshot
from opslake.models.tools import PlaybooksQuery
from opslake.tools.app import create_tool_app
from opslake.tools.playbook_arms import joined_ids, split_arms
from opslake.tools.playbook_markdown import render_entries
from opslake.tools.snapshots import SnapshotUnavailableError, playbook_snapshot

settings = get_settings()
settings.require("lake_bucket")
app = create_tool_app()


snapshot = playbook_snapshot(lambda: runtime.client("s3"), settings)
MARKDOWN = "text/markdown; charset=utf-8"


def etag_of(body: str) -> str:
    """A strong validator of one answer's exact bytes."""
    return '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` (``*`` or a list of possibly weak tags) names ``etag``."""
    if not if_none_match:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return any(tag == "*" or tag.removeprefix("W/") == etag for tag in tags)


def media_q(accept: str, media_type: str) -> float:
    """The quality ``accept`` (an ``Accept`` header) gives ``media_type``: that of its most specific
    matching range (``type/subtype`` over ``type/*`` over ``*/*``), 0 when none matches."""
    kind = media_type.split("/")[0]
    best: tuple[int, float] = (-1, 0.0)
    for item in accept.split(","):
        parts = [part.strip() for part in item.split(";")]
        media = parts[0].lower()
        specificity = {media_type: 2, f"{kind}/*": 1, "*/*": 0}.get(media)
        if specificity is None or specificity < best[0]:
            continue
        q = 1.0
        for param in parts[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        best = (specificity, q)
    return best[1]


def wants_markdown(query_format: str | None, accept: str | None) -> bool:
    """``?format=`` decides; else Markdown only when ``Accept`` ranks it above JSON (a tie is JSON)."""
    if query_format is not None:
        return query_format == "md"
    if not accept:
        return False
    return media_q(accept, "text/markdown") > media_q(accept, "application/json")


@app.get("/playbooks")
def get_playbooks() -> Response:
    query = parse_query(PlaybooksQuery, app.current_event.query_string_parameters)
    try:
        current: PlaybookSnapshot | None = snapshot.get()
    except SnapshotUnavailableError as exc:
        raise ServiceUnavailableError(
            "playbooks cannot be read right now; retry shortly", retry_after_s=settings.queue_retry_after_s
        ) from exc
    markdown = wants_markdown(query.format, app.current_event.headers.get("accept"))
    selected = (
        []
        if current is None
        else current.select(
            endpoint=query.endpoint,
            task_class=query.task_class,
            q=query.q,
            entry_id=query.entry_id,  # one entry (an MCP resources/read): still only an active one
            limit=query.limit,
        )
    )
    # select, then split by the caller's arms (no backfill): a withheld entry answers like an
    # inactive one, so an MCP resources/read of it finds nothing
    entries, withheld = split_arms(selected, caller_name(app), salt=settings.playbook_holdout_salt)
    generated_at = current.generated_at.isoformat() if current is not None else None
    summary = f"{len(entries)} entries" if current is not None else "0 entries (no snapshot yet)"
    # which key was served and which was withheld which entries: the consolidator's two arms
    served_ids, served_cut = joined_ids(entries)
    withheld_ids, withheld_cut = joined_ids(withheld)
    recorded: dict[str, str | int] = {"entry_ids": served_ids, "withheld_ids": withheld_ids, "holdout": "1"}
    if served_cut or withheld_cut:  # only ids longer than the consolidator's can overflow
        recorded["ids_cut"] = served_cut + withheld_cut
    if markdown:
        body = f"# Playbook entries (generated {generated_at or 'never: no snapshot yet'})\n\n"
        body += render_entries(entries)
    else:
        answer: dict[str, Any] = {"entries": [e.served() for e in entries], "generated_at": generated_at}
        body = json.dumps(answer, separators=(",", ":"), default=str)
    etag = etag_of(body)
    # Vary: a cache must not answer a Markdown request with the JSON it kept, nor the reverse;
    # private: the body depends on the key's arms, so no shared cache may hand it to another key
    headers = {"ETag": etag, "Cache-Control": "private, no-cache", "Vary": "Accept"}
    answer_format = "md" if markdown else "json"
    if etag_matches(app.current_event.headers.get("if-none-match"), etag):
        summary = f"not modified ({summary})"
        summarize(app, summary, not_modified=True, format=answer_format, **recorded)
        return Response(status_code=304, body="", headers=headers)
    summarize(app, summary, format=answer_format, **recorded)
    if markdown:
        return Response(status_code=200, content_type=MARKDOWN, body=body, headers=headers)
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


handler = runtime.api_handler(app)
