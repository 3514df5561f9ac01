"""POST /events: agent runtimes report their own ops (validated one by one, then enqueued)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.errors import InvalidOpsError, ServiceUnavailableError
from opslake.http.bodies import request_body
from opslake.http.identity import caller_key_id
from opslake.http.responses import create_resolver, json_response
from opslake.ingest.events import ingest
from opslake.models import now_utc
from opslake.observability import MetricUnit, metrics

settings = get_settings()
settings.require("ops_queue_url")
app = create_resolver()


@app.post("/events")
def post_events() -> Response:
    reporter_id = runtime.key_names().name_of(caller_key_id(app.current_event.raw_event["requestContext"]))
    try:
        result = ingest(
            request_body(app.current_event),
            reporter_id=reporter_id,
            queue=runtime.ops_queue(),
            received_at=now_utc(),
            retry_after_s=settings.queue_retry_after_s,
        )
    except InvalidOpsError as exc:
        metrics.add_metric(name="OpsRejected", unit=MetricUnit.Count, value=len(exc.detail["rejected"]))
        raise
    except ServiceUnavailableError:
        metrics.add_metric(name="EnqueueFailures", unit=MetricUnit.Count, value=1)
        raise
    metrics.add_metric(name="OpsAccepted", unit=MetricUnit.Count, value=len(result.accepted))
    metrics.add_metric(name="OpsRejected", unit=MetricUnit.Count, value=len(result.rejected))
    if result.redacted_ids:  # ops stored under redacted ids (a secret was in one): renamed, not lost
        metrics.add_metric(name="IdsRedacted", unit=MetricUnit.Count, value=len(result.redacted_ids))
    return json_response(202, result.model_dump())


handler = runtime.api_handler(app)
