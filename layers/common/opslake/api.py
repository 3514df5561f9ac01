"""HTTP plumbing shared by every API function: the resolver and the one error mapping."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types

from opslake.errors import OpslakeError, error_response_parts
from opslake.observability import MetricUnit, logger, metrics


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, separators=(",", ":"), default=str),
        headers=headers or {},
    )


def create_resolver() -> APIGatewayRestResolver:
    """A REST (v1) resolver whose errors always answer JSON: ``{"error", "message", "detail"?}``."""
    app = APIGatewayRestResolver()

    @app.exception_handler(OpslakeError)
    def _domain_error(exc: OpslakeError) -> Response:
        status, body, headers = error_response_parts(exc)
        if status >= 500:
            logger.error("request failed", error=exc.code, reason=exc.message)
            metrics.add_metric(name="ServerErrors", unit=MetricUnit.Count, value=1)
        else:
            logger.info("request rejected", error=exc.code, reason=exc.message)
            metrics.add_metric(name="ClientErrors", unit=MetricUnit.Count, value=1)
        return json_response(status, body, headers)

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response:
        logger.exception("unhandled error")
        metrics.add_metric(name="ServerErrors", unit=MetricUnit.Count, value=1)
        request_id = app.current_event.request_context.request_id
        return json_response(
            500,
            {"error": "internal_error", "message": f"opslake failed unexpectedly (request id {request_id})"},
        )

    @app.not_found
    def _not_found(exc: Exception) -> Response:
        return json_response(404, {"error": "not_found", "message": "no such route"})

    return app
