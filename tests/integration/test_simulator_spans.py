"""The simulator's ``report="otlp"`` spans, in process (no stack, no socket): a fleet runs against a fake
of the tools (httpx.MockTransport) and exports to the SDK's InMemorySpanExporter. Each task is an
``invoke_agent`` span; each runtime report is one span in its trace that carries exactly what the
same fleet with ``report="events"`` posts to ``/events`` (the /v1/traces contract's attributes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openinference.semconv.trace import SpanAttributes as OpenInference
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.exception_attributes import EXCEPTION_MESSAGE, EXCEPTION_TYPE
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from opslake.otlp.mapping import OPSLAKE_ATTRIBUTES_PREFIX, OPSLAKE_ENDPOINT, OPSLAKE_FIELDS
from opslake_local.simulator import MODEL_CALL, MODES, TRACE_HEADER, CycleStats, SimAgent, Simulator
from opslake_local.simulator.modes import PROMPT_TOKENS, RUNTIME_MODEL

pytestmark = pytest.mark.integration

Operation = gen_ai.GenAiOperationNameValues
# The mistakes that make the runtime report (a model-call timeout, a result cut at the row cap),
# always made; every failure gets an overseer's correction and a rescue.
PLANTED = {"runtime_timeout": 1.0, "sql_row_cap": 1.0}
BASE = "http://tools.test"


class FakeTools:
    """Just enough of the tools' answers for the planted mistakes: /sql lists without an aggregate
    come back cut at the row cap; everything else works. Keeps every /events body and the trace id
    header of every tool call."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.trace_ids: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/events":
            ops = json.loads(request.content)["ops"]
            self.events.extend(ops)
            return httpx.Response(202, json={"accepted": [{"index": i} for i in range(len(ops))]})
        self.trace_ids.append(request.headers.get(TRACE_HEADER))
        body = json.loads(request.content) if request.content else {}
        if path == "/playbooks":
            return httpx.Response(200, json={"entries": []})
        if path == "/match":
            return httpx.Response(200, json={"matches": [{"worker_id": "W00001"}, {"worker_id": "W00002"}]})
        if path == "/sql":
            sql = body["sql"]
            aggregate = any(word in sql for word in ("count(", "avg(", "LIMIT"))
            return httpx.Response(200, json={"rows": [["W00001"]], "truncated": not aggregate})
        if path.startswith("/tables/"):
            return httpx.Response(200, json={"columns": []})
        if path == "/log":
            return httpx.Response(202, json={"op_id": "op-log"})
        return httpx.Response(200, json={})


def fleet_agents() -> list[SimAgent]:
    mistakes = {name: PLANTED.get(name, 0.0) for name in MODES}
    return [
        SimAgent(f"otel-{i}", f"key-{i}", mistakes, rescue_rate=1.0, overseer_rate=1.0, log_rate=0.0)
        for i in (1, 2)
    ]


def run_fleet(report: str, exporter: InMemorySpanExporter | None = None) -> tuple[CycleStats, FakeTools]:
    tools = FakeTools()
    http = httpx.Client(base_url=BASE, transport=httpx.MockTransport(tools))
    options: dict[str, Any] = {"report": report}
    if exporter is not None:
        options["exporter_for"] = lambda _agent: exporter
    with Simulator(BASE, fleet_agents(), seed=4, playbooks_enabled=False, http=http, **options) as sim:
        stats = sim.run_cycle(tasks_per_agent=4)
    http.close()
    return stats, tools


@pytest.fixture(scope="module")
def exported() -> Iterator[tuple[CycleStats, FakeTools, list[ReadableSpan]]]:
    exporter = InMemorySpanExporter()
    stats, tools = run_fleet("otlp", exporter)
    yield stats, tools, list(exporter.get_finished_spans())


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def task_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if attrs(s).get(gen_ai.GEN_AI_OPERATION_NAME) == Operation.INVOKE_AGENT.value]


def reports(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The runtime's reports in the order they were made."""
    return sorted((s for s in spans if OPSLAKE_ENDPOINT in attrs(s)), key=lambda s: s.start_time or 0)


def test_each_task_is_an_invoke_agent_span_holding_its_reports(
    exported: tuple[CycleStats, FakeTools, list[ReadableSpan]],
) -> None:
    stats, tools, spans = exported
    tasks = task_spans(spans)
    assert len(tasks) == sum(stats.tasks.values()) == 8
    assert len(spans) == len(tasks) + stats.spans_reported
    assert stats.spans_exported == len(spans) and stats.spans_failed == 0 and stats.events_posted == 0
    assert tools.events == []  # nothing went to /events
    by_trace = {t.context.trace_id: t for t in tasks}
    assert len(by_trace) == len(tasks)  # a trace per task
    for task in tasks:
        a = attrs(task)
        agent = a[gen_ai.GEN_AI_AGENT_ID]
        assert task.name == f"invoke_agent {agent}" and task.kind is SpanKind.INTERNAL
        assert a[gen_ai.GEN_AI_AGENT_NAME] == agent and task.resource.attributes[SERVICE_NAME] == agent
        assert a[SESSION_ID] == a[gen_ai.GEN_AI_CONVERSATION_ID] and a[SESSION_ID].startswith(
            f"{agent}-c001-t"
        )
        assert task.parent is None and task.status.status_code is StatusCode.UNSET
        assert a[OPSLAKE_ATTRIBUTES_PREFIX + "task_succeeded"] in (True, False)
    for span in reports(spans):
        task = by_trace[span.context.trace_id]
        assert span.parent is not None and span.parent.span_id == task.context.span_id
        assert attrs(span)[SESSION_ID] == attrs(task)[SESSION_ID]
        assert span.resource.attributes[SERVICE_NAME] == attrs(task)[gen_ai.GEN_AI_AGENT_ID]
        assert task.end_time is not None and span.end_time is not None and span.end_time <= task.end_time
    # no execute_tool spans: the gateway already records every tool call ...
    assert not [
        s for s in spans if attrs(s).get(gen_ai.GEN_AI_OPERATION_NAME) == Operation.EXECUTE_TOOL.value
    ]
    # ... and each call names its task's trace
    assert tools.trace_ids and set(tools.trace_ids) == {format_trace_id(t) for t in by_trace}


def test_a_model_call_timeout_is_a_failed_genai_chat_span(
    exported: tuple[CycleStats, FakeTools, list[ReadableSpan]],
) -> None:
    _, _, spans = exported
    chats = [s for s in reports(spans) if attrs(s).get(gen_ai.GEN_AI_OPERATION_NAME) == Operation.CHAT.value]
    assert chats and all(attrs(s)[OPSLAKE_ENDPOINT] == MODEL_CALL for s in chats)  # same endpoint as /events
    timeouts = [s for s in chats if attrs(s)["opslake.event_kind"] == "model_call"]
    assert len(timeouts) == 8  # every task timed out once (planted at rate 1)
    for span in timeouts:
        a = attrs(span)
        assert span.name == f"chat {RUNTIME_MODEL}" and span.kind is SpanKind.CLIENT
        assert a[gen_ai.GEN_AI_REQUEST_MODEL] == RUNTIME_MODEL
        assert a[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "model call timed out after 30000 ms (prompt of 48k tokens)"
        assert a[ERROR_TYPE] == "Timeout" and a["opslake.source"] == "runtime"
        (event,) = span.events
        assert event.name == "exception" and event.attributes is not None
        assert event.attributes[EXCEPTION_TYPE] == "TimeoutError"
        assert event.attributes[EXCEPTION_MESSAGE] == span.status.description
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time - span.start_time == 30_000 * 10**6  # the op's duration_ms
    retries = [s for s in chats if attrs(s)["opslake.event_kind"] == "rescue"]
    assert {attrs(s)["opslake.rescue_succeeded"] for s in retries} == {True, False}  # both outcomes seen
    for span in retries:
        worked = attrs(span)["opslake.rescue_succeeded"]
        assert span.status.status_code is (StatusCode.UNSET if worked else StatusCode.ERROR)
        assert (gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS in attrs(span)) is worked


def test_corrections_rescues_and_checks_carry_the_opslake_attributes(
    exported: tuple[CycleStats, FakeTools, list[ReadableSpan]],
) -> None:
    _, _, spans = exported
    kinds = {attrs(s)["opslake.event_kind"] for s in reports(spans)}
    assert kinds == {"model_call", "rescue", "correction", "result_check"}
    for span in reports(spans):
        a = attrs(span)
        if a["opslake.event_kind"] == "correction":
            assert (
                a["opslake.source"] == "overseer_correction" and span.status.status_code is StatusCode.UNSET
            )
            assert a["opslake.correction"] and isinstance(a["opslake.applied_at_turn"], int)
            assert len(a["opslake.sig_hash"]) == 16 and a[OPSLAKE_ATTRIBUTES_PREFIX + "mode"] == "sql_row_cap"
        if a["opslake.event_kind"] == "result_check":
            assert span.status.status_code is StatusCode.ERROR and a[ERROR_TYPE] == "result_truncated"
            assert "truncated=true" in (span.status.description or "")
            assert a[OpenInference.INPUT_VALUE]  # the question asked
        if a["opslake.event_kind"] == "rescue" and a[OPSLAKE_ENDPOINT] == "/sql":
            assert a["opslake.rescue_attempted"] is True and a[OpenInference.OUTPUT_VALUE].startswith(
                "retried"
            )


def test_the_spans_say_what_events_would_have_stored(
    exported: tuple[CycleStats, FakeTools, list[ReadableSpan]],
) -> None:
    """Same seed, same fake tools: the /events fleet's ops and the OTLP fleet's report spans are
    the same reports, field by field (the contract maps each attribute back to its field)."""
    otlp_stats, _, spans = exported
    events_stats, tools = run_fleet("events")
    assert events_stats.events_posted == otlp_stats.spans_reported == len(tools.events) > 0
    assert events_stats.tool_calls == otlp_stats.tool_calls
    for op, span in zip(tools.events, reports(spans), strict=True):
        a = attrs(span)
        assert a[OPSLAKE_ENDPOINT] == op["endpoint"] and a[SESSION_ID] == op["session_id"]
        assert span.resource.attributes[SERVICE_NAME] == op["agent_id"]
        for name in OPSLAKE_FIELDS:
            assert a.get(f"opslake.{name}") == op.get(name), name
        assert {
            k.removeprefix(OPSLAKE_ATTRIBUTES_PREFIX): v
            for k, v in a.items()
            if k.startswith(OPSLAKE_ATTRIBUTES_PREFIX)
        } == op.get("attributes", {})
        assert (span.status.status_code is not StatusCode.ERROR) is op["success"]
        assert span.status.description == op.get("error")
        assert a.get(ERROR_TYPE) == op.get("error_type")
        assert a.get(OpenInference.INPUT_VALUE) == op.get("input_summary")
        assert a.get(OpenInference.OUTPUT_VALUE) == op.get("output_summary")
        assert span.end_time is not None and span.start_time is not None
        assert (span.end_time - span.start_time) / 1e6 == pytest.approx(op["duration_ms"], abs=1e-6)
    assert format_span_id(reports(spans)[0].context.span_id)  # ids are the SDK's own


def test_an_unknown_report_is_refused() -> None:
    with pytest.raises(ValueError, match="report must be one of events, otlp"):
        Simulator(BASE, fleet_agents(), report="kafka", http=httpx.Client())  # type: ignore[arg-type]
