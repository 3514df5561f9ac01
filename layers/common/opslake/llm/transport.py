"""One HTTP attempt at an OpenAI-compatible chat-completions endpoint, over httpx.

Builds the request (a strict ``json_schema`` response format, temperature 0), sends it once, and
either returns the answer validated against the asked pydantic model or raises
:class:`~opslake.llm.retry.AttemptFailed` carrying the :class:`~opslake.llm.errors.LlmError` that
names what went wrong: unavailable (timeouts, transport errors, 408/409/429/5xx), a spent quota,
a refused request (other 4xx), or an answer that is not JSON of the schema.

httpx is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from opslake.llm.errors import (
    LlmError,
    LlmInvalidAnswerError,
    LlmQuotaError,
    LlmRequestError,
    LlmUnavailableError,
)
from opslake.llm.retry import AttemptFailed, retry_after_s, retryable_status

if TYPE_CHECKING:
    import httpx

T = TypeVar("T", bound=BaseModel)

QUOTA_CODES = frozenset({"insufficient_quota"})
EXCERPT_CHARS = 200
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Reply(Generic[T]):
    """A validated answer of one attempt; ``model`` is the model the server says answered, if any."""

    value: T
    model: str | None
    status: int
    usage: tuple[int, int]


def request_body(
    messages: Sequence[Mapping[str, Any]],
    answer_model: type[BaseModel],
    *,
    model: str,
    max_tokens: int,
    schema_name: str | None = None,
) -> dict[str, Any]:
    """The chat-completions request asking for JSON of ``answer_model``'s schema."""
    return {
        "model": model,
        "messages": [dict(m) for m in messages],
        "temperature": 0,
        "max_tokens": max_tokens,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": _SCHEMA_NAME.sub("_", schema_name or answer_model.__name__)[:64],
                "strict": True,
                "schema": answer_model.model_json_schema(),
            },
        },
    }


def request_headers(api_key: str | None) -> dict[str, str]:
    """JSON in and out, and a bearer token when there is a key (local model servers need none)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class ChatTransport:
    """Sends one request per :meth:`send` to ``{base_url}/chat/completions``.

    ``http`` is an httpx client to use (and leave open); without one, a client with the given
    timeouts is built on first use and closed by :meth:`close`. ``clock`` (epoch seconds) dates
    a ``Retry-After`` given as an HTTP-date.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        http: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._http = http
        self._owns_http = http is None
        self._clock = clock

    def _client(self) -> httpx.Client:
        if self._http is None:
            import httpx

            self._http = httpx.Client(timeout=httpx.Timeout(self._timeout_s, connect=self._connect_timeout_s))
        return self._http

    def send(self, body: dict[str, Any], headers: dict[str, str], answer_model: type[T]) -> Reply[T]:
        """POST ``body`` once; the validated answer, or :class:`AttemptFailed` saying why not."""
        import httpx

        try:
            response = self._client().post(self.url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            kind = "connect timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
            error: LlmError = LlmUnavailableError(f"LLM request {kind}: {exc or type(exc).__name__}")
            error.error_type = "llm_timeout"
            raise AttemptFailed(error) from exc
        except httpx.TransportError as exc:
            error = LlmUnavailableError(f"LLM transport error: {type(exc).__name__}: {exc}")
            error.error_type = "llm_transport_error"
            raise AttemptFailed(error) from exc

        status = response.status_code
        if status >= 300:
            code, message = _server_error(response)
            if code in QUOTA_CODES:
                raise AttemptFailed(
                    LlmQuotaError(f"LLM quota exhausted ({status}): {message}", status=status)
                )
            if retryable_status(status):
                error = LlmUnavailableError(f"LLM answered {status}: {message}", status=status)
                error.error_type = f"llm_http_{status}"
                raise AttemptFailed(error, retry_after_s=retry_after_s(response.headers, self._clock()))
            raise AttemptFailed(
                LlmRequestError(f"LLM refused the request ({status}): {message}", status=status)
            )

        try:
            document = response.json()
        except ValueError:
            document = None
        usage = _usage(document)
        content = _content(document)
        if content is None:
            error = LlmInvalidAnswerError(
                "the LLM response has no choices[0].message.content",
                excerpt=_excerpt(response.text),
                status=status,
            )
            raise AttemptFailed(error, usage=usage)
        try:
            value = answer_model.model_validate_json(_unfence(content))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}" for e in exc.errors()[:3]
            )
            error = LlmInvalidAnswerError(
                f"the LLM answer is not a valid {answer_model.__name__}: {problems} — got {_excerpt(content)!r}",
                excerpt=_excerpt(content),
                status=status,
            )
            raise AttemptFailed(error, usage=usage) from exc
        model = document.get("model") if isinstance(document, dict) else None
        return Reply(
            value=value, model=model if isinstance(model, str) and model else None, status=status, usage=usage
        )

    def close(self) -> None:
        """Close the httpx client this transport built (a client passed in stays open)."""
        if self._owns_http and self._http is not None:
            self._http.close()
            self._http = None


def _server_error(response: httpx.Response) -> tuple[str | None, str]:
    """(error code or type, message) from an error body: OpenAI's ``{"error": {...}}`` or plain text."""
    try:
        document = response.json()
    except ValueError:
        return None, _excerpt(response.text) or response.reason_phrase
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        if error.get("type") in QUOTA_CODES:
            code = error["type"]
        message = error.get("message") or json.dumps(error)[:EXCERPT_CHARS]
        return (str(code) if code else None), _excerpt(str(message))
    if isinstance(error, str):
        return None, _excerpt(error)
    if isinstance(document, dict) and document.get("detail"):
        return None, _excerpt(str(document["detail"]))
    return None, _excerpt(response.text) or response.reason_phrase


def _usage(document: Any) -> tuple[int, int]:
    usage = document.get("usage") if isinstance(document, dict) else None
    if not isinstance(usage, dict):
        return 0, 0

    def count(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and value > 0 else 0

    return count("prompt_tokens"), count("completion_tokens")


def _content(document: Any) -> str | None:
    try:
        content = document["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _unfence(content: str) -> str:
    """The JSON inside a Markdown code fence, if the model wrapped its answer in one."""
    match = _FENCE.match(content)
    return match.group(1) if match else content


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
