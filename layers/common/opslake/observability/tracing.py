"""The service's one Tracer (X-Ray, through Powertools); see opslake.observability for why apart."""

from __future__ import annotations

from aws_lambda_powertools import Tracer

tracer = Tracer(service="opslake")

__all__ = ["tracer"]
