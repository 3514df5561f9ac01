"""One Logger, Tracer and Metrics for the whole service, created once per container.

Service name and metrics namespace come from Powertools' own variables
(POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE) set in template.yaml.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(service="opslake")
tracer = Tracer(service="opslake")
metrics = Metrics(namespace="opslake", service="opslake")

__all__ = ["MetricUnit", "logger", "metrics", "tracer"]
