"""GET /health: liveness and version, the only route without an API key; and GET /openapi.json, the
API's OpenAPI document (with the key, like every other route). Neither touches an AWS API."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from opslake import __version__
from opslake.config import get_settings
from opslake.http.responses import create_resolver, json_response
from opslake.observability import logger

app = create_resolver()


@app.get("/health")
def health() -> Response:
    return json_response(
        200, {"status": "ok", "service": "opslake", "version": __version__, "stage": get_settings().stage}
    )


@app.get("/openapi.json")
def openapi() -> Response:
    # Imported here: the models it describes cost ~0.7 s once per container, which /health need not pay.
    from opslake.http.openapi import openapi_document, server_url

    return json_response(200, openapi_document(server_url(app.current_event.raw_event)))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
