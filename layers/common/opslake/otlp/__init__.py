"""OpenTelemetry in: ``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON, gzip) turns the spans of AI
agents (GenAI semantic conventions, OpenInference) into op records.

Modules: :mod:`.decode` (content type, bounded decompression, parsing), :mod:`.mapping` (which
spans are ops and what each becomes), :mod:`.ingest` (validate like /events, enqueue),
:mod:`.responses` (the OTLP answers). Imports protobuf, never pyarrow: this is the request path.
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "decode": ("Export", "decode_export"),
        "ingest": ("TraceIngestResult", "ingest_export"),
        "mapping": ("map_export", "span_to_op"),
        "responses": ("OtlpAnswer", "error_answer", "success_answer"),
    },
)
