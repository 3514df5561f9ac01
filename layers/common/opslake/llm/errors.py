"""What can go wrong when asking the model, one class per thing the caller does differently.

* :class:`LlmUnavailableError` — transient failures outlived the retries, the network failed, or
  the circuit is open: use the heuristic now, try the model on a later run.
* :class:`LlmQuotaError` — the account's quota is spent (never retried): same, but tell an operator.
* :class:`LlmRequestError` — the endpoint refused the request (4xx): a bug or a configuration error.
* :class:`LlmInvalidAnswerError` — the model answered, but not JSON of the asked schema: ask once
  more, then fall back.
* :class:`LlmKeyError` — the API key could not be read from its parameter or secret.
"""

from __future__ import annotations


class LlmError(Exception):
    """Base class; ``error_type`` is a stable name for op records and metrics."""

    error_type = "llm_error"

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.attempts = attempts


class LlmUnavailableError(LlmError):
    """Timeouts, transport errors, 408/409/429/5xx beyond the retries, or an open circuit."""

    error_type = "llm_unavailable"

    def __init__(
        self, message: str, *, status: int | None = None, attempts: int = 0, circuit_open: bool = False
    ) -> None:
        super().__init__(message, status=status, attempts=attempts)
        self.circuit_open = circuit_open


class LlmQuotaError(LlmError):
    """The provider says the quota is spent (429 ``insufficient_quota``): retrying cannot help."""

    error_type = "llm_quota_exhausted"


class LlmRequestError(LlmError):
    """A 4xx other than 408/409/429: ``message`` carries the server's own words."""

    error_type = "llm_request_refused"


class LlmInvalidAnswerError(LlmError):
    """The answer was not JSON valid against the schema; ``excerpt`` is the start of what came back."""

    error_type = "llm_invalid_answer"

    def __init__(self, message: str, *, excerpt: str, status: int | None = 200, attempts: int = 0) -> None:
        super().__init__(message, status=status, attempts=attempts)
        self.excerpt = excerpt


class LlmKeyError(LlmError):
    """The configured key parameter or secret could not be read (an operator's problem)."""

    error_type = "llm_key_unavailable"


class LlmStateError(Exception):
    """The LLM state object could not be saved to the lake."""
