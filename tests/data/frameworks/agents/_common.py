"""What every recorded agent shares: the two tools, the question, and an OTLP/protobuf exporter to
the recorder's collector (run inside the framework's own venv: no opslake import)."""

from __future__ import annotations

import os

AGENT_NAME = "support_agent"
QUESTION = "Where is order A1, and please cancel it."
MODEL = "fake-model"
BASE_URL = os.environ["OPENAI_BASE_URL"]  # the recorder's fake OpenAI-compatible server
API_KEY = "sk-fake-key-for-recording"


def lookup_order(order_id: str) -> str:
    """Look up where an order is."""
    return f"order {order_id}: shipped on 2026-11-20, arriving 2026-11-30"


def cancel_order(order_id: str) -> str:
    """Cancel an order that has not shipped yet."""
    raise ValueError(f"order {order_id} has already shipped and cannot be cancelled")


def tracer_provider(service: str):  # type: ignore[no-untyped-def]
    """An SDK tracer provider batching spans to the collector (OTLP/HTTP protobuf), as deployments do:
    a short run arrives in one export at shutdown."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint from OTEL_EXPORTER_OTLP_*
    return provider
