"""POST /v1/traces with the real clients, against the local stack: the OpenTelemetry Python SDK and
its OTLP/HTTP protobuf exporter (gzip on), and OTLP/JSON built from the SDK's own spans, export
GenAI-convention and OpenInference-style spans; the op records land with the mapped fields. Bad
spans get ``partial_success`` (the good ones of the batch still land), malformed or oversized
exports get their 4xx with a ``google.rpc.Status`` body, a retried export lands once, a queue
failure is a 503 with nothing stored, and a hostile client cannot forge who reported or store a
secret.

Attribute names come from the convention packages (``opentelemetry-semantic-conventions``,
``openinference-semantic-conventions``), as a framework's instrumentation would set them.
"""

from __future__ import annotations

import base64
import gzip
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import requests
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from moto.core.exceptions import JsonRESTError
from moto.sqs.responses import SQSResponse
from openinference.semconv.trace import OpenInferenceSpanKindValues as OpenInferenceKind
from openinference.semconv.trace import SpanAttributes as OpenInference
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME
from opentelemetry.trace import Status, StatusCode, Tracer

from opslake.config import load_settings
from opslake.otlp.decode import MAX_SPANS_PER_REQUEST
from opslake.query.factory import create_engine
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack
from tests.integration.jobs_support import compact_closed_hours

pytestmark = pytest.mark.integration

Local = tuple[LocalStack, httpx.Client, Drainer]
Operation = gen_ai.GenAiOperationNameValues
PROTOBUF = "application/x-protobuf"
SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.Zm9yZ2Vk"


@dataclass
class Target:
    """The local stack's /v1/traces and the API key a runtime exports with."""

    stack: LocalStack
    client: httpx.Client
    drainer: Drainer
    url: str
    key: str
    key_name: str

    def post(
        self, body: bytes, content_type: str = PROTOBUF, *, gzipped: bool = False, **headers: str
    ) -> httpx.Response:
        sent = {"content-type": content_type, "x-api-key": self.key, **headers}
        if gzipped:
            body, sent["content-encoding"] = gzip.compress(body), "gzip"
        return self.client.post("/v1/traces", content=body, headers=sent)

    def query(self, sql: str) -> list[dict[str, Any]]:
        """The rows of an analyst's SQL over the lake, once the queue is drained."""
        assert self.drainer.drain().failed == 0
        settings = load_settings({**self.stack.environment, "OPSLAKE_QUERY_ENGINE": "embedded"})
        engine = create_engine(settings, glue_client=self.stack.client("glue"))
        return engine.run(sql).records()

    def stored(self, op_ids: list[str]) -> list[dict[str, Any]]:
        """The ops rows with these op ids, once the queue is drained (every copy, not deduplicated)."""
        listed = ", ".join(f"'{op_id}'" for op_id in op_ids)
        rows = self.query(f"SELECT * FROM ops WHERE op_id IN ({listed})")
        for row in rows:
            row["attributes"] = dict(row["attributes"] or ())  # a map column: (key, value) pairs
        return rows

    def by_op_id(self, op_ids: list[str]) -> dict[str, dict[str, Any]]:
        rows = self.stored(op_ids)
        by_id = {row["op_id"]: row for row in rows}
        assert len(by_id) == len(rows), "an op landed twice"
        return by_id


@pytest.fixture(scope="module")
def target(local: Local) -> Target:
    stack, client, drainer = local
    key = stack.create_api_key("otlp-runtime")
    return Target(
        stack, client, drainer, f"{str(client.base_url).rstrip('/')}/v1/traces", key.value, key.name
    )


class Otel:
    """A TracerProvider exporting with the real OTLP/HTTP exporter (protobuf, gzip) through a
    BatchSpanProcessor; the answers the exporter got are kept, and every span is also kept in
    memory (for its ids)."""

    def __init__(
        self,
        target: Target,
        *,
        service: str = "otlp-test-runtime",
        max_attributes: int = 128,
        export: bool = True,
    ):
        self.answers: list[requests.Response] = []
        session = requests.Session()
        session.hooks["response"].append(lambda response, *args, **kwargs: self.answers.append(response))
        self.exporter = OTLPSpanExporter(
            endpoint=target.url,
            headers={"x-api-key": target.key},
            compression=Compression.Gzip,
            session=session,
            timeout=60,
        )
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: service}),
            span_limits=SpanLimits(max_span_attributes=max_attributes),
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        if export:  # else the spans stay in memory (sent some other way by the test)
            self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer: Tracer = self.provider.get_tracer("tests.otlp")

    def flush(self) -> requests.Response:
        """Export every ended span (one export: far fewer than the batch size) and return its answer."""
        sent = len(self.answers)
        assert self.provider.force_flush(60_000)
        assert len(self.answers) == sent + 1, "expected exactly one export"
        return self.answers[-1]

    def spans(self) -> dict[str, ReadableSpan]:
        return {span.name: span for span in self.memory.get_finished_spans()}

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def otel(target: Target) -> Iterator[Callable[..., Otel]]:
    made: list[Otel] = []

    def make(**kwargs: Any) -> Otel:
        made.append(Otel(target, **kwargs))
        return made[-1]

    yield make
    for one in made:
        one.close()


def op_id(span: ReadableSpan) -> str:
    context = span.get_span_context()
    return f"{context.trace_id:032x}:{context.span_id:016x}"


def hex_span_id(span: ReadableSpan) -> str:
    return f"{span.get_span_context().span_id:016x}"


def partial_success(answer: requests.Response | httpx.Response) -> ExportTraceServiceResponse:
    assert answer.status_code == 200, answer.content
    assert answer.headers["content-type"] == PROTOBUF
    return ExportTraceServiceResponse.FromString(answer.content)


def rpc_status(answer: httpx.Response, status: int) -> status_pb2.Status:
    """The google.rpc.Status of an error answer, in the request's encoding, and its opslake code."""
    assert answer.status_code == status, answer.content
    if answer.headers["content-type"] == PROTOBUF:
        message = status_pb2.Status.FromString(answer.content)
    else:
        message = json_format.Parse(answer.content, status_pb2.Status())
    assert message.message
    return message


def error_reason(message: status_pb2.Status) -> str:
    info = error_details_pb2.ErrorInfo()
    assert message.details[0].Unpack(info)
    assert info.domain == "opslake"
    return info.reason


def agent_run(tracer: Tracer, agent: str, session: str) -> None:
    """One agent run under the GenAI conventions: invoke_agent with a tool call that works, a model
    call that times out, and a plain internal span (not an op)."""
    with tracer.start_as_current_span(
        f"{Operation.INVOKE_AGENT.value} {agent}",
        attributes={
            gen_ai.GEN_AI_OPERATION_NAME: Operation.INVOKE_AGENT.value,
            gen_ai.GEN_AI_AGENT_NAME: agent,
            SESSION_ID: session,
        },
    ):
        with tracer.start_as_current_span(
            f"{Operation.EXECUTE_TOOL.value} query_db",
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
                gen_ai.GEN_AI_TOOL_NAME: "query_db",
                gen_ai.GEN_AI_TOOL_CALL_ID: "call_1",
                gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"sql": "SELECT role FROM workers"}),
                gen_ai.GEN_AI_TOOL_CALL_RESULT: json.dumps({"rows": 3}),
            },
        ):
            pass
        with tracer.start_as_current_span("format_prompt"):
            pass
        try:
            with tracer.start_as_current_span(
                f"{Operation.CHAT.value} gpt-4o-mini",
                attributes={
                    gen_ai.GEN_AI_OPERATION_NAME: Operation.CHAT.value,
                    gen_ai.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                    gen_ai.GEN_AI_USAGE_INPUT_TOKENS: 120,
                    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: 0,
                },
            ):
                raise TimeoutError("model timed out after 30 s")  # recorded, status ERROR
        except TimeoutError:
            pass


# ---- the real exporter: GenAI conventions, protobuf + gzip ----------------------------------------


def test_genai_spans_from_the_sdk_exporter_land_as_ops(target: Target, otel: Callable[..., Otel]) -> None:
    sdk = otel()
    agent_run(sdk.tracer, "planner", "sess-genai-1")
    answer = sdk.flush()
    assert answer.request.headers["Content-Encoding"] == "gzip"  # the exporter's gzip, as sent
    assert partial_success(answer) == ExportTraceServiceResponse()  # empty: every op-shaped span taken
    assert answer.headers["x-opslake-spans-stored"] == "3"
    assert answer.headers["x-opslake-spans-skipped"] == "1"  # format_prompt: counted, not stored

    spans = sdk.spans()
    agent, tool, chat = (
        spans[n] for n in ("invoke_agent planner", "execute_tool query_db", "chat gpt-4o-mini")
    )
    rows = target.by_op_id([op_id(s) for s in spans.values()])
    assert set(rows) == {op_id(agent), op_id(tool), op_id(chat)}  # the internal span is not an op

    trace_id = f"{agent.get_span_context().trace_id:032x}"
    for span in (agent, tool, chat):
        row = rows[op_id(span)]
        assert row["op_id"] == f"{trace_id}:{hex_span_id(span)}"
        assert row["trace_id"] == trace_id
        assert row["reporter_id"] == target.key_name
        assert row["source"] == "otlp"
        assert row["agent_id"] == "planner"  # the children inherit it from invoke_agent (same export)
        assert row["session_id"] == "sess-genai-1"
        assert row["attributes"]["otel.span_id"] == hex_span_id(span)
        assert row["duration_ms"] == pytest.approx((span.end_time - span.start_time) / 1e6, abs=0.01)
    assert "otel.parent_span_id" not in rows[op_id(agent)]["attributes"]
    for child in (tool, chat):
        assert rows[op_id(child)]["attributes"]["otel.parent_span_id"] == hex_span_id(agent)

    assert rows[op_id(agent)]["endpoint"] == "agent:planner"
    assert rows[op_id(agent)]["attributes"]["otlp.op"] == "agent"
    assert rows[op_id(agent)]["success"] is True

    tool_row = rows[op_id(tool)]
    assert (tool_row["endpoint"], tool_row["success"], tool_row["error"]) == ("tool:query_db", True, None)
    assert json.loads(tool_row["input_summary"]) == {"sql": "SELECT role FROM workers"}
    assert json.loads(tool_row["output_summary"]) == {"rows": 3}
    assert tool_row["attributes"][gen_ai.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert tool_row["attributes"]["otlp.op"] == "tool"

    chat_row = rows[op_id(chat)]
    assert chat_row["endpoint"] == "model:gpt-4o-mini"
    assert chat_row["success"] is False
    assert "model timed out after 30 s" in chat_row["error"]
    assert chat_row["error_type"] == "TimeoutError"  # the recorded exception's type
    assert chat_row["attributes"][gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == "120"
    assert chat_row["attributes"][gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == "0"
    assert chat_row["attributes"][gen_ai.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert chat_row["attributes"]["otlp.op"] == "model"


def test_openinference_spans_land_as_ops(target: Target, otel: Callable[..., Otel]) -> None:
    sdk = otel(service="oi-runtime")
    kind = OpenInference.OPENINFERENCE_SPAN_KIND
    with sdk.tracer.start_as_current_span(
        "researcher", attributes={kind: OpenInferenceKind.AGENT.value, OpenInference.SESSION_ID: "sess-oi"}
    ):
        with sdk.tracer.start_as_current_span(
            "search_docs",
            attributes={
                kind: OpenInferenceKind.TOOL.value,
                OpenInference.TOOL_NAME: "search_docs",
                OpenInference.INPUT_VALUE: '{"q": "welders in Detroit"}',
                OpenInference.OUTPUT_VALUE: "3 documents",
            },
        ):
            pass
        with sdk.tracer.start_as_current_span(
            "ChatModel",
            attributes={
                kind: OpenInferenceKind.LLM.value,
                OpenInference.LLM_MODEL_NAME: "claude-haiku",
                OpenInference.LLM_TOKEN_COUNT_PROMPT: 42,
                OpenInference.LLM_TOKEN_COUNT_COMPLETION: 7,
                OpenInference.INPUT_VALUE: "Summarise the 3 documents",
                OpenInference.OUTPUT_VALUE: "Three welders are available.",
            },
        ):
            pass
        with sdk.tracer.start_as_current_span("rerank", attributes={kind: OpenInferenceKind.CHAIN.value}):
            pass  # a CHAIN span is not an op
    answer = sdk.flush()
    assert partial_success(answer) == ExportTraceServiceResponse()
    assert (answer.headers["x-opslake-spans-stored"], answer.headers["x-opslake-spans-skipped"]) == ("3", "1")

    spans = sdk.spans()
    rows = target.by_op_id([op_id(s) for s in spans.values()])
    tool, llm, agent = (rows[op_id(spans[n])] for n in ("search_docs", "ChatModel", "researcher"))
    assert (tool["endpoint"], tool["input_summary"], tool["output_summary"]) == (
        "tool:search_docs",
        '{"q": "welders in Detroit"}',
        "3 documents",
    )
    assert (llm["endpoint"], llm["input_summary"], llm["output_summary"]) == (
        "model:claude-haiku",
        "Summarise the 3 documents",
        "Three welders are available.",
    )
    assert llm["attributes"][OpenInference.LLM_TOKEN_COUNT_PROMPT] == "42"
    assert llm["attributes"][OpenInference.LLM_TOKEN_COUNT_COMPLETION] == "7"
    assert llm["attributes"][OpenInference.LLM_MODEL_NAME] == "claude-haiku"
    assert agent["endpoint"] == "agent:researcher"  # no agent name attribute: named by its span name
    for row in (tool, llm, agent):
        assert row["session_id"] == "sess-oi"
        assert row["agent_id"] == "researcher"  # the agent run's, not the resource's service.name
        assert row["reporter_id"] == target.key_name and row["success"] is True


def test_legacy_names_and_opslake_claims_land(target: Target, otel: Callable[..., Otel]) -> None:
    """The deprecated GenAI names (``gen_ai.prompt``/``gen_ai.completion``, ``*_tokens``) still map;
    a runtime's ``opslake.*`` attributes become the /events fields of those names."""
    sdk = otel()
    with sdk.tracer.start_as_current_span(
        "text_completion davinci",
        attributes={
            gen_ai.GEN_AI_OPERATION_NAME: Operation.TEXT_COMPLETION.value,
            gen_ai.GEN_AI_SYSTEM: "openai",
            gen_ai.GEN_AI_REQUEST_MODEL: "davinci-002",
            gen_ai.GEN_AI_PROMPT: "List three welders in Detroit",
            gen_ai.GEN_AI_COMPLETION: "Ana, Bo, Cy",
            gen_ai.GEN_AI_USAGE_PROMPT_TOKENS: 9,
            gen_ai.GEN_AI_USAGE_COMPLETION_TOKENS: 6,
        },
    ):
        pass
    with sdk.tracer.start_as_current_span(
        "staffing step",
        attributes={
            "opslake.endpoint": "/match",
            "opslake.task_class": "staff_job",
            "opslake.event_kind": "rescue",
            "opslake.applied_at_turn": 3,
            "opslake.rescue_attempted": True,
            "opslake.rescue_succeeded": False,
            "opslake.sig_hash": "sig-123",
            "opslake.correction": "send role and state filters",
            "opslake.attributes.rows": 0,
        },
    ):
        pass
    assert partial_success(sdk.flush()) == ExportTraceServiceResponse()

    spans = sdk.spans()
    rows = target.by_op_id([op_id(s) for s in spans.values()])
    legacy = rows[op_id(spans["text_completion davinci"])]
    assert (legacy["endpoint"], legacy["input_summary"], legacy["output_summary"]) == (
        "model:davinci-002",
        "List three welders in Detroit",
        "Ana, Bo, Cy",
    )
    assert legacy["attributes"][gen_ai.GEN_AI_USAGE_PROMPT_TOKENS] == "9"
    assert legacy["attributes"][gen_ai.GEN_AI_USAGE_COMPLETION_TOKENS] == "6"
    assert legacy["attributes"][gen_ai.GEN_AI_SYSTEM] == "openai"

    claimed = rows[op_id(spans["staffing step"])]
    assert claimed["attributes"]["otlp.op"] == "explicit"
    assert {k: claimed[k] for k in ("endpoint", "task_class", "event_kind", "sig_hash", "correction")} == {
        "endpoint": "/match",
        "task_class": "staff_job",
        "event_kind": "rescue",
        "sig_hash": "sig-123",
        "correction": "send role and state filters",
    }
    assert (claimed["applied_at_turn"], claimed["rescue_attempted"], claimed["rescue_succeeded"]) == (
        3,
        True,
        False,
    )
    assert claimed["attributes"]["rows"] == "0"
    assert claimed["source"] == "otlp" and claimed["success"] is True


def test_tool_spans_that_answered_an_error_land_failed_and_marked(
    target: Target, otel: Callable[..., Otel]
) -> None:
    """A tool that answers its error as its result (the span's status stays OK) lands as a failed op,
    marked as inferred, with the error and its type; a result that only mentions an error, and a
    model's output that quotes one, stay successes. Analysts find them with ``element_at``."""
    sdk = otel(service="tool-errors-runtime")
    undefined_column = {"error": {"message": 'column "wrokers" does not exist', "type": "UndefinedColumn"}}
    mcp_error = {"content": [{"type": "text", "text": "path outside the workspace"}], "isError": True}
    with sdk.tracer.start_as_current_span(
        f"{Operation.INVOKE_AGENT.value} fixer",
        attributes={
            gen_ai.GEN_AI_OPERATION_NAME: Operation.INVOKE_AGENT.value,
            gen_ai.GEN_AI_AGENT_NAME: "fixer",
        },
    ):
        with sdk.tracer.start_as_current_span(
            f"{Operation.EXECUTE_TOOL.value} query_db",
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
                gen_ai.GEN_AI_TOOL_NAME: "query_db",
                gen_ai.GEN_AI_TOOL_CALL_ID: "call_7",
                gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"sql": "SELECT * FROM wrokers"}),
                gen_ai.GEN_AI_TOOL_CALL_RESULT: json.dumps(undefined_column),
            },
        ):
            pass
        with sdk.tracer.start_as_current_span(
            "read_file",
            attributes={
                OpenInference.OPENINFERENCE_SPAN_KIND: OpenInferenceKind.TOOL.value,
                OpenInference.TOOL_NAME: "read_file",
                OpenInference.OUTPUT_VALUE: json.dumps(mcp_error),
            },
        ) as span:
            span.set_status(Status(StatusCode.OK))  # as OpenInference ends every span that did not raise
        with sdk.tracer.start_as_current_span(
            f"{Operation.EXECUTE_TOOL.value} grep",
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
                gen_ai.GEN_AI_TOOL_NAME: "grep",
                gen_ai.GEN_AI_TOOL_CALL_RESULT: "No error found in 3 files",
            },
        ):
            pass
        with sdk.tracer.start_as_current_span(
            f"{Operation.CHAT.value} gpt-4o-mini",
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: Operation.CHAT.value,
                gen_ai.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                gen_ai.GEN_AI_OUTPUT_MESSAGES: "Error: the table is misspelled; I will retry with workers",
            },
        ):
            pass
    answer = sdk.flush()
    assert partial_success(answer) == ExportTraceServiceResponse()
    assert answer.headers["x-opslake-spans-stored"] == "5"

    spans = sdk.spans()
    rows = target.by_op_id([op_id(s) for s in spans.values()])
    query_db = rows[op_id(spans["execute_tool query_db"])]
    assert (query_db["success"], query_db["error"], query_db["error_type"]) == (
        False,
        'column "wrokers" does not exist',
        "UndefinedColumn",
    )
    assert query_db["attributes"]["opslake.failure_inferred"] == "error_field"
    assert query_db["attributes"][gen_ai.GEN_AI_TOOL_CALL_ID] == "call_7"  # the span's other fields as ever
    assert json.loads(query_db["output_summary"]) == undefined_column
    assert (query_db["endpoint"], query_db["agent_id"]) == ("tool:query_db", "fixer")

    read_file = rows[op_id(spans["read_file"])]
    assert (read_file["success"], read_file["error"], read_file["error_type"]) == (
        False,
        "path outside the workspace",
        "tool_error_result",
    )
    assert read_file["attributes"]["opslake.failure_inferred"] == "is_error"

    for name in ("execute_tool grep", "chat gpt-4o-mini", "invoke_agent fixer"):
        row = rows[op_id(spans[name])]
        assert row["success"] is True and row["error"] is None, name
        assert "opslake.failure_inferred" not in row["attributes"], name

    listed = ", ".join(f"'{op_id(s)}'" for s in spans.values())
    inferred = target.query(
        "SELECT endpoint, element_at(attributes, 'opslake.failure_inferred') AS rule FROM ops "
        f"WHERE op_id IN ({listed}) AND element_at(attributes, 'opslake.failure_inferred') IS NOT NULL "
        "ORDER BY endpoint"
    )
    assert inferred == [
        {"endpoint": "tool:query_db", "rule": "error_field"},
        {"endpoint": "tool:read_file", "rule": "is_error"},
    ]


# ---- OTLP/JSON built from the SDK's own spans ------------------------------------------------------


def otlp_json(spans: list[ReadableSpan]) -> bytes:
    """The spans as OTLP/JSON: the protobuf JSON mapping of the SDK's own encoding, enums as
    integers, trace and span ids as hex (the one way OTLP/JSON departs from the mapping)."""
    document = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in span:
                        span[name] = base64.b64decode(span[name]).hex()
    return json.dumps(document).encode()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_otlp_json_lands_the_same_ops_and_answers_json(
    target: Target, otel: Callable[..., Otel], gzipped: bool
) -> None:
    sdk = otel(export=False)  # the spans go out as JSON below
    agent_run(sdk.tracer, "json-planner", f"sess-json-{gzipped}")
    spans = list(sdk.memory.get_finished_spans())
    body = otlp_json(spans)
    assert b'"traceId": "' + f"{spans[0].get_span_context().trace_id:032x}".encode() in body

    answer = target.post(body, "application/json", gzipped=gzipped)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {}  # an empty ExportTraceServiceResponse
    assert (answer.headers["x-opslake-spans-stored"], answer.headers["x-opslake-spans-skipped"]) == ("3", "1")

    by_name = {span.name: span for span in spans}
    rows = target.by_op_id([op_id(s) for s in spans])
    assert len(rows) == 3
    tool, chat = rows[op_id(by_name["execute_tool query_db"])], rows[op_id(by_name["chat gpt-4o-mini"])]
    assert (tool["endpoint"], tool["agent_id"], tool["success"]) == ("tool:query_db", "json-planner", True)
    assert (chat["endpoint"], chat["success"], chat["error_type"]) == (
        "model:gpt-4o-mini",
        False,
        "TimeoutError",
    )
    assert chat["attributes"][gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == "120"
    assert chat["attributes"]["otel.parent_span_id"] == hex_span_id(by_name["invoke_agent json-planner"])


# ---- a batch with bad spans: partial_success, the good ones land -----------------------------------


def test_bad_spans_are_rejected_by_name_and_the_good_ones_land(
    target: Target, otel: Callable[..., Otel]
) -> None:
    sdk = otel()
    tool = {gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value}
    with sdk.tracer.start_as_current_span("good", attributes={**tool, gen_ai.GEN_AI_TOOL_NAME: "fine"}):
        pass
    backwards = sdk.tracer.start_span("backwards", attributes={**tool, gen_ai.GEN_AI_TOOL_NAME: "clock"})
    backwards.end(end_time=backwards.start_time - 1_000_000_000)  # type: ignore[attr-defined]
    with sdk.tracer.start_as_current_span(
        "forged_llm", attributes={**tool, gen_ai.GEN_AI_TOOL_NAME: "x", "opslake.source": "llm"}
    ):
        pass
    huge = {f"opslake.attributes.k{i:02d}": "\U0001f600" * 1_000 for i in range(45)}  # 45 x 4 KB once stored
    with sdk.tracer.start_as_current_span(
        "oversized", attributes={**tool, gen_ai.GEN_AI_TOOL_NAME: "big", **huge}
    ):
        pass
    answer = sdk.flush()

    response = partial_success(answer)
    assert response.partial_success.rejected_spans == 3
    message = response.partial_success.error_message
    spans = sdk.spans()
    for name, why in (("backwards", "before start"), ("forged_llm", "reserved"), ("oversized", "bytes")):
        assert f"span {hex_span_id(spans[name])} ('{name}')" in message, message
        assert why in message.split(hex_span_id(spans[name]), 1)[1].split(";", 1)[0], message
    assert answer.headers["x-opslake-spans-stored"] == "1"

    rows = target.by_op_id([op_id(s) for s in spans.values()])
    assert set(rows) == {op_id(spans["good"])}
    assert rows[op_id(spans["good"])]["endpoint"] == "tool:fine"


# ---- malformed and oversized exports: 4xx with a google.rpc.Status ----------------------------------


def one_span_export() -> bytes:
    """A valid ExportTraceServiceRequest with one tool span, built with the proto classes."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes(range(1, 17)), bytes(range(1, 9)), "t"
    span.start_time_unix_nano = time.time_ns()
    span.end_time_unix_nano = span.start_time_unix_nano + 5_000_000
    attribute = span.attributes.add()
    attribute.key, attribute.value.string_value = gen_ai.GEN_AI_OPERATION_NAME, Operation.EXECUTE_TOOL.value
    return request.SerializeToString()


def many_spans(count: int) -> bytes:
    request = ExportTraceServiceRequest.FromString(one_span_export())
    scope = request.resource_spans[0].scope_spans[0]
    template = scope.spans[0]
    for i in range(count - 1):
        span = scope.spans.add()
        span.CopyFrom(template)
        span.span_id = (i + 2).to_bytes(8, "big")
    return request.SerializeToString()


def test_a_gzip_bomb_is_413_without_inflating_it(target: Target) -> None:
    bomb = gzip.compress(b"\0" * 50 * 1024 * 1024, compresslevel=9)  # ~50 KB on the wire
    assert len(bomb) < 100_000
    answer = target.client.post(
        "/v1/traces",
        content=bomb,
        headers={"content-type": PROTOBUF, "content-encoding": "gzip", "x-api-key": target.key},
    )
    status = rpc_status(answer, 413)
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert error_reason(status) == "payload_too_large"
    assert "bomb" in status.message


def test_over_the_span_limit_is_413(target: Target) -> None:
    over = MAX_SPANS_PER_REQUEST + 1
    status = rpc_status(target.post(many_spans(over), gzipped=True), 413)
    assert f"{over} spans" in status.message and error_reason(status) == "payload_too_large"


@pytest.mark.parametrize(
    ("body", "content_type"), [(b"", PROTOBUF), (b"{}", "application/json")], ids=["protobuf", "json"]
)
def test_an_empty_export_is_a_200_with_nothing_stored(target: Target, body: bytes, content_type: str) -> None:
    """An empty protobuf message is zero bytes, and ``{}`` an empty OTLP/JSON export: valid, no spans."""
    answer = target.post(body, content_type)
    assert answer.status_code == 200, answer.content
    assert answer.headers["x-opslake-spans-stored"] == answer.headers["x-opslake-spans-skipped"] == "0"
    assert target.drainer.drain().received == 0


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status", "reason"),
    [
        (one_span_export(), "text/plain", {}, 415, "unsupported_media_type"),
        (one_span_export(), PROTOBUF, {"content-encoding": "br"}, 415, "unsupported_media_type"),
        (one_span_export()[:-7], PROTOBUF, {}, 400, "invalid_otlp"),  # truncated protobuf
        (
            b"\x1f\x8b\x08\x00garbage-not-deflate",
            PROTOBUF,
            {"content-encoding": "gzip"},
            400,
            "invalid_encoding",
        ),
        (
            gzip.compress(one_span_export())[:-12],
            PROTOBUF,
            {"content-encoding": "gzip"},
            400,
            "invalid_encoding",
        ),
        (
            json.dumps(
                {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz" * 16, "spanId": "01" * 8}]}]}]}
            ),
            "application/json",
            {},
            400,
            "invalid_otlp",
        ),
        ('{"a":' + "[" * 5_000 + "]" * 5_000 + "}", "application/json", {}, 400, "json_too_deep"),
        (b"{not json", "application/json", {}, 400, "malformed_json"),
        # lone surrogates (valid JSON escapes, not UTF-8 text): in a value, a key, an enum name
        (b'{"resourceSpans": "\\ud800"}', "application/json", {}, 400, "invalid_encoding"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"\\ud800": 1}]}]}]}',
            "application/json",
            {},
            400,
            "invalid_encoding",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": "\\udfff"}]}]}]}',
            "application/json",
            {},
            400,
            "invalid_encoding",
        ),
    ],
    ids=[
        "wrong-content-type",
        "unknown-content-encoding",
        "truncated-protobuf",
        "invalid-gzip",
        "truncated-gzip",
        "non-hex-id",
        "deeply-nested-json",
        "malformed-json",
        "lone-surrogate-value",
        "lone-surrogate-key",
        "lone-surrogate-enum",
    ],
)
def test_malformed_exports_are_4xx_with_a_status_and_nothing_stored(
    target: Target,
    body: bytes | str,
    content_type: str,
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    raw = body.encode() if isinstance(body, str) else body
    answer = target.post(raw, content_type, **headers)
    message = rpc_status(answer, status)
    assert error_reason(message) == reason, message.message
    # in the request's encoding; JSON when the content type is not one opslake can answer in
    expected = content_type if content_type in (PROTOBUF, "application/json") else "application/json"
    assert answer.headers["content-type"] == expected
    assert target.drainer.drain().received == 0  # nothing was enqueued


def test_no_api_key_is_api_gateways_403(target: Target) -> None:
    answer = target.client.post("/v1/traces", content=one_span_export(), headers={"content-type": PROTOBUF})
    assert answer.status_code == 403
    assert answer.json() == {"message": "Forbidden"}


# ---- a queue failure: 503 + Retry-After, nothing stored; the exporter's retry lands once -----------


@pytest.fixture
def failing_queue(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """SQS (the local stack's moto server, in this process) refuses the next ``left`` batches."""
    state = {"left": 0, "refused": 0}
    send_message_batch = SQSResponse.send_message_batch

    def refuse(self: SQSResponse) -> Any:
        if state["left"] > 0:
            state["left"] -= 1
            state["refused"] += 1
            raise JsonRESTError("AccessDenied", "the queue refused the batch (injected)")
        return send_message_batch(self)

    monkeypatch.setattr(SQSResponse, "send_message_batch", refuse)
    return state


def test_a_queue_failure_is_503_with_retry_after_and_nothing_stored(
    target: Target, failing_queue: dict[str, int]
) -> None:
    failing_queue["left"] = 1_000
    answer = target.post(one_span_export(), gzipped=True)
    status = rpc_status(answer, 503)
    assert answer.headers["retry-after"] == "5"
    assert answer.headers["content-type"] == PROTOBUF
    assert status.code == code_pb2.UNAVAILABLE and "retry" in status.message
    assert error_reason(status) == "service_unavailable"
    assert failing_queue["refused"] >= 1
    failing_queue["left"] = 0
    assert target.drainer.drain().received == 0  # nothing was stored


def test_the_exporter_retries_a_503_and_the_spans_land_once(
    target: Target, otel: Callable[..., Otel], failing_queue: dict[str, int]
) -> None:
    sdk = otel()
    agent_run(sdk.tracer, "unlucky", "sess-503")
    failing_queue["left"] = 1  # the first export's batch only
    sdk.provider.force_flush(60_000)  # the exporter waits Retry-After (5 s), then sends the same body
    first, retried = sdk.answers
    assert (first.status_code, retried.status_code) == (503, 200)
    assert gzip.decompress(first.request.body) == gzip.decompress(retried.request.body)
    rows = target.by_op_id([op_id(s) for s in sdk.memory.get_finished_spans()])
    assert len(rows) == 3  # once each, without waiting for compaction


# ---- a hostile client -----------------------------------------------------------------------------


def test_a_client_cannot_claim_another_reporter_and_its_secrets_are_redacted(
    target: Target, otel: Callable[..., Otel]
) -> None:
    sdk = otel(service="victim-service")
    with sdk.tracer.start_as_current_span(
        "execute_tool fetch",
        attributes={
            gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
            gen_ai.GEN_AI_TOOL_NAME: "fetch",
            gen_ai.GEN_AI_AGENT_ID: "victim-agent",  # a claim, kept as a claim
            "opslake.reporter_id": "victim-runtime",  # not a field a span can set
            "opslake.attributes.reporter_id": "victim-runtime",  # only ever an attribute
            "opslake.attributes.api_token": SECRET,
            gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"url": "https://x.test", "authorization": BEARER}),
            gen_ai.GEN_AI_TOOL_CALL_RESULT: f"token={SECRET}",
        },
    ) as span:
        span.set_status(Status(StatusCode.ERROR, f"401 for {BEARER}"))
    answer = sdk.flush()
    assert partial_success(answer) == ExportTraceServiceResponse()

    (row,) = target.stored([op_id(s) for s in sdk.memory.get_finished_spans()])
    assert row["reporter_id"] == target.key_name
    assert row["agent_id"] == "victim-agent"
    assert row["attributes"]["reporter_id"] == "victim-runtime"  # an attribute, not the column
    stored = json.dumps(row, default=str)
    assert SECRET not in stored and "c2VjcmV0LXRva2Vu" not in stored
    assert "[REDACTED]" in row["input_summary"] and "[REDACTED]" in row["error"]


def test_a_replay_of_another_reporters_spans_stays_the_replayers(
    target: Target, otel: Callable[..., Otel]
) -> None:
    """Op ids are idempotency keys per API key: a client that replays another runtime's export
    (same trace and span ids) stores ops of its own and cannot replace or hide the original."""
    sdk = otel(export=False)
    agent_run(sdk.tracer, "original", "sess-replayed")
    body = encode_spans(list(sdk.memory.get_finished_spans())).SerializeToString()
    intruder = target.stack.create_api_key("otlp-intruder")
    assert target.post(body).status_code == 200
    replayed = target.post(body, **{"x-api-key": intruder.value})
    assert replayed.status_code == 200 and replayed.headers["x-opslake-spans-stored"] == "3"

    rows = target.stored([op_id(s) for s in sdk.memory.get_finished_spans()])
    by_reporter: dict[str, set[str]] = {}
    for row in rows:
        by_reporter.setdefault(row["reporter_id"], set()).add(row["op_id"])
    assert by_reporter.keys() == {target.key_name, "otlp-intruder"}
    assert by_reporter[target.key_name] == by_reporter["otlp-intruder"] and len(rows) == 6
    assert all(row["agent_id"] == "original" for row in rows)  # the claim, whoever sent it


def test_spans_with_all_zero_ids_are_rejected_not_merged(target: Target) -> None:
    """OTLP: a trace or span id of all zeroes is invalid. Taken as is, every such span of a
    reporter would share the op id 000…:000… and all but one would be dropped as duplicates."""
    request = ExportTraceServiceRequest.FromString(many_spans(3))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id, spans[0].span_id = bytes(16), bytes(8)
    spans[1].trace_id, spans[1].span_id = bytes(16), bytes(8)
    spans[1].name = "another tool call"
    spans[2].trace_id = bytes(range(101, 117))  # a valid one
    answer = target.post(request.SerializeToString())
    response = partial_success(answer)
    assert response.partial_success.rejected_spans == 2, response
    assert answer.headers["x-opslake-spans-stored"] == "1"
    valid = f"{bytes(range(101, 117)).hex()}:{spans[2].span_id.hex()}"
    zero = f"{bytes(16).hex()}:{bytes(8).hex()}"
    assert {row["op_id"] for row in target.stored([valid, zero])} == {valid}


def test_ten_thousand_attributes_are_bounded(target: Target, otel: Callable[..., Otel]) -> None:
    sdk = otel(max_attributes=20_001)
    tool = {gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value}
    noise = {f"framework.detail.{i}": f"value {i}" for i in range(10_000)}
    with sdk.tracer.start_as_current_span(
        "noisy", attributes={**tool, gen_ai.GEN_AI_TOOL_NAME: "noisy", **noise}
    ):
        pass
    claimed = {f"opslake.attributes.k{i}": str(i) for i in range(10_000)}
    with sdk.tracer.start_as_current_span(
        "claims", attributes={**tool, gen_ai.GEN_AI_TOOL_NAME: "claims", **claimed}
    ):
        pass
    answer = sdk.flush()

    response = partial_success(answer)
    spans = sdk.spans()
    assert response.partial_success.rejected_spans == 1  # 10,000 op attributes: over the limit of 50
    assert f"span {hex_span_id(spans['claims'])}" in response.partial_success.error_message
    assert "attributes" in response.partial_success.error_message
    (row,) = target.stored([op_id(s) for s in spans.values()])
    assert row["endpoint"] == "tool:noisy"
    assert len(row["attributes"]) <= 50  # the framework's own attributes are not op attributes
    assert not any(key.startswith("framework.") for key in row["attributes"])


# ---- an exporter retry lands once (last in the module: compaction with the clock moved past
# compact_after_hours closes the current hour, and ops written after it would land in a location
# the swapped partition no longer points at) ------------------------------------------------------


def test_a_retried_export_lands_once_after_compaction(target: Target, otel: Callable[..., Otel]) -> None:
    sdk = otel()
    agent_run(sdk.tracer, "retrier", "sess-retry")
    first = sdk.flush()
    assert first.status_code == 200
    spans = list(sdk.memory.get_finished_spans())
    ids = [op_id(s) for s in spans]
    assert len(target.stored(ids)) == 3  # drained: the first export is in the lake
    # the exporter's retry: the very same batch again (as after a 503 or a lost answer)
    retry = sdk.exporter.export(spans)
    assert retry.name == "SUCCESS"
    assert gzip.decompress(sdk.answers[-1].request.body) == gzip.decompress(first.request.body)
    assert len(target.stored(ids)) == 6  # at-least-once until compaction

    report = compact_closed_hours(target.stack)
    assert report.errors == {}
    assert sum(p.duplicates_dropped for p in report.compacted) == 3  # the retried copies, nothing else
    rows = target.by_op_id(ids)
    assert len(rows) == 3
