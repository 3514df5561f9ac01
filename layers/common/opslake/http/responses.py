"""HTTP plumbing shared by every API function: the resolver and the one error mapping."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from opslake.errors import BadRequestError, InternalError, OpslakeError, error_response_parts
from opslake.observability import MetricUnit, logger, metrics


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, separators=(",", ":"), default=str),
        headers=headers or {},
    )


def as_opslake_error(exc: Exception, request_id: str = "") -> OpslakeError:
    """Any exception as the domain error it answers with: the single mapping to HTTP."""
    if isinstance(exc, OpslakeError):
        return exc
    if isinstance(exc, RequestValidationError):
        problems = []
        for err in exc.errors():
            location = [str(part) for part in err.get("loc", ()) if part not in ("body", "query", "path")]
            problems.append({"field": ".".join(location) or "(body)", "message": str(err.get("msg", ""))})
        message = "; ".join(f"{p['field']}: {p['message']}" for p in problems) or "invalid request"
        return BadRequestError(f"invalid request: {message}", detail=problems)
    return InternalError(f"opslake failed unexpectedly (request id {request_id or 'unknown'})")


def report_error(exc: Exception, request_id: str = "") -> OpslakeError:
    """The domain error an exception answers with, logged and counted (every route's errors, in
    whatever body encoding the route answers)."""
    error = as_opslake_error(exc, request_id)
    if error.status >= 500:
        if error is exc:
            logger.error("request failed", error=error.code, reason=error.message)
        else:
            logger.exception("unhandled error")
        metrics.add_metric(name="ServerErrors", unit=MetricUnit.Count, value=1)
    else:
        logger.info("request rejected", error=error.code, reason=error.message)
        metrics.add_metric(name="ClientErrors", unit=MetricUnit.Count, value=1)
    return error


def create_resolver(*, enable_validation: bool = False) -> APIGatewayRestResolver:
    """A REST (v1) resolver whose errors always answer JSON: ``{"error", "message", "detail"?}``.

    With ``enable_validation`` route parameters annotated with pydantic models are validated by
    Powertools; a failure answers 400 (not Powertools' 422) listing each field and what to fix.
    """
    app = APIGatewayRestResolver(enable_validation=enable_validation)

    @app.exception_handler(Exception)
    def _error(exc: Exception) -> Response:
        status, body, headers = error_response_parts(
            report_error(exc, app.current_event.request_context.request_id)
        )
        return json_response(status, body, headers)

    @app.not_found
    def _not_found(exc: Exception) -> Response:
        return json_response(404, {"error": "not_found", "message": "no such route"})

    return app
