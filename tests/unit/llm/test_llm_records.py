"""Model calls become op records; losing them, or the state, never fails the run."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from opslake.llm import LlmCall, LlmClient, LlmConfig
from opslake.llm.records import llm_call_op, settle_llm_calls
from tests.fakes import MemoryQueue

AT = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def call(success: bool = True) -> LlmCall:
    return LlmCall(
        model="m-1",
        success=success,
        status=200 if success else 429,
        error_type=None if success else "rate_limited",
        tokens_in=120 if success else 0,
        tokens_out=30 if success else 0,
        latency_ms=812.4,
        started_at=AT,
        error=None if success else "429 Too Many Requests",
    )


def client_with(*calls: LlmCall) -> LlmClient:
    llm = LlmClient(LlmConfig(base_url="http://127.0.0.1:9/v1", model="m-1"))
    llm.calls = list(calls)
    return llm


def test_a_call_is_an_op_record_with_its_cost() -> None:
    op = llm_call_op(call(), agent_id="opslake-analyzer", purpose="diagnosis")
    assert (op.source, op.endpoint, op.task_class, op.success, op.duration_ms) == (
        "llm", "llm:chat.completions", "diagnosis", True, 812.4,
    )  # fmt: skip
    assert op.attributes == {
        "model": "m-1",
        "status": "200",
        "attempt": "1",
        "tokens_in": "120",
        "tokens_out": "30",
    }
    failed = llm_call_op(call(success=False), agent_id="a", purpose="playbook")
    assert (failed.success, failed.error_type, failed.error) == (
        False,
        "rate_limited",
        "429 Too Many Requests",
    )


def test_settling_enqueues_every_call_once() -> None:
    queue, llm = MemoryQueue(), client_with(call(), call(success=False))
    assert settle_llm_calls(llm, queue, agent_id="opslake-analyzer", purpose="diagnosis") == 2
    assert [json.loads(m)["success"] for m in queue.messages] == [True, False]
    assert llm.calls == [] and settle_llm_calls(llm, queue, agent_id="a", purpose="p") == 0


def test_a_queue_that_refuses_loses_the_records_loudly_but_not_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm = client_with(call())
    assert settle_llm_calls(llm, MemoryQueue(fail=True), agent_id="a", purpose="p") == 1
    assert llm.calls == []


def test_without_a_model_there_is_nothing_to_settle() -> None:
    assert settle_llm_calls(None, MemoryQueue(), agent_id="a", purpose="p") == 0
