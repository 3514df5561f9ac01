"""POST /v1/traces: OTLP/HTTP trace exports (protobuf or JSON, gzip) become op records.

Agent frameworks that already emit OpenTelemetry (GenAI semantic conventions, OpenInference)
point their OTLP exporter here with the API key in a header; op-shaped spans go through the same
validation and queue as ``POST /events``. Every answer, errors included, is in the request's
encoding, as OTLP/HTTP requires (a 415 for a content type that names no encoding answers in JSON).
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.http.bodies import raw_body
from opslake.http.identity import caller_key_id
from opslake.http.responses import create_resolver, report_error
from opslake.models import now_utc
from opslake.observability import MetricUnit, metrics
from opslake.otlp.decode import decode_export, encoding_of
from opslake.otlp.ingest import ingest_export
from opslake.otlp.responses import OtlpAnswer, error_answer, success_answer

settings = get_settings()
settings.require("ops_queue_url")
app = create_resolver()


def _respond(answer: OtlpAnswer) -> Response:
    # Bytes go out base64-encoded (a binary media type); a JSON answer goes out as text.
    body: bytes | str = answer.body if answer.encoding == "protobuf" else answer.body.decode()
    return Response(
        status_code=answer.status, content_type=answer.content_type, body=body, headers=answer.headers
    )


@app.post("/v1/traces")
def post_traces() -> Response:
    headers = app.current_event.headers or {}
    try:
        encoding = encoding_of(headers.get("content-type"))
    except Exception as exc:  # no encoding to answer in: the Status goes out as JSON
        return _respond(error_answer(report_error(exc, _request_id()), "json"))
    try:
        reporter_id = runtime.key_names().name_of(
            caller_key_id(app.current_event.raw_event["requestContext"])
        )
        export = decode_export(
            raw_body(app.current_event),
            content_type=headers.get("content-type"),
            content_encoding=headers.get("content-encoding"),
        )
        result = ingest_export(
            export,
            reporter_id=reporter_id,
            queue=runtime.ops_queue(),
            received_at=now_utc(),
            keep_all_spans=settings.otlp_keep_all_spans,
            retry_after_s=settings.queue_retry_after_s,
        )
    except Exception as exc:
        error = report_error(exc, _request_id())
        if error.status == 503:
            metrics.add_metric(name="EnqueueFailures", unit=MetricUnit.Count, value=1)
        return _respond(error_answer(error, encoding))
    metrics.add_metric(name="SpansReceived", unit=MetricUnit.Count, value=result.spans)
    metrics.add_metric(name="OpsAccepted", unit=MetricUnit.Count, value=len(result.stored))
    metrics.add_metric(name="SpansSkipped", unit=MetricUnit.Count, value=result.skipped)
    metrics.add_metric(name="SpansRejected", unit=MetricUnit.Count, value=len(result.rejected))
    if result.redacted_ids:
        metrics.add_metric(name="IdsRedacted", unit=MetricUnit.Count, value=result.redacted_ids)
    return _respond(success_answer(result, encoding))


def _request_id() -> str:
    return app.current_event.request_context.request_id


handler = runtime.api_handler(app)
