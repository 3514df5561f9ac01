"""The LLM client the analyzer (and the consolidator) ask for structured JSON answers."""

from opslake.llm.breaker import CircuitBreaker
from opslake.llm.client import LlmAnswer, LlmCall, LlmClient, LlmConfig
from opslake.llm.errors import (
    LlmError,
    LlmInvalidAnswerError,
    LlmKeyError,
    LlmQuotaError,
    LlmRequestError,
    LlmStateError,
    LlmUnavailableError,
)
from opslake.llm.keys import fetch_api_key, key_source
from opslake.llm.ledger import LlmStateStore, UsageLedger

__all__ = [
    "CircuitBreaker",
    "LlmAnswer",
    "LlmCall",
    "LlmClient",
    "LlmConfig",
    "LlmError",
    "LlmInvalidAnswerError",
    "LlmKeyError",
    "LlmQuotaError",
    "LlmRequestError",
    "LlmStateError",
    "LlmStateStore",
    "LlmUnavailableError",
    "UsageLedger",
    "fetch_api_key",
    "key_source",
]
