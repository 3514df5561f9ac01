"""Several writers of the one LLM state object (the analyzer's and the consolidator's runs overlap),
in moto S3, with the LLM client against a fake endpoint: no writer's update is lost."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws
from moto.core.models import botocore_stubber

from opslake import runtime
from opslake.llm import LlmClient, LlmConfig, LlmStateError, LlmStateStore, LlmUnavailableError
from opslake.llm.ledger import SAVE_ATTEMPTS, LlmChanges
from opslake.llm.records import settle_llm_calls
from opslake.models.analysis import DiagnosisAnswer
from opslake.models.llm import LlmState, TokenBucket
from tests.fake_llm import FakeLlm
from tests.fakes import MemoryQueue

BUCKET = "opslake-llm-state-test"
KEY = "state/llm.json"
GOOD = {
    "cause": "the agent queries a column that does not exist",
    "agent_adjustment": "describe the table first and use the listed column names",
    "avoid": False,
    "category": "unknown_column",
    "confidence": 0.8,
}
MESSAGES = [{"role": "user", "content": "Signature: SELECT <col> FROM workers -> COLUMN_NOT_FOUND"}]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 28, 10, 0, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def llm() -> Iterator[FakeLlm]:
    with FakeLlm() as server:
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def writer(s3: Any, llm: FakeLlm, clock: Clock) -> Iterator[Callable[..., LlmClient]]:
    """A run's client: it reads the state on first use and merges its changes in when it saves."""
    made: list[LlmClient] = []

    def make(client: Any = None, **config: Any) -> LlmClient:
        made.append(
            LlmClient(
                LlmConfig(**{"base_url": llm.base_url, "model": "fake-model", "max_retries": 0, **config}),
                state_store=LlmStateStore(client or s3, BUCKET, KEY),
                sleep=lambda _s: None,
                clock=clock,
            )
        )
        made[-1].breaker  # noqa: B018 - the run starts: it reads the state now
        return made[-1]

    yield make
    for client in made:
        client.close()


def stored(s3: Any) -> LlmState:
    return LlmState.model_validate_json(s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read())


def answer(client: LlmClient, llm: FakeLlm, tokens_in: int, tokens_out: int) -> None:
    llm.script(FakeLlm.answer(GOOD, tokens_in=tokens_in, tokens_out=tokens_out))
    client.complete_json(MESSAGES, DiagnosisAnswer)


def fail(client: LlmClient, llm: FakeLlm) -> None:
    llm.script(FakeLlm.error(503))
    with pytest.raises(LlmUnavailableError):
        client.complete_json(MESSAGES, DiagnosisAnswer)


def test_two_writers_and_a_stale_one_lose_no_tokens_and_the_stale_one_does_not_close_the_breaker(
    s3: Any, llm: FakeLlm, clock: Clock, writer: Callable[..., LlmClient]
) -> None:
    stale = writer(breaker_failures=2)  # a long run: it read a closed breaker and nothing spent
    analyzer = writer(breaker_failures=2)
    answer(analyzer, llm, 100, 10)
    clock.now += 60
    consolidator = writer(breaker_failures=2)
    answer(consolidator, llm, 20, 2)
    analyzer.save_state()
    fail(consolidator, llm)
    clock.now += 1
    fail(consolidator, llm)
    assert consolidator.save_state().circuit_breaker == "open"
    opened_at = datetime.fromtimestamp(clock.now, UTC)

    clock.now += 60
    answer(stale, llm, 7, 1)  # its own view: closed, and the endpoint answered
    saved = stale.save_state()

    assert stored(s3) == saved
    assert (saved.tokens_in_24h, saved.tokens_out_24h) == (127, 13)  # every writer's increments
    assert (saved.circuit_breaker, saved.opened_at, saved.consecutive_failures) == ("open", opened_at, 2)
    assert saved.recent_calls_failed == [False, False, True, True, False]
    assert saved.last_error is not None and "503" in saved.last_error
    # the stale run goes on from what it wrote: the breaker another run opened keeps it off
    with pytest.raises(LlmUnavailableError, match="circuit breaker is open"):
        stale.complete_json(MESSAGES, DiagnosisAnswer)
    # and a second save of the same client adds nothing twice
    assert stale.save_state().tokens_in_24h == 127


def test_a_writer_that_loses_the_race_reads_again_and_merges(
    s3: Any, llm: FakeLlm, writer: Callable[..., LlmClient]
) -> None:
    """Another writer's save lands between this one's read and its conditional write (412)."""
    first, other = writer(), writer(boto3.client("s3", region_name="us-east-1"))
    answer(first, llm, 50, 5)
    answer(other, llm, 3, 1)
    puts: list[int] = []

    def race(**_: Any) -> None:
        puts.append(1)
        if len(puts) == 1:
            other.save_state()  # lands first: the write about to go out carries an old ETag

    s3.meta.events.register("before-call.s3.PutObject", race)
    saved = first.save_state()
    assert len(puts) == 2  # refused once (PreconditionFailed), then merged and written
    assert (stored(s3).tokens_in_24h, stored(s3).tokens_out_24h) == (53, 6) == (
        saved.tokens_in_24h, saved.tokens_out_24h
    )  # fmt: skip


def test_a_writer_that_always_loses_gives_up_after_bounded_rounds_and_says_so(s3: Any, clock: Clock) -> None:
    other = LlmStateStore(boto3.client("s3", region_name="us-east-1"), BUCKET, KEY)
    now = datetime.fromtimestamp(clock.now, UTC)
    bucket = TokenBucket(hour=now.replace(minute=0), tokens_in=1)
    puts: list[int] = []

    def race(**_: Any) -> None:
        puts.append(1)
        other.update(LlmChanges(tokens=[bucket]), now=now)

    s3.meta.events.register("before-call.s3.PutObject", race)
    waits: list[float] = []
    with pytest.raises(LlmStateError, match=f"changed it first {SAVE_ATTEMPTS} times"):
        LlmStateStore(s3, BUCKET, KEY).update(LlmChanges(tokens=[bucket]), now=now, sleep=waits.append)
    assert len(puts) == SAVE_ATTEMPTS and len(waits) == SAVE_ATTEMPTS - 1
    assert stored(s3).tokens_in_24h == SAVE_ATTEMPTS  # the other writer's rounds all landed


def s3_answering(status: int, code: str, times: int) -> tuple[Any, list[int]]:
    """An S3 client built as the functions build theirs (runtime.boto_config: botocore's standard
    retries) whose first ``times`` PutObject requests "S3" answers with ``status`` and ``code``."""
    client = boto3.client("s3", region_name="us-east-1", config=runtime.boto_config())
    sent: list[int] = []

    def send(request: Any, **kwargs: Any) -> AWSResponse | None:
        if request.method == "PUT":
            sent.append(1)
            if len(sent) <= times:
                body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode()
                return AWSResponse(request.url, status, {}, _Raw(body))
        return botocore_stubber(request=request, **kwargs)  # moto answers the rest

    # in front of moto's own stub (which would otherwise take the request first)
    client.meta.events.unregister("before-send", botocore_stubber)
    client.meta.events.register("before-send", send)
    return client, sent


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def test_a_throttled_save_is_retried_by_the_client_and_lands(s3: Any, clock: Clock) -> None:
    """The project's clients retry throttling themselves (runtime.boto_config, standard mode)."""
    client, sent = s3_answering(503, "SlowDown", times=1)
    now = datetime.fromtimestamp(clock.now, UTC)
    bucket = TokenBucket(hour=now.replace(minute=0), tokens_in=9)
    saved = LlmStateStore(client, BUCKET, KEY).update(LlmChanges(tokens=[bucket]), now=now)
    assert len(sent) == 2 and stored(s3) == saved and saved.tokens_in_24h == 9


def test_a_refused_save_is_reported_not_retried_and_never_fails_the_run(
    s3: Any, llm: FakeLlm, writer: Callable[..., LlmClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, sent = s3_answering(403, "AccessDenied", times=99)
    run = writer(client)
    answer(run, llm, 5, 1)
    with pytest.raises(LlmStateError, match="AccessDenied"):
        run.save_state()
    assert len(sent) == 1  # a refusal is not retried

    from opslake.llm import records

    counted: list[str] = []
    monkeypatch.setattr(records.metrics, "add_metric", lambda name, **_: counted.append(name))
    answer(run, llm, 5, 1)
    queue = MemoryQueue()
    assert settle_llm_calls(run, queue, agent_id="opslake-analyzer", purpose="diagnosis") == 2
    assert counted == ["LlmStateNotSaved"] and len(queue.messages) == 2  # the records still go out
    with pytest.raises(Exception, match="NoSuchKey"):
        stored(s3)
