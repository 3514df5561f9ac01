"""One Logger and one Metrics for the whole service, created once per container.

The Tracer lives in :mod:`opslake.observability.tracing`, built on a function's first invocation:
building it loads the X-Ray SDK and patches botocore, which no handler's import should pay for.
Service name and metrics namespace come from Powertools' own variables
(POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE) set in template.yaml.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(service="opslake")
metrics = Metrics(namespace="opslake", service="opslake")

__all__ = ["MetricUnit", "logger", "metrics"]
