"""Replays of what real agent frameworks exported (tests/data/frameworks/<framework>.pb, recorded by
``make record-frameworks``; the versions in versions.json): the same tiny agent in each, one tool
call that succeeds (lookup_order) and one that raises (cancel_order), against a scripted model.

Each export goes through the OTLP ingest as ``POST /v1/traces`` takes it (decode, map, validate,
redact, enqueue) and the queued ops must say what happened: each tool call exactly one op, the
failure with the exception's clean message (never a traceback), one ``agent:support_agent`` op per
run that every op is attributed to, the tools' arguments and the model's messages read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opslake.models.ops import QueuedOp
from opslake.otlp.decode import decode_export
from opslake.otlp.ingest import ingest_export
from opslake.queue import unpack

from ...fakes import MemoryQueue

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "frameworks"
RECORDED = sorted(path.stem for path in FIXTURES.glob("*.pb"))
CLEAN = "order A1 has already shipped and cannot be cancelled"
#: What a framework tells of the failure, when not the exception itself.
FAILURE_WORDS = {
    # the Agents SDK redacts a tool's error from its spans by default; its words say which tool
    "openai-agents": "Error running tool (non-fatal): {'tool_name': 'cancel_order', "
    "'error': 'Tool execution failed. Error details are redacted.'}",
}
#: Frameworks whose run ends with the failed tool (Pydantic AI raises it out of the run).
RUN_FAILS = {"pydantic-ai"}
#: Recorded with a setting that sends no message content in spans: openai-v2 on its default
#: conventions with CAPTURE_MESSAGE_CONTENT=true puts the content in log events (the Logs API); with
#: the gen_ai_latest_experimental opt-in it refuses "true" (warns, and captures nothing).
NO_CONTENT = {"openai-v2-legacy", "openai-v2-true"}


def ops_of(framework: str) -> list[QueuedOp]:
    body = (FIXTURES / f"{framework}.pb").read_bytes()
    export = decode_export(body, content_type="application/x-protobuf", content_encoding=None)
    queue = MemoryQueue()
    result = ingest_export(export, reporter_id="framework-key", queue=queue, received_at=datetime.now(UTC))
    assert not result.rejected, result.rejected
    return [QueuedOp.model_validate_json(record) for message in queue.messages for record in unpack(message)]


def test_every_framework_the_docs_name_was_recorded() -> None:
    assert set(RECORDED) == {
        "langgraph", "strands", "strands-latest", "openai-agents", "openinference-openai", "openai-v2",
        "openai-v2-legacy", "openai-v2-true", "pydantic-ai",
    }  # fmt: skip
    versions = json.loads((FIXTURES / "versions.json").read_text())
    assert set(versions) == set(RECORDED)  # each recording says what it was recorded with


@pytest.mark.parametrize("framework", RECORDED)
def test_each_tool_call_is_one_op_and_the_failure_reads_clean(framework: str) -> None:
    ops = ops_of(framework)
    tools = {op.endpoint: op for op in ops if op.endpoint.startswith("tool:")}
    assert sorted(op.endpoint for op in ops if op.endpoint.startswith("tool:")) == [
        "tool:cancel_order", "tool:lookup_order",
    ]  # fmt: skip
    lookup, cancel = tools["tool:lookup_order"], tools["tool:cancel_order"]
    assert lookup.success is True and "shipped on 2026-11-20" in (lookup.output_summary or "")
    assert cancel.success is False
    assert cancel.error == FAILURE_WORDS.get(framework, CLEAN)
    if framework not in FAILURE_WORDS:  # the type is the error_type, however the framework spelled it
        assert cancel.error_type is not None and cancel.error_type.rsplit(".", 1)[-1] == "ValueError"
    stored = json.dumps([op.model_dump(mode="json") for op in ops])
    assert "Traceback" not in stored and "site-packages" not in stored  # no stack, no local paths
    for op in (lookup, cancel):  # the arguments, as JSON or (LangChain's one-argument tools) the value
        assert op.input_summary is not None and "A1" in op.input_summary


@pytest.mark.parametrize("framework", RECORDED)
def test_one_agent_op_per_run_and_every_op_is_the_agents(framework: str) -> None:
    ops = ops_of(framework)
    (agent,) = [op for op in ops if op.endpoint.startswith("agent:")]
    assert agent.endpoint == "agent:support_agent"
    assert agent.success is (framework not in RUN_FAILS)
    assert {op.agent_id for op in ops} == {"support_agent"}  # not the service, not a graph node
    assert len({op.trace_id for op in ops}) == 1


@pytest.mark.parametrize("framework", RECORDED)
def test_the_model_calls_content_is_read(framework: str) -> None:
    models = [op for op in ops_of(framework) if op.endpoint.startswith("model:")]
    assert models and {op.endpoint for op in models} == {"model:fake-model"}
    first = models[0]
    if framework in NO_CONTENT:
        assert (first.input_summary, first.output_summary) == (None, None)
        return
    assert "Where is order A1" in (first.input_summary or "")  # the user's question
    assert "lookup_order" in (first.output_summary or "")  # the model asked for the tools
