"""Pydantic contracts: op records (``ops``), the time window (``window``), analysis results
(``analysis``), playbook entries (``playbooks``), LLM state (``llm``), /stats and /profile answers
(``insights``), readable validation messages (``validation``), ids (``ids``) and the gateway tools'
inputs shared by their REST routes and their MCP schemas (``tools``)."""

from opslake.models.ops import (
    MAX_ATTRIBUTE_KEY_CHARS,
    MAX_ATTRIBUTE_VALUE_CHARS,
    MAX_ATTRIBUTES,
    MAX_ERROR_CHARS,
    MAX_FUTURE_SKEW,
    MAX_ID_CHARS,
    MAX_RECORD_BYTES,
    MAX_SUMMARY_CHARS,
    TRUNCATION_MARK,
    OpInput,
    OpRecord,
    OpRow,
    QueuedOp,
    now_utc,
)
from opslake.models.window import Window

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_KEY_CHARS",
    "MAX_ATTRIBUTE_VALUE_CHARS",
    "MAX_ERROR_CHARS",
    "MAX_FUTURE_SKEW",
    "MAX_ID_CHARS",
    "MAX_RECORD_BYTES",
    "MAX_SUMMARY_CHARS",
    "TRUNCATION_MARK",
    "OpInput",
    "OpRecord",
    "OpRow",
    "QueuedOp",
    "Window",
    "now_utc",
]
