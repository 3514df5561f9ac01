"""The model behind ``POST /ask``: the analyzer's LLM client, one attempt per call, timed by the budget.

:class:`LlmAskModel` adapts :class:`~opslake.llm.LlmClient` to :class:`~opslake.tools.ask.AskModel`:
no retries inside a call (the pipeline's budget of calls is the bound; a retry would hide in it), and
each call's HTTP timeout is the time the question has left. The client is this container's: its
circuit breaker starts from the state the analyzer saved (``llm_state_key``) and then lives in
memory, so a container that saw the model fail stops calling it for the cooldown (``/ask`` never
writes that state: the analyzer owns it). Failures become the one error mapping's types:

* no model configured → 503 ``ask_not_configured`` saying which parameters to set;
* circuit open, timeouts, 5xx/429 → 503 ``llm_unavailable`` with ``Retry-After``;
* a spent quota → 503 ``llm_quota_exhausted``; an unreadable key → 503 ``llm_key_unavailable``;
* the endpoint refusing the request (a wrong model name or key) → 502 ``llm_request_refused``;
* an answer that is not the asked JSON → :class:`~opslake.tools.ask.InvalidModelAnswer` (the
  pipeline asks again within its budget, then answers 502).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from opslake.errors import BadGatewayError, ServiceUnavailableError
from opslake.llm.errors import (
    LlmError,
    LlmInvalidAnswerError,
    LlmKeyError,
    LlmQuotaError,
    LlmUnavailableError,
)
from opslake.tools.ask import InvalidModelAnswer, retry_after

if TYPE_CHECKING:
    import httpx

    from opslake.config import Settings
    from opslake.llm import LlmClient

T = TypeVar("T", bound=BaseModel)

NOT_CONFIGURED = (
    "POST /ask needs a model and none is configured: deploy with the template parameters LlmBaseUrl "
    "(an OpenAI-compatible API, e.g. https://api.openai.com/v1) and LlmModel, plus LlmApiKeyParameter "
    "(an SSM SecureString holding the key) when the API needs a key — in the function's environment "
    "OPSLAKE_LLM_BASE_URL, OPSLAKE_LLM_MODEL and OPSLAKE_LLM_API_KEY_PARAMETER (on the local stack: "
    "export OPSLAKE_LLM_BASE_URL and OPSLAKE_LLM_MODEL before opslake local up). Until then, "
    "POST /search ranks rows without prose and POST /sql runs your own query."
)
#: Retry-After of a 503 that only an operator can end (no model, a spent quota).
OPERATOR_RETRY_AFTER_S = 3600


class AskNotConfiguredError(ServiceUnavailableError):
    code = "ask_not_configured"


class LlmUnavailableHttpError(ServiceUnavailableError):
    code = "llm_unavailable"


class LlmRefusedError(BadGatewayError):
    code = "llm_request_refused"


def require_model(settings: Settings) -> None:
    """A 503 saying how to configure a model, when none is."""
    if not (settings.llm_base_url and settings.llm_model):
        raise AskNotConfiguredError(NOT_CONFIGURED, retry_after_s=OPERATOR_RETRY_AFTER_S)


def model_error(exc: LlmError, *, client: LlmClient, retry_after_s: int) -> Exception:
    """The HTTP error of a failed model call (see the module docstring)."""
    if isinstance(exc, LlmInvalidAnswerError):
        return InvalidModelAnswer(exc.message)
    if isinstance(exc, LlmUnavailableError):
        wait = client.breaker.seconds_until_trial() if exc.circuit_open else 0.0
        error = LlmUnavailableHttpError(
            f"the model is unavailable ({exc.message}); retry after the Retry-After seconds, or use "
            "POST /search or POST /sql meanwhile",
            retry_after_s=retry_after(wait, retry_after_s),
            detail={"llm_error": exc.error_type, "circuit_open": exc.circuit_open},
        )
        return error
    if isinstance(exc, LlmQuotaError | LlmKeyError):
        unavailable = LlmUnavailableHttpError(
            f"the model cannot be called: {exc.message}; an operator must fix it",
            retry_after_s=OPERATOR_RETRY_AFTER_S if isinstance(exc, LlmQuotaError) else retry_after_s,
            detail={"llm_error": exc.error_type},
        )
        unavailable.code = exc.error_type
        return unavailable
    fix = (
        "check the key (the SSM parameter LlmApiKeyParameter names, OPSLAKE_LLM_API_KEY_PARAMETER)"
        if exc.status in (401, 403)
        else "check LlmModel (OPSLAKE_LLM_MODEL) and LlmBaseUrl"
    )
    return LlmRefusedError(
        f"the model endpoint refused the request: {exc.message}; {fix}",
        detail={"llm_error": exc.error_type, "status": exc.status},
    )


def total_timeout_transport() -> Any:
    """An httpx transport that bounds a whole request, body included, by its ``limit_s``.

    httpx's read timeout is the wait *between* bytes: a model that sends its answer a few bytes at a
    time never trips it, and one call could outlast the question's budget and API Gateway's 29 s.
    Here the request runs in a worker thread and is given up at ``limit_s`` as a read timeout (the
    client's own mapping makes that ``llm_timeout``); the abandoned thread ends at its socket's own
    read timeout. Built by a function so that httpx is imported on first use only."""
    import threading

    import httpx

    class TotalTimeout(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()
            self.limit_s: float | None = None

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            limit = self.limit_s
            if limit is None:
                return self.inner.handle_request(request)
            box: dict[str, Any] = {}

            def run() -> None:
                try:
                    response = self.inner.handle_request(request)
                    response.read()  # the body too: a trickled body is the case this is for
                    box["response"] = response
                except Exception as exc:
                    box["error"] = exc

            worker = threading.Thread(target=run, name="ask-llm-call", daemon=True)
            worker.start()
            worker.join(limit)
            if worker.is_alive():
                raise httpx.ReadTimeout(f"no whole answer within {limit:.1f} s", request=request)
            if "error" in box:
                raise box["error"]
            response: httpx.Response = box["response"]
            return response

        def close(self) -> None:
            self.inner.close()

    return TotalTimeout()


class LlmAskModel:
    """An :class:`~opslake.tools.ask.AskModel` over an :class:`LlmClient` and the httpx client it uses
    (whose transport, when it is :func:`total_timeout_transport`'s, bounds each whole call)."""

    def __init__(
        self, client: LlmClient, http: httpx.Client, *, retry_after_s: int = 5, total: Any = None
    ) -> None:
        self.client = client
        self.name = client.config.model
        self._http = http
        self._total = total
        self._retry_after_s = retry_after_s

    def complete(self, messages: list[dict[str, str]], answer_model: type[T], *, timeout_s: float) -> T:
        import httpx

        connect = min(self.client.config.connect_timeout_s, timeout_s)
        call_s = min(self.client.config.timeout_s, timeout_s)
        self._http.timeout = httpx.Timeout(call_s, connect=connect)
        if self._total is not None:
            self._total.limit_s = call_s
        try:
            answer = self.client.complete_json(messages, answer_model, schema_name=answer_model.__name__)
        except LlmError as exc:
            raise model_error(exc, client=self.client, retry_after_s=self._retry_after_s) from exc
        return answer.value


def ask_model_from_settings(settings: Settings, *, s3_client: Any) -> LlmAskModel:
    """This container's model: the configured endpoint, no retries inside a call, the key read on
    first use (opslake.llm.keys), the breaker restored from the analyzer's saved state."""
    import httpx

    from opslake.llm import LlmClient, LlmConfig, LlmStateStore
    from opslake.llm.keys import key_loader
    from opslake.models.ops import now_utc

    require_model(settings)
    config = dataclasses.replace(LlmConfig.from_settings(settings), max_retries=0)
    total = total_timeout_transport()
    http = httpx.Client(
        timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s), transport=total
    )
    saved = None
    if settings.lake_bucket:
        saved = LlmStateStore(lambda: s3_client, settings.lake_bucket, settings.llm_state_key).load(
            now=now_utc(), model=config.model
        )
    client = LlmClient(
        config, api_key=key_loader(settings.llm_api_key_parameter), http=http, initial_state=saved
    )
    return LlmAskModel(client, http, retry_after_s=settings.queue_retry_after_s, total=total)
