"""GET /stats: totals, failure rates and p95 latency of every agent's ops over the last N hours."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from opslake import runtime
from opslake.config import get_settings
from opslake.http.responses import create_resolver, json_response
from opslake.insights.stats import get_stats, stats_cache
from opslake.observability import MetricUnit, metrics
from opslake.query.api import ApiQueryConfig

settings = get_settings()
config = ApiQueryConfig.from_settings(settings)
cache = stats_cache()
app = create_resolver()


_engine = runtime.query_engine  # built on first use, once per container


@app.get("/stats")
def stats() -> Response:
    answer = get_stats(
        _engine(), config=config, hours=app.current_event.get_query_string_value("hours"), cache=cache
    )
    metrics.add_metric(
        name="StatsCacheHits" if answer.cached else "StatsQueries", unit=MetricUnit.Count, value=1
    )
    return json_response(200, answer.model_dump(mode="json"))


handler = runtime.api_handler(app)
