"""Point an existing OpenTelemetry setup at opslake's ``POST /v1/traces`` (extra ``otel``).

For teams that already trace (OpenInference, OpenLLMetry, Logfire, the OpenAI Agents SDK): their
``execute_tool``, ``chat`` and ``invoke_agent`` spans become op records without a decorator.
The same can be done with environment variables alone::

    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=$OPSLAKE_URL/v1/traces
    OTEL_EXPORTER_OTLP_HEADERS="x-api-key=$OPSLAKE_API_KEY"
    OTEL_EXPORTER_OTLP_COMPRESSION=gzip
"""

from __future__ import annotations

import os
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
except ImportError as exc:  # say which install fixes it
    raise ImportError(
        f"opslake_sdk.otel needs the OpenTelemetry SDK and its OTLP/HTTP exporter ({exc}): "
        "pip install 'opslake-sdk[otel]'"
    ) from exc

from opslake_sdk import client
from opslake_sdk.client import ENV_AGENT_ID, ENV_API_KEY, ENV_URL

TRACES_PATH = "/v1/traces"
#: Spans per export. opslake reads at most 8 MiB of decompressed OTLP per request, behind API
#: Gateway's 10 MB and Lambda's 6 MB payload limits; API Gateway inflates the gzip body and hands
#: the protobuf to Lambda base64-encoded, so about 4.4 MB of spans fit: 512 spans (the SDK's
#: default) of up to ~8 KiB each. Spans carrying whole prompts and completions are larger: lower
#: this (64 for spans of 20-50 KiB).
MAX_EXPORT_BATCH_SIZE = 512
MAX_QUEUE_SIZE = 2048
SCHEDULE_DELAY_MILLIS = 2000


def _settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    url = client.base_url(base_url or os.environ.get(ENV_URL)) or ""
    key = api_key or os.environ.get(ENV_API_KEY) or ""
    if not url or not key:
        raise ValueError(f"give base_url and api_key, or set {ENV_URL} and {ENV_API_KEY}")
    return url, key


def exporter(
    base_url: str | None = None, api_key: str | None = None, *, timeout: float = 10.0
) -> OTLPSpanExporter:
    """An OTLP/HTTP protobuf span exporter for opslake: ``<base_url>/v1/traces``, the API key in
    ``x-api-key``, gzip on. ``base_url`` and ``api_key`` default to ``OPSLAKE_URL`` and
    ``OPSLAKE_API_KEY``. The exporter retries 429/502/503/504 itself, honouring ``Retry-After``;
    op ids derive from trace and span ids, so a resent batch is stored once."""
    url, key = _settings(base_url, api_key)
    return OTLPSpanExporter(
        endpoint=f"{url}{TRACES_PATH}",
        headers={"x-api-key": key},
        compression=Compression.Gzip,
        timeout=timeout,
    )


def configure(
    tracer_provider: Any = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    service_name: str | None = None,
    max_export_batch_size: int = MAX_EXPORT_BATCH_SIZE,
    max_queue_size: int = MAX_QUEUE_SIZE,
    schedule_delay_millis: int = SCHEDULE_DELAY_MILLIS,
) -> TracerProvider:
    """Add a :class:`BatchSpanProcessor` exporting to opslake to ``tracer_provider`` (default: the
    global provider if it is an SDK one, else a new one installed as global, ``service.name``
    from ``service_name`` or ``OPSLAKE_AGENT_ID``). Returns the provider.

    The batch settings keep every export under opslake's limits: API Gateway takes 10 MB and
    Lambda 6 MB (about 4.4 MB of uncompressed protobuf, base64-encoded), and opslake reads at most
    8 MiB after gzip; ``max_export_batch_size`` 512 spans of up to ~8 KiB each fit. Lower it if your
    spans carry whole prompts (see :data:`MAX_EXPORT_BATCH_SIZE`)."""
    provider: TracerProvider = tracer_provider
    if provider is None:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            provider = current
        else:
            name = service_name or os.environ.get(ENV_AGENT_ID) or "agent"
            provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
            trace.set_tracer_provider(provider)
    processor = BatchSpanProcessor(
        exporter(base_url, api_key),
        max_queue_size=max_queue_size,
        schedule_delay_millis=schedule_delay_millis,
        max_export_batch_size=min(max_export_batch_size, max_queue_size),
    )
    provider.add_span_processor(processor)
    return provider
