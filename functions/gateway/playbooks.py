"""GET /playbooks: the active playbook entries that apply to a task, most confident first."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from opslake import runtime
from opslake.bodies import parse_query
from opslake.config import get_settings
from opslake.errors import ServiceUnavailableError
from opslake.gateway import create_tool_app
from opslake.models.playbooks import PlaybookEntry, PlaybookSnapshot
from opslake.observability import logger
from opslake.observe import summarize
from opslake.snapshots import CachedJsonObject, SnapshotUnavailableError

settings = get_settings()
settings.require("lake_bucket")
app = create_tool_app()


def parse_snapshot(document: Any) -> PlaybookSnapshot:
    """The snapshot, keeping every valid entry (one bad entry must not hide the others)."""
    entries = []
    for raw in document.get("entries", []) if isinstance(document, dict) else []:
        try:
            entries.append(PlaybookEntry.model_validate(raw))
        except ValueError as exc:
            logger.warning("playbook entry skipped", error=str(exc)[:300])
    return PlaybookSnapshot(generated_at=document["generated_at"], entries=entries)


snapshot = CachedJsonObject(
    lambda: runtime.client("s3"), settings.lake_bucket, settings.playbooks_key, parse_snapshot
)

Text = Annotated[str | None, Field(min_length=1, max_length=200)]


class PlaybooksQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: Text = None
    task_class: Text = None
    q: Text = Field(default=None, description="words that must all appear in the trigger or action")
    limit: Annotated[int, Field(ge=1, le=50)] = 10


@app.get("/playbooks")
def get_playbooks() -> dict[str, Any]:
    query = parse_query(PlaybooksQuery, app.current_event.query_string_parameters)
    try:
        current: PlaybookSnapshot | None = snapshot.get()
    except SnapshotUnavailableError as exc:
        raise ServiceUnavailableError(
            "playbooks cannot be read right now; retry shortly", retry_after_s=settings.queue_retry_after_s
        ) from exc
    if current is None:
        summarize(app, "0 entries (no snapshot yet)")
        return {"entries": [], "generated_at": None}
    entries = current.select(
        endpoint=query.endpoint, task_class=query.task_class, q=query.q, limit=query.limit
    )
    summarize(app, f"{len(entries)} entries")
    return {"entries": [e.served() for e in entries], "generated_at": current.generated_at.isoformat()}


handler = runtime.api_handler(app)
