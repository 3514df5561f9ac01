"""One Logger and one Metrics for the whole service, created once per container.

The Tracer lives in :mod:`opslake.observability.tracing`, built on a function's first invocation:
building it loads the X-Ray SDK and patches botocore, which no handler's import should pay for.
Metrics go to the namespace ``opslake`` under the dimension ``service`` = POWERTOOLS_SERVICE_NAME,
which template.yaml sets to the stack's name: two stacks in one account and region (staging and
prod) then keep apart metrics, and each stack's alarms and dashboard read its own. Logs and traces
keep the service name ``opslake``.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(service="opslake")
#: The namespace every alarm and the dashboard of template.yaml read.
METRICS_NAMESPACE = "opslake"
metrics = Metrics(namespace=METRICS_NAMESPACE, service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "opslake")

__all__ = ["MetricUnit", "logger", "metrics"]
