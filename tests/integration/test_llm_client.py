"""The LLM client against a fake OpenAI-compatible server over loopback, with its state in moto S3."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from types import ModuleType
from typing import Any

import boto3
import httpx
import pytest

from opslake.config import load_settings
from opslake.llm import (
    LlmCall,
    LlmClient,
    LlmConfig,
    LlmInvalidAnswerError,
    LlmKeyError,
    LlmQuotaError,
    LlmRequestError,
    LlmStateError,
    LlmStateStore,
    LlmUnavailableError,
    fetch_api_key,
)
from opslake.llm.keys import provider
from opslake.llm.ledger import LlmChanges
from opslake.models.analysis import DiagnosisAnswer
from opslake.models.llm import LlmState
from tests.conftest import api_event
from tests.fake_llm import FakeLlm
from tests.integration.conftest import BUCKET, Aws

GOOD = {
    "cause": "the agent queries a column that does not exist",
    "agent_adjustment": "describe the table first and use the listed column names",
    "avoid": False,
    "category": "unknown_column",
    "confidence": 0.8,
}
MESSAGES = [
    {"role": "system", "content": "You diagnose failing tool calls. Answer JSON only."},
    {"role": "user", "content": "Signature: SELECT <col> FROM workers -> COLUMN_NOT_FOUND"},
]
STATE_KEY = "state/llm.json"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 21, 10, 0, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def llm() -> Iterator[FakeLlm]:
    with FakeLlm() as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_client(llm: FakeLlm, sleeps: list[float], clock: Clock) -> Iterator[Callable[..., LlmClient]]:
    made: list[LlmClient] = []

    def make(*, store: LlmStateStore | None = None, api_key: Any = None, **config: Any) -> LlmClient:
        client = LlmClient(
            LlmConfig(**{"base_url": llm.base_url, "model": "fake-model", **config}),
            api_key=api_key,
            state_store=store,
            sleep=sleeps.append,
            clock=clock,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def fresh_parameters() -> Iterator[None]:
    """The key providers (and the values they cache) live per process: start and end each key test clean."""
    provider.cache_clear()
    yield
    provider.cache_clear()


# ---- a valid answer ----------------------------------------------------------------------------
def test_a_valid_answer_is_parsed_and_the_request_asks_for_strict_json_schema(
    llm: FakeLlm, make_client: Callable[..., LlmClient]
) -> None:
    llm.script(FakeLlm.answer(GOOD, tokens_in=321, tokens_out=45, model="fake-model-2026-01"))
    seen: list[LlmCall] = []
    client = make_client(max_output_tokens=444)
    client._on_call = seen.append

    answer = client.complete_json(MESSAGES, DiagnosisAnswer, schema_name="diagnosis")

    assert answer.value == DiagnosisAnswer(**GOOD)
    assert (answer.model, answer.tokens_in, answer.tokens_out, answer.attempts) == (
        "fake-model-2026-01", 321, 45, 1
    )  # fmt: skip
    assert answer.latency_ms > 0
    [request] = llm.completions
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "fake-model",
        "messages": MESSAGES,
        "temperature": 0,
        "max_tokens": 444,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "diagnosis",
                "strict": True,
                "schema": DiagnosisAnswer.model_json_schema(),
            },
        },
    }
    assert "authorization" not in {h.lower() for h in request.headers}  # no key configured
    [call] = client.calls
    assert seen == [call]
    assert (call.success, call.status, call.error_type, call.tokens_in, call.tokens_out, call.model) == (
        True, 200, None, 321, 45, "fake-model"
    )  # fmt: skip
    assert call.started_at == datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    state = client.state()
    assert (state.tokens_in_24h, state.tokens_out_24h, state.recent_error_rate) == (321, 45, 0.0)


def test_a_json_answer_in_a_code_fence_is_accepted(
    llm: FakeLlm, make_client: Callable[..., LlmClient]
) -> None:
    llm.script(FakeLlm.answer("```json\n" + json.dumps(GOOD) + "\n```"))
    assert make_client().complete_json(MESSAGES, DiagnosisAnswer).value.category == "unknown_column"


def test_the_fake_server_lists_its_models(llm: FakeLlm) -> None:
    response = httpx.get(llm.base_url + "/models")
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "fake-model"


# ---- retries -----------------------------------------------------------------------------------
def test_429_with_retry_after_seconds_is_retried_after_the_advertised_delay(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float]
) -> None:
    llm.script(FakeLlm.error(429, "slow down", type="rate_limit_exceeded", headers={"Retry-After": "7"}))
    llm.script(FakeLlm.answer(GOOD))
    answer = make_client().complete_json(MESSAGES, DiagnosisAnswer)
    assert (answer.attempts, len(llm.completions), sleeps) == (2, 2, [7.0])


def test_retry_after_is_capped(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float], clock: Clock
) -> None:
    in_an_hour = format_datetime(datetime.fromtimestamp(clock.now + 3600, UTC), usegmt=True)
    llm.script(
        FakeLlm.error(429, headers={"Retry-After": "120"}),
        FakeLlm.error(503, headers={"Retry-After": in_an_hour}),  # an HTTP-date
        FakeLlm.answer(GOOD),
    )
    answer = make_client(retry_after_cap_s=12).complete_json(MESSAGES, DiagnosisAnswer)
    assert (answer.attempts, sleeps) == (3, [12.0, 12.0])


def test_retry_after_as_an_http_date_is_honoured(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float], clock: Clock
) -> None:
    soon = format_datetime(datetime.fromtimestamp(clock.now + 4, UTC), usegmt=True)
    llm.script(FakeLlm.error(529, "overloaded", headers={"Retry-After": soon}), FakeLlm.answer(GOOD))
    assert make_client().complete_json(MESSAGES, DiagnosisAnswer).attempts == 2
    assert sleeps == [pytest.approx(4.0)]


def test_500s_are_retried_with_jittered_exponential_backoff_then_succeed(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float]
) -> None:
    llm.script(FakeLlm.error(500), FakeLlm.error(502), FakeLlm.error(408), FakeLlm.answer(GOOD))
    client = make_client(max_retries=3)
    answer = client.complete_json(MESSAGES, DiagnosisAnswer)
    assert (answer.attempts, len(llm.completions)) == (4, 4)
    assert len(sleeps) == 3
    assert all(0 <= delay <= cap for delay, cap in zip(sleeps, (0.5, 1.0, 2.0), strict=True))
    assert [(c.success, c.status, c.error_type) for c in client.calls] == [
        (False, 500, "llm_http_500"), (False, 502, "llm_http_502"), (False, 408, "llm_http_408"),
        (True, 200, None),
    ]  # fmt: skip
    assert [c.attempt for c in client.calls] == [1, 2, 3, 4]
    assert client.state().circuit_breaker == "closed"


def test_exhausted_retries_raise_unavailable(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float]
) -> None:
    llm.default = FakeLlm.error(503, "upstream overloaded")
    client = make_client(max_retries=2)
    with pytest.raises(LlmUnavailableError) as caught:
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert (caught.value.status, caught.value.attempts, caught.value.circuit_open) == (503, 3, False)
    assert "upstream overloaded" in caught.value.message
    assert (len(llm.completions), len(sleeps), len(client.calls)) == (3, 2, 3)
    assert client.state().recent_error_rate == 1.0


def test_a_read_timeout_is_retried(llm: FakeLlm, make_client: Callable[..., LlmClient]) -> None:
    llm.script(FakeLlm.slow(2.0), FakeLlm.answer(GOOD))
    client = make_client(timeout_s=0.3)
    answer = client.complete_json(MESSAGES, DiagnosisAnswer)
    assert (answer.attempts, len(llm.completions)) == (2, 2)
    assert [(c.status, c.error_type) for c in client.calls] == [(None, "llm_timeout"), (200, None)]
    assert 250 <= client.calls[0].latency_ms < 2000


def test_connection_refused_is_retried_then_unavailable(
    make_client: Callable[..., LlmClient], sleeps: list[float]
) -> None:
    client = make_client(base_url="http://127.0.0.1:9/v1", max_retries=1, connect_timeout_s=1)
    with pytest.raises(LlmUnavailableError, match=r"transport error|timeout"):
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert len(client.calls) == 2 and len(sleeps) == 1


# ---- errors that are never retried -------------------------------------------------------------
def test_insufficient_quota_is_never_retried(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float]
) -> None:
    llm.script(FakeLlm.quota(), FakeLlm.answer(GOOD))
    client = make_client()
    with pytest.raises(LlmQuotaError, match="exceeded your current quota") as caught:
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert (caught.value.status, caught.value.attempts) == (429, 1)
    assert (len(llm.completions), sleeps) == (1, [])
    assert client.calls[0].error_type == "llm_quota_exhausted"


def test_a_400_is_a_request_error_with_the_servers_message(
    llm: FakeLlm, make_client: Callable[..., LlmClient], sleeps: list[float]
) -> None:
    llm.script(FakeLlm.error(400, "Invalid schema for response_format 'x'", type="invalid_request_error"))
    client = make_client()
    with pytest.raises(LlmRequestError, match="Invalid schema for response_format") as caught:
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert caught.value.status == 400
    assert (len(llm.completions), sleeps) == (1, [])
    assert client.breaker.consecutive_failures == 0  # the endpoint is up: not a breaker failure


def test_prose_instead_of_json_is_an_invalid_answer(
    llm: FakeLlm, make_client: Callable[..., LlmClient]
) -> None:
    llm.script(FakeLlm.prose("Sure! The ops fail because the column does not exist."))
    client = make_client()
    with pytest.raises(LlmInvalidAnswerError) as caught:
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert caught.value.excerpt == "Sure! The ops fail because the column does not exist."
    assert len(llm.completions) == 1
    assert (client.calls[0].success, client.calls[0].error_type) == (False, "llm_invalid_answer")
    assert client.calls[0].tokens_in == 100  # tokens were spent all the same
    state = client.state()
    assert (state.circuit_breaker, state.consecutive_failures, state.recent_error_rate) == ("closed", 0, 1.0)


def test_json_that_violates_the_schema_is_an_invalid_answer(
    llm: FakeLlm, make_client: Callable[..., LlmClient]
) -> None:
    llm.script(FakeLlm.answer({**GOOD, "category": "cosmic_rays", "confidence": 3}))
    with pytest.raises(LlmInvalidAnswerError, match="category") as caught:
        make_client().complete_json(MESSAGES, DiagnosisAnswer)
    assert "cosmic_rays" in caught.value.excerpt


def test_an_answer_without_content_is_an_invalid_answer(
    llm: FakeLlm, make_client: Callable[..., LlmClient]
) -> None:
    from tests.fake_llm import Reply

    llm.script(Reply(200, "<html>gateway page</html>"))
    with pytest.raises(LlmInvalidAnswerError, match="no choices") as caught:
        make_client().complete_json(MESSAGES, DiagnosisAnswer)
    assert caught.value.excerpt == "<html>gateway page</html>"


# ---- circuit breaker ---------------------------------------------------------------------------
def test_the_circuit_opens_after_n_failed_calls_then_makes_no_requests_until_a_trial_closes_it(
    aws: Aws, llm: FakeLlm, make_client: Callable[..., LlmClient], clock: Clock
) -> None:
    store = LlmStateStore(aws.s3, BUCKET, STATE_KEY)
    llm.default = FakeLlm.error(500)
    client = make_client(store=store, max_retries=1, breaker_failures=2, breaker_cooldown_s=600)
    for _ in range(2):
        with pytest.raises(LlmUnavailableError):
            client.complete_json(MESSAGES, DiagnosisAnswer)
    assert len(llm.completions) == 4 and client.state().circuit_breaker == "open"

    with pytest.raises(LlmUnavailableError, match="circuit breaker is open") as caught:
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert caught.value.circuit_open
    assert len(llm.completions) == 4  # fail fast: not one request

    saved = client.save_state()
    stored = LlmState.model_validate_json(aws.read(STATE_KEY))
    assert stored == saved
    assert (stored.circuit_breaker, stored.consecutive_failures, stored.model) == ("open", 2, "fake-model")
    assert stored.opened_at == datetime.fromtimestamp(clock.now, UTC)

    # the next scheduled run: a new client restores the open circuit from S3 and still stays off
    clock.now += 300
    next_run = make_client(store=LlmStateStore(aws.s3, BUCKET, STATE_KEY), breaker_cooldown_s=600)
    with pytest.raises(LlmUnavailableError, match="circuit breaker is open"):
        next_run.complete_json(MESSAGES, DiagnosisAnswer)
    assert len(llm.completions) == 4

    # after the cooldown one trial goes out; its success closes the circuit
    clock.now += 300
    assert next_run.state().circuit_breaker == "half_open"
    llm.script(FakeLlm.answer(GOOD))
    assert next_run.complete_json(MESSAGES, DiagnosisAnswer).attempts == 1
    assert len(llm.completions) == 5
    assert next_run.save_state().circuit_breaker == "closed"
    assert LlmState.model_validate_json(aws.read(STATE_KEY)).circuit_breaker == "closed"


def test_a_failed_trial_reopens_the_circuit(
    llm: FakeLlm, make_client: Callable[..., LlmClient], clock: Clock
) -> None:
    opened = LlmState(
        circuit_breaker="open", recent_error_rate=1.0, updated_at=datetime.fromtimestamp(clock.now, UTC),
        consecutive_failures=3, opened_at=datetime.fromtimestamp(clock.now - 1000, UTC),
    )  # fmt: skip
    llm.default = FakeLlm.error(502)
    client = make_client(max_retries=2, breaker_cooldown_s=900)
    client._initial_state = opened
    with pytest.raises(LlmUnavailableError):
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert len(llm.completions) == 3  # the trial call, with its retries
    assert client.state().circuit_breaker == "open"
    with pytest.raises(LlmUnavailableError, match="circuit breaker is open"):
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert len(llm.completions) == 3


def test_invalid_answers_do_not_open_the_circuit(llm: FakeLlm, make_client: Callable[..., LlmClient]) -> None:
    llm.default = FakeLlm.prose()
    client = make_client(breaker_failures=2)
    for _ in range(4):
        with pytest.raises(LlmInvalidAnswerError):
            client.complete_json(MESSAGES, DiagnosisAnswer)
    assert (len(llm.completions), client.state().circuit_breaker) == (4, "closed")


def test_a_wrong_key_counts_against_the_breaker(make_client: Callable[..., LlmClient]) -> None:
    with FakeLlm(require_key="sk-right") as server:
        client = make_client(base_url=server.base_url, breaker_failures=2)
        client._api_key = "sk-wrong"
        for _ in range(2):
            with pytest.raises(LlmRequestError, match="Incorrect API key") as caught:
                client.complete_json(MESSAGES, DiagnosisAnswer)
            assert caught.value.status == 401
        assert client.state().circuit_breaker == "open"
        assert len(server.completions) == 2


# ---- state in S3 -------------------------------------------------------------------------------
def test_state_is_persisted_and_reloaded_by_a_new_client_with_usage_over_24h(
    aws: Aws, llm: FakeLlm, make_client: Callable[..., LlmClient], clock: Clock
) -> None:
    llm.script(FakeLlm.answer(GOOD, tokens_in=1000, tokens_out=100), FakeLlm.prose())
    first = make_client(store=LlmStateStore(aws.s3, BUCKET, STATE_KEY))
    first.complete_json(MESSAGES, DiagnosisAnswer)
    with pytest.raises(LlmInvalidAnswerError):
        first.complete_json(MESSAGES, DiagnosisAnswer)
    first.save_state()
    stored = json.loads(aws.read(STATE_KEY))
    assert (stored["tokens_in_24h"], stored["tokens_out_24h"], stored["recent_error_rate"]) == (
        1100,
        120,
        0.5,
    )
    assert "api_key" not in json.dumps(stored).lower()

    clock.now += 3 * 3600  # three hours later, a new run
    llm.script(FakeLlm.answer(GOOD, tokens_in=10, tokens_out=1))
    second = make_client(store=LlmStateStore(aws.s3, BUCKET, STATE_KEY))
    second.complete_json(MESSAGES, DiagnosisAnswer)
    saved = second.save_state()
    assert (saved.tokens_in_24h, saved.tokens_out_24h) == (1110, 121)
    assert saved.recent_error_rate == pytest.approx(1 / 3)
    assert len(saved.token_buckets) == 2

    clock.now += 22 * 3600  # a day after the first run: its hour has left the window
    assert make_client(store=LlmStateStore(aws.s3, BUCKET, STATE_KEY)).state().tokens_in_24h == 10


def test_a_missing_or_invalid_state_object_starts_closed(aws: Aws, clock: Clock) -> None:
    store = LlmStateStore(aws.s3, BUCKET, STATE_KEY)
    now = datetime.fromtimestamp(clock.now, UTC)
    assert store.load(now=now, model="m") == LlmState.fresh(now, "m")
    aws.s3.put_object(Bucket=BUCKET, Key=STATE_KEY, Body=b'{"circuit_breaker": "melted"}')
    assert store.load(now=now).circuit_breaker == "closed"
    aws.s3.put_object(Bucket=BUCKET, Key=STATE_KEY, Body=b"not json")
    assert store.load(now=now).circuit_breaker == "closed"


def test_a_failed_save_raises_a_clear_error(aws: Aws, clock: Clock) -> None:
    store = LlmStateStore(aws.s3, "no-such-bucket", STATE_KEY)
    with pytest.raises(LlmStateError, match=r"s3://no-such-bucket/state/llm\.json"):
        store.update(LlmChanges(), now=datetime.fromtimestamp(clock.now, UTC))


def test_the_saved_state_is_what_get_model_reads(
    aws: Aws,
    llm: FakeLlm,
    make_client: Callable[..., LlmClient],
    load_handler: Callable[..., ModuleType],
    lambda_context: Any,
) -> None:
    llm.script(FakeLlm.answer(GOOD, tokens_in=70, tokens_out=7))
    client = make_client(store=LlmStateStore(aws.s3, BUCKET, STATE_KEY))
    client.complete_json(MESSAGES, DiagnosisAnswer)
    client.save_state()
    module = load_handler(
        "functions/gateway/model.py",
        **aws.env(),
        OPSLAKE_LLM_BASE_URL=llm.base_url,
        OPSLAKE_LLM_MODEL="fake-model",
    )
    module._probe.clear()
    answer = module.handler(api_event("GET", "/model", None, key_id=aws.key_id), lambda_context)
    body = json.loads(answer["body"])
    assert answer["statusCode"] == 200, body
    assert (body["reachable"], body["diagnoser"], body["circuit_breaker"]) == (True, "llm", "closed")
    assert (body["tokens_in_24h"], body["tokens_out_24h"], body["recent_error_rate"]) == (70, 7, 0.0)


# ---- the API key -------------------------------------------------------------------------------
def _settings(llm: FakeLlm, parameter: str) -> Any:
    return load_settings(
        {
            "OPSLAKE_LAKE_BUCKET": BUCKET,
            "OPSLAKE_LLM_BASE_URL": llm.base_url,
            "OPSLAKE_LLM_MODEL": "fake-model",
            "OPSLAKE_LLM_API_KEY_PARAMETER": parameter,
            "OPSLAKE_LLM_MAX_OUTPUT_TOKENS": "321",
        }
    )


def test_the_key_is_read_from_an_ssm_securestring_and_sent_as_a_bearer_token(
    aws: Aws, llm: FakeLlm, fresh_parameters: None
) -> None:
    boto3.client("ssm").put_parameter(Name="/opslake/llm-api-key", Value="sk-from-ssm", Type="SecureString")
    llm.require_key = "sk-from-ssm"
    llm.script(FakeLlm.answer(GOOD))
    with LlmClient.from_settings(_settings(llm, "/opslake/llm-api-key"), s3_client=aws.s3) as client:
        client.complete_json(MESSAGES, DiagnosisAnswer)
        client.save_state()
    [request] = llm.completions
    assert request.headers["Authorization"] == "Bearer sk-from-ssm"
    assert request.body["max_tokens"] == 321
    assert aws.keys("state/") == ["state/llm.json"]


def test_the_key_stores_are_read_with_botocores_standard_retries(aws: Aws, fresh_parameters: None) -> None:
    boto3.client("ssm").put_parameter(Name="/opslake/k", Value="sk-1", Type="SecureString")
    boto3.client("secretsmanager").create_secret(Name="opslake/k", SecretString="sk-2")
    assert (fetch_api_key("/opslake/k"), fetch_api_key("secret:opslake/k")) == ("sk-1", "sk-2")
    modes = {provider(kind).client.meta.config.retries["mode"] for kind in ("ssm", "secretsmanager")}
    assert modes == {"standard"}


@pytest.mark.parametrize("by", ["name", "arn"])
def test_the_key_is_read_from_secrets_manager(
    aws: Aws, llm: FakeLlm, fresh_parameters: None, by: str
) -> None:
    secret = boto3.client("secretsmanager").create_secret(
        Name="opslake/llm", SecretString=json.dumps({"api_key": "sk-from-secrets"})
    )
    llm.require_key = "sk-from-secrets"
    llm.script(FakeLlm.answer(GOOD))
    parameter = "secret:opslake/llm" if by == "name" else secret["ARN"]
    with LlmClient.from_settings(_settings(llm, parameter), s3_client=aws.s3) as client:
        client.complete_json(MESSAGES, DiagnosisAnswer)
    assert llm.completions[0].headers["Authorization"] == "Bearer sk-from-secrets"


def test_an_unreadable_key_is_a_key_error_and_no_request(
    aws: Aws, llm: FakeLlm, fresh_parameters: None
) -> None:
    with LlmClient.from_settings(_settings(llm, "/opslake/missing"), s3_client=aws.s3) as client:
        with pytest.raises(LlmKeyError, match="/opslake/missing"):
            client.complete_json(MESSAGES, DiagnosisAnswer)
        assert client.state().circuit_breaker == "closed"
    assert llm.completions == []


def test_importing_the_package_loads_neither_boto3_nor_pyarrow_nor_httpx() -> None:
    code = (
        "import sys, opslake.llm; print(sorted(m for m in ('boto3', 'pyarrow', 'httpx') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
