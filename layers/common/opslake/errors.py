"""Domain errors, and the one place that maps them to HTTP answers.

Every error an agent can cause says what was wrong and how to fix it; every error the service
causes says so too (5xx) and never leaks a stack trace.
"""

from __future__ import annotations

from typing import Any


class OpslakeError(Exception):
    """Base class: ``status`` is the HTTP status, ``code`` a stable machine-readable name."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, detail: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return body


class BadRequestError(OpslakeError):
    status = 400
    code = "bad_request"


class MalformedJsonError(BadRequestError):
    code = "malformed_json"


class UndecodableBodyError(BadRequestError):
    """The body's bytes are not text opslake reads: not valid UTF-8 (UTF-16, Latin-1, binary)."""

    code = "invalid_encoding"


class JsonTooDeepError(MalformedJsonError):
    """The JSON body nests deeper than opslake parses (checked before parsing, without recursion)."""

    code = "json_too_deep"


class InvalidOpsError(BadRequestError):
    """Every op in a request was invalid; ``detail`` lists each with its index and reason."""

    code = "invalid_ops"


class ForbiddenError(OpslakeError):
    status = 403
    code = "forbidden"


class UnsupportedMediaTypeError(OpslakeError):
    """The body is in a content type or content encoding the route does not read (e.g. gzip)."""

    status = 415
    code = "unsupported_media_type"


class PayloadTooLargeError(OpslakeError):
    status = 413
    code = "payload_too_large"


class ServiceUnavailableError(OpslakeError):
    """A dependency failed transiently; the client should retry after ``Retry-After`` seconds."""

    status = 503
    code = "service_unavailable"

    def __init__(self, message: str, *, retry_after_s: int, detail: Any = None) -> None:
        super().__init__(message, detail=detail, headers={"Retry-After": str(retry_after_s)})
        self.retry_after_s = retry_after_s


class NotFoundError(OpslakeError):
    """What the client asked about does not exist (e.g. an agent with no ops in the window)."""

    status = 404
    code = "not_found"


class BadGatewayError(OpslakeError):
    """A dependency answered but failed (e.g. the query engine refused or failed a query)."""

    status = 502
    code = "bad_gateway"


class QueryEngineFailedError(BadGatewayError):
    """The lake's query engine failed a query opslake built: a service problem, not the client's."""

    code = "query_failed"


class QueryUnavailableError(ServiceUnavailableError):
    """The query engine timed out or was throttled/unreachable; retry after ``Retry-After``."""

    code = "query_unavailable"


class SqlError(BadRequestError):
    """The agent's SQL failed: refused by the engine (unknown column, syntax, …) or by the guard.

    ``code`` is stable per kind of failure (``sql_column_not_found``, ``sql_syntax_error``, …) so the
    analyzer can group failures; the message is the engine's own words, so the agent can fix its SQL.
    """

    code = "sql_failed"

    def __init__(self, message: str, *, code: str | None = None, detail: Any = None) -> None:
        super().__init__(message, detail=detail)
        if code:
            self.code = code


class SqlRejectedError(SqlError):
    """The read-only guard refused the SQL (not one query, or a table that is not allowed)."""

    code = "sql_rejected"


class SqlEngineError(BadGatewayError):
    """The engine failed an agent's query for a reason of its own (storage, internal error)."""

    code = "sql_engine_failed"

    def __init__(self, message: str, *, code: str | None = None, detail: Any = None) -> None:
        super().__init__(message, detail=detail)
        if code:
            self.code = code


class SqlUnavailableError(QueryUnavailableError):
    """An agent's query timed out or the engine was throttled: retry after ``Retry-After``."""

    code = "sql_unavailable"

    def __init__(
        self, message: str, *, retry_after_s: int, code: str | None = None, detail: Any = None
    ) -> None:
        super().__init__(message, retry_after_s=retry_after_s, detail=detail)
        if code:
            self.code = code


class InternalError(OpslakeError):
    """A bug or an unexpected failure in opslake itself (details go to the log, not the client)."""


class ConfigurationError(OpslakeError):
    """The function was deployed without a setting it needs: an operator's problem, not a client's."""

    code = "configuration_error"


class QueueError(Exception):
    """The ops queue did not accept records (after retries)."""


class LakeWriteError(Exception):
    """S3 or Glue failed while writing a partition; the writer reports its records for retry."""


def error_response_parts(exc: OpslakeError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) for an error: used by every HTTP handler's exception handler."""
    return exc.status, exc.body(), exc.headers


class CompactionError(Exception):
    """Compacting one partition failed (reported per partition; the next run retries it)."""
