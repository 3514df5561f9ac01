"""How the spans agent frameworks send become ops: a failure's clean message over a traceback, one
``agent:<name>`` op per run (not per graph step), and message content sent as span events. The
spans are built in the shapes the frameworks' own instrumentation sends (see
tests/data/frameworks/ for recordings of the real thing, replayed by test_framework_fixtures.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from opslake.ingest.events import validate_op
from opslake.otlp.mapping import map_export

from .test_otlp import T0, kv, request_of, span

# A LangChain tool failure as OpenInference reports it: the status description is the exception's
# repr followed by the whole traceback, with the machine's paths (recorded from LangGraph 1.2).
LANGGRAPH_TRACEBACK = (
    "ValueError('order A1 has already shipped and cannot be cancelled')Traceback (most recent call last):\n\n\n"
    '  File "/home/dev/shop/.venv/lib/python3.11/site-packages/langchain_core/tools/base.py", line 1099, in run\n'
    "    response = context.run(self._run, *tool_args, **tool_kwargs)\n"
    "               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n\n\n"
    '  File "/home/dev/shop/agent/tools.py", line 22, in cancel_order\n'
    '    raise ValueError(f"order {order_id} has already shipped and cannot be cancelled")\n\n\n'
    "ValueError: order A1 has already shipped and cannot be cancelled\n"
    "During task with name 'tools' and id 'b8717929-707a-7b17-3b35-a02ce2455677'\n"
)
CLEAN = "order A1 has already shipped and cannot be cancelled"


def exception_event(made: Span, kind: str, message: str, stacktrace: str = "") -> None:
    event = made.events.add(name="exception", time_unix_nano=T0 + 1)
    event.attributes.extend(
        [kv("exception.type", kind), kv("exception.message", message), kv("exception.stacktrace", stacktrace),
         kv("exception.escaped", "False")]
    )  # fmt: skip


def event(made: Span, name: str, **attributes: Any) -> None:
    made.events.add(name=name, time_unix_nano=T0 + 1).attributes.extend(
        kv(key.replace("__", "."), value) for key, value in attributes.items()
    )


def ops_of(*spans: Span, **options: Any) -> list[dict[str, Any]]:
    return [m.op for m in map_export(request_of(*spans, service="shop-service"), **options).ops]


# ---- a failure's message ------------------------------------------------------------------------
def langgraph_tool(**more: Any) -> Span:
    return span("cancel_order", openinference__span__kind="TOOL", tool__name="cancel_order",
                input__value="A1", error=LANGGRAPH_TRACEBACK, **more)  # fmt: skip


def test_a_traceback_in_the_status_gives_way_to_the_exception_events_clean_message() -> None:
    failed = langgraph_tool()
    exception_event(
        failed, "ValueError", "order A1 has already shipped and cannot be cancelled", LANGGRAPH_TRACEBACK
    )
    (op,) = ops_of(failed)
    assert (op["success"], op["error"], op["error_type"]) == (False, CLEAN, "ValueError")
    assert "/home/dev" not in json.dumps(op)  # neither the stack trace nor its paths are stored


def test_a_traceback_without_an_exception_event_keeps_only_its_exception_line() -> None:
    (op,) = ops_of(langgraph_tool())
    assert op["error"].startswith(CLEAN + "\n") and "During task with name 'tools'" in op["error"]
    assert 'File "' not in op["error"] and "Traceback" not in op["error"]
    assert op["error_type"] == "ValueError"


def test_the_same_failure_reads_the_same_whichever_framework_recorded_it() -> None:
    """Strands puts the bare message in the status; LangGraph a traceback: both record the event."""
    message = "order A1 has already shipped and cannot be cancelled"
    strands = span("execute_tool cancel_order", span_id=2, gen_ai__operation__name="execute_tool",
                   gen_ai__tool__name="cancel_order", error=message)  # fmt: skip
    langgraph = langgraph_tool(span_id=3)
    for made in (strands, langgraph):
        exception_event(made, "ValueError", message)
    assert [op["error"] for op in ops_of(strands, langgraph)] == [CLEAN, CLEAN]


def test_a_plain_status_description_is_kept_when_no_exception_was_recorded() -> None:
    (op,) = ops_of(span("chat", gen_ai__operation__name="chat", error="429 Too Many Requests"))
    assert (op["error"], op["error_type"]) == ("429 Too Many Requests", "span_error")


# ---- one agent op per run -----------------------------------------------------------------------
def langgraph_run() -> list[Span]:
    """LangGraph's prebuilt agent under OpenInference: the graph's root AGENT span, named only by
    its span name, and each "agent" node an AGENT span again (metadata names the node)."""
    node = json.dumps({"ls_integration": "langgraph", "langgraph_step": 1, "langgraph_node": "agent"})
    tools_node = json.dumps({"langgraph_step": 2, "langgraph_node": "tools"})
    return [
        span("support_agent", span_id=1, openinference__span__kind="AGENT",
             metadata=json.dumps({"ls_integration": "langgraph"})),
        span("agent", span_id=2, parent=1, openinference__span__kind="AGENT", metadata=node),
        span("ChatOpenAI", span_id=3, parent=2, openinference__span__kind="LLM", llm__model_name="gpt-x", metadata=node),
        span("tools", span_id=4, parent=1, openinference__span__kind="CHAIN", metadata=tools_node),
        span("lookup_order", span_id=5, parent=4, openinference__span__kind="TOOL", tool__name="lookup_order",
             metadata=tools_node),
        span("agent", span_id=6, parent=1, openinference__span__kind="AGENT", metadata=node),
    ]  # fmt: skip


def test_a_langgraph_run_is_one_agent_op_named_for_the_graph() -> None:
    mapped = map_export(request_of(*langgraph_run(), service="shop-service"))
    endpoints = sorted(m.op["endpoint"] for m in mapped.ops)
    assert endpoints == ["agent:support_agent", "model:gpt-x", "tool:lookup_order"]
    assert mapped.skipped == 3  # the two "agent" node steps and the tools node
    # every op is the graph's agent's, not the service's (the nodes name no agent themselves)
    assert {m.op["agent_id"] for m in mapped.ops} == {"support_agent"}


def test_the_graph_steps_are_steps_even_when_their_run_arrives_in_another_export() -> None:
    """A batch exporter sends a long run's spans as they end: the root comes later."""
    steps = langgraph_run()[1:]
    assert [m.op["endpoint"] for m in map_export(request_of(*steps)).ops] == [
        "model:gpt-x",
        "tool:lookup_order",
    ]


def test_steps_are_kept_as_plain_spans_when_a_deployment_keeps_all_spans() -> None:
    ops = ops_of(*langgraph_run(), keep_all=True)
    assert sorted(op["endpoint"] for op in ops if op["endpoint"].startswith("agent:")) == [
        "agent:support_agent"
    ]
    assert [op["attributes"]["otlp.op"] for op in ops if op["endpoint"] == "agent"] == ["span", "span"]


def test_an_agent_nested_in_an_agent_is_a_step_unless_it_names_another_agent() -> None:
    spans = [
        span("invoke_agent support", span_id=1, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="support"),
        span("invoke_agent", span_id=2, parent=1, gen_ai__operation__name="invoke_agent"),  # a step
        span("invoke_agent support", span_id=3, parent=1, gen_ai__operation__name="invoke_agent",
             gen_ai__agent__name="support"),  # the same agent again: a step
        span("invoke_agent billing", span_id=4, parent=1, gen_ai__operation__name="invoke_agent",
             gen_ai__agent__name="billing"),  # a sub-agent: a run of its own
        span("refund", span_id=5, parent=4, gen_ai__operation__name="execute_tool", gen_ai__tool__name="refund"),
    ]  # fmt: skip
    ops = {op["endpoint"]: op for op in ops_of(*spans)}
    assert sorted(ops) == ["agent:billing", "agent:support", "tool:refund"]
    assert ops["tool:refund"]["agent_id"] == "billing"


@pytest.mark.parametrize(
    ("name", "attributes", "endpoint"),
    [
        ("invoke_agent planner", {"gen_ai__operation__name": "invoke_agent"}, "agent:planner"),
        ("Agent run", {"openinference__span__kind": "AGENT", "agent__name": "triage"}, "agent:triage"),
        ("node", {"openinference__span__kind": "AGENT", "graph__node__id": "researcher"}, "agent:researcher"),
        ("support_agent", {"openinference__span__kind": "AGENT"}, "agent:support_agent"),
        ("invoke_agent", {"gen_ai__operation__name": "invoke_agent"}, "agent:unnamed_agent"),
    ],
)
def test_an_agent_run_is_named_agent_colon_its_name(
    name: str, attributes: dict[str, Any], endpoint: str
) -> None:
    (op,) = ops_of(span(name, **attributes))
    assert op["endpoint"] == endpoint
    assert op["agent_id"] == (
        endpoint.removeprefix("agent:") if endpoint != "agent:unnamed_agent" else "shop-service"
    )


# ---- content sent as span events ----------------------------------------------------------------
def test_strands_default_message_events_are_the_ops_input_and_output() -> None:
    tool = span("execute_tool lookup_order", span_id=1, gen_ai__operation__name="execute_tool",
                gen_ai__tool__name="lookup_order")  # fmt: skip
    event(tool, "gen_ai.tool.message", role="tool", content='{"order_id": "A1"}', id="call_1")
    event(tool, "gen_ai.choice", message='[{"text": "order A1: shipped"}]', id="call_1")
    chat = span("chat", span_id=2, gen_ai__operation__name="chat", gen_ai__request__model="m")
    event(chat, "gen_ai.user.message", content='[{"text": "Where is A1?"}]')
    event(chat, "gen_ai.tool.message", content='[{"toolResult": {"status": "success"}}]')
    event(chat, "gen_ai.choice", finish_reason="end_turn", message='[{"text": "It shipped."}]')
    tool_op, chat_op = ops_of(tool, chat)
    # a tool's one message is its arguments, as they are (the catalog reads them as JSON)
    assert json.loads(tool_op["input_summary"]) == {"order_id": "A1"}
    assert tool_op["output_summary"] == '[{"text": "order A1: shipped"}]'
    assert json.loads(chat_op["input_summary"]) == [
        {"role": "user", "content": '[{"text": "Where is A1?"}]'},
        {"role": "tool", "content": '[{"toolResult": {"status": "success"}}]'},
    ]
    assert chat_op["output_summary"] == '[{"text": "It shipped."}]'


def test_the_details_events_are_read_when_input_and_output_come_apart() -> None:
    """gen_ai.client.inference.operation.details: the current conventions' event (Strands sends
    the input and the output in two; the contrib instrumentations' event-only mode in one)."""
    chat = span("chat m", gen_ai__operation__name="chat", gen_ai__request__model="m")
    inputs = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Where is A1?"}]}])
    outputs = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "It shipped."}]}])
    event(chat, "gen_ai.client.inference.operation.details", gen_ai__input__messages=inputs)
    event(chat, "gen_ai.client.inference.operation.details", gen_ai__output__messages=outputs)
    (op,) = ops_of(chat)
    assert (op["input_summary"], op["output_summary"]) == (inputs, outputs)


def test_attributes_win_over_events_and_unrelated_events_are_not_content() -> None:
    chat = span("chat", gen_ai__operation__name="chat", gen_ai__input__messages="from the attribute")
    event(chat, "gen_ai.user.message", content="from an event")
    event(chat, "retry", content="not a message")
    (op,) = ops_of(chat)
    assert op["input_summary"] == "from the attribute" and "output_summary" not in op


def test_content_from_events_is_redacted_like_any_summary() -> None:
    secret = "sk-proj-" + "Q7vX2mN8pL4kR9tY3wZ6bC1dF5gH0jK" * 2
    chat = span("chat", gen_ai__operation__name="chat")
    event(chat, "gen_ai.user.message", content=f"use the key {secret}")
    (raw,) = ops_of(chat)
    stored = validate_op(raw, reporter_id="k", received_at=datetime.now(UTC), infer_failure=False)
    assert secret not in (stored.input_summary or "") and "[REDACTED]" in (stored.input_summary or "")


def test_a_workflow_around_named_agent_runs_is_not_a_run() -> None:
    """The OpenAI Agents SDK under OpenInference: its trace span ("Agent workflow") is an AGENT
    span naming no agent, around a CHAIN and the agent's own AGENT span (agent.name)."""
    spans = [
        span("Agent workflow", span_id=1, openinference__span__kind="AGENT"),
        span("Agent workflow", span_id=2, parent=1, openinference__span__kind="CHAIN"),
        span("support_agent", span_id=3, parent=2, openinference__span__kind="AGENT", agent__name="support_agent"),
        span("lookup_order", span_id=4, parent=3, openinference__span__kind="TOOL", tool__name="lookup_order"),
    ]  # fmt: skip
    ops = ops_of(*spans)
    assert [op["endpoint"] for op in ops] == ["agent:support_agent", "tool:lookup_order"]
    assert {op["agent_id"] for op in ops} == {"support_agent"}
    kept = ops_of(*spans, keep_all=True)  # kept as a plain span when a deployment keeps all
    assert [op["endpoint"] for op in kept if op["attributes"]["otlp.op"] == "span"] == ["Agent workflow"] * 2


def test_a_step_inside_a_run_names_no_agent_for_the_calls_under_it() -> None:
    ops = ops_of(
        span("support", span_id=1, openinference__span__kind="AGENT", agent__name="support"),
        span("planner", span_id=2, parent=1, openinference__span__kind="AGENT"),  # a step: it names no agent
        span("lookup", span_id=3, parent=2, openinference__span__kind="TOOL", tool__name="lookup"),
    )
    by_endpoint = {op["endpoint"]: op for op in ops}
    assert [op["endpoint"] for op in ops if op["endpoint"].startswith("agent:")] == ["agent:support"]
    assert by_endpoint["tool:lookup"]["agent_id"] == "support"  # the run's, not the step's span name


def test_a_named_sub_agent_inside_a_run_is_a_run_of_its_own_and_names_its_calls() -> None:
    ops = ops_of(
        span("support", span_id=1, openinference__span__kind="AGENT", agent__name="support"),
        span("billing", span_id=2, parent=1, openinference__span__kind="AGENT", agent__name="billing"),
        span("refund", span_id=3, parent=2, openinference__span__kind="TOOL", tool__name="refund"),
    )
    by_endpoint = {op["endpoint"]: op for op in ops}
    assert sorted(e for e in by_endpoint if e.startswith("agent:")) == ["agent:billing", "agent:support"]
    assert by_endpoint["tool:refund"]["agent_id"] == "billing"
