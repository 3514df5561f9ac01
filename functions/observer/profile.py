"""GET /profile/{agent_id}: one agent's op count, success rate, p95 latency, top errors, recent ops."""

from __future__ import annotations

from functools import lru_cache

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from opslake.api import create_resolver, json_response
from opslake.config import get_settings
from opslake.insights import InsightsConfig, get_profile
from opslake.observability import MetricUnit, logger, metrics
from opslake.query.base import QueryEngine
from opslake.query.factory import create_engine
from opslake.tracing import tracer

settings = get_settings()
config = InsightsConfig.from_settings(settings)
app = create_resolver()


@lru_cache(maxsize=1)
def _engine() -> QueryEngine:
    return create_engine(settings)


@app.get("/profile/<agent_id>")
def profile(agent_id: str) -> Response:
    # API Gateway URL-decodes pathParameters; the route argument is the raw path segment.
    agent = (app.current_event.path_parameters or {}).get("agent_id", agent_id)
    answer = get_profile(
        _engine(), config=config, agent_id=agent, hours=app.current_event.get_query_string_value("hours")
    )
    metrics.add_metric(name="ProfileQueries", unit=MetricUnit.Count, value=1)
    return json_response(200, answer.model_dump(mode="json"))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
