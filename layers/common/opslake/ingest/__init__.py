"""The way in: how an op becomes a queued record.

``events`` validates the ops runtimes post to ``POST /events``; ``observe`` is the middleware that
turns every gateway tool call into an op record; ``redact`` scrubs secrets from text, attribute
values and ids by shape and by meaning (the op models apply it, so nothing unredacted leaves a
Lambda; ``provider_rules`` is its data, generated from gitleaks' rule set). ``tool_errors`` fails a
tool op whose result is an error while the op claims success (``/events`` and OTLP alike). An OTLP
decoder for ``POST /v1/traces`` belongs beside ``events``. Names resolve lazily (``models.ops``
imports ``redact`` from here).
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "events": (
            "MAX_OPS_PER_REQUEST",
            "MAX_REQUEST_BYTES",
            "IngestResult",
            "RedactedIds",
            "RejectedOp",
            "ingest",
        ),
        "observe": (
            "MCP_TRANSPORT",
            "SESSION_HEADER",
            "TASK_CLASS_HEADER",
            "TRACE_HEADER",
            "TRANSPORT_MARKER",
            "Observer",
            "build_record",
            "caller_name",
            "observe",
            "source_of",
            "summarize",
            "summarize_request",
        ),
        "tool_errors": (
            "FAILURE_INFERRED",
            "TOOL_ERROR_RESULT",
            "ToolError",
            "tool_error_of",
            "with_inferred_failure",
        ),
        "redact": (
            "IDENTITY_FIELDS",
            "LABEL_REDACTED",
            "REDACTED",
            "holds_credential_shape",
            "identity_key",
            "is_secret_key",
            "public_id",
            "redact",
            "redact_attribute",
            "redact_identifier",
            "redact_label",
            "redacted_identifier",
        ),
    },
)
