"""GET /profile/{agent_id}: one agent's op count, success rate, p95 latency, top errors, recent ops, and
the API keys (reporters) that posted them: the agent_id is a claim, the key is what opslake knows."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.http.responses import create_resolver, json_response
from opslake.insights.stats import get_profile
from opslake.observability import MetricUnit, metrics
from opslake.query.api import ApiQueryConfig

settings = get_settings()
config = ApiQueryConfig.from_settings(settings)
app = create_resolver()


_engine = runtime.query_engine  # built on first use, once per container


@app.get("/profile/<agent_id>")
def profile(agent_id: str) -> Response:
    # API Gateway URL-decodes pathParameters; the route argument is the raw path segment.
    agent = (app.current_event.path_parameters or {}).get("agent_id", agent_id)
    answer = get_profile(
        _engine(), config=config, agent_id=agent, hours=app.current_event.get_query_string_value("hours")
    )
    metrics.add_metric(name="ProfileQueries", unit=MetricUnit.Count, value=1)
    return json_response(200, answer.model_dump(mode="json"))


handler = runtime.api_handler(app)
