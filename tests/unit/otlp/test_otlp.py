"""POST /v1/traces logic (opslake.otlp): decoding, which spans are ops, the mapping, the answers.

Spans come from the real OpenTelemetry SDK (recorded in memory and encoded by the exporter's own
encoder, the bytes its OTLP/HTTP exporter would send) or are built with the opentelemetry-proto
message classes where a test needs a span no SDK would make (bad ids, an end before the start).
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format
from google.rpc.error_details_pb2 import ErrorInfo
from google.rpc.status_pb2 import Status as RpcStatus
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Status as OtelStatus
from opentelemetry.trace import StatusCode, Tracer

from opslake.errors import (
    JsonTooDeepError,
    PayloadTooLargeError,
    ServiceUnavailableError,
    UndecodableBodyError,
    UnsupportedMediaTypeError,
)
from opslake.otlp.decode import (
    MAX_COMPRESSION_RATIO,
    MAX_DECOMPRESSED_BYTES,
    MAX_SPANS_PER_REQUEST,
    OtlpBadRequestError,
    decode_export,
    encoding_of,
    inflate,
)
from opslake.otlp.ingest import MAX_REJECTIONS_LISTED, TraceIngestResult, ingest_export
from opslake.otlp.mapping import MAX_ENDPOINT_CHARS, map_export
from opslake.otlp.responses import error_answer, success_answer

from ...fakes import MemoryQueue

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
T0 = int(datetime(2026, 11, 22, 11, 59, tzinfo=UTC).timestamp() * 1e9)
TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
PROTOBUF = "application/x-protobuf"


# ---- spans from the real SDK --------------------------------------------------------------------
def sdk_request(record: Callable[[Tracer], None], service: str = "svc-test") -> ExportTraceServiceRequest:
    """The ExportTraceServiceRequest the SDK's OTLP exporter would send for the spans ``record`` makes."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    record(provider.get_tracer("opslake-tests"))
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


def agent_run(tracer: Tracer) -> None:
    """An agent invocation with a tool call, a failed model call and a plain HTTP span."""
    with tracer.start_as_current_span(
        "invoke_agent planner",
        attributes={gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent", gen_ai.GEN_AI_AGENT_NAME: "planner",
                    "session.id": "s-42"},
    ):  # fmt: skip
        with tracer.start_as_current_span(
            "execute_tool query_db",
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
                gen_ai.GEN_AI_TOOL_NAME: "query_db",
                gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"sql": "SELECT 1"}),
                gen_ai.GEN_AI_TOOL_CALL_RESULT: "1 row",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "chat gpt-x",
            attributes={gen_ai.GEN_AI_OPERATION_NAME: "chat", gen_ai.GEN_AI_REQUEST_MODEL: "gpt-x",
                        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: 120, gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: 0},
        ) as span:  # fmt: skip
            try:
                raise TimeoutError("the model timed out after 30 s")
            except TimeoutError as exc:
                span.record_exception(exc)
                span.set_status(OtelStatus(StatusCode.ERROR, str(exc)))
        with tracer.start_as_current_span("GET /internal/health"):
            pass


def by_endpoint(request: ExportTraceServiceRequest, **options: Any) -> dict[str, dict[str, Any]]:
    return {m.op["endpoint"]: m.op for m in map_export(request, **options).ops}


# ---- spans built by hand -----------------------------------------------------------------------
def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def span(
    name: str = "op",
    *,
    span_id: int = 1,
    parent: int = 0,
    trace: bytes = TRACE,
    start: int = T0,
    duration_ns: int = 5_000_000,
    error: str | None = None,
    **attributes: Any,
) -> Span:
    made = Span(
        trace_id=trace,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=start + duration_ns,
        attributes=[kv(k.replace("__", "."), v) for k, v in attributes.items()],
    )
    if error is not None:
        made.status.code = Status.STATUS_CODE_ERROR
        made.status.message = error
    return made


def request_of(*spans: Span, service: str | None = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    if service:
        resource_spans.resource.attributes.append(kv("service.name", service))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request


def tool(name: str = "lookup", span_id: int = 1, **more: Any) -> Span:
    return span(f"execute_tool {name}", span_id=span_id, gen_ai__operation__name="execute_tool",
                gen_ai__tool__name=name, **more)  # fmt: skip


def otlp_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """The OTLP/JSON form of a request: protobuf JSON with trace and span ids in hex."""
    document = json_format.MessageToDict(request)

    def hexify(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hexify(value)
        elif isinstance(node, list):
            for item in node:
                hexify(item)

    hexify(document)
    return document


# ---- decoding ----------------------------------------------------------------------------------
def test_content_types_and_encodings_accepted_and_refused() -> None:
    assert encoding_of("application/x-protobuf") == "protobuf"
    assert encoding_of("application/json; charset=utf-8") == "json"
    for bad in ("text/plain", "", None, "application/grpc", "application/protobuf"):
        with pytest.raises(UnsupportedMediaTypeError, match="not an OTLP/HTTP encoding"):
            encoding_of(bad)
    with pytest.raises(UnsupportedMediaTypeError, match="'br' is not accepted"):
        inflate(b"x", "br")


def test_gzip_is_inflated_and_a_body_api_gateway_already_inflated_passes_through() -> None:
    raw = sdk_request(agent_run).SerializeToString()
    assert inflate(gzip.compress(raw), "gzip") == raw
    assert inflate(raw, "gzip") == raw  # API Gateway decompresses but keeps the header
    assert inflate(raw, "identity") == raw
    assert decode_export(gzip.compress(raw), content_type=PROTOBUF, content_encoding="gzip").span_count == 4


def test_bad_and_truncated_gzip_are_400s() -> None:
    raw = gzip.compress(b"\x0a" * 1000)
    with pytest.raises(UndecodableBodyError, match="truncated"):
        inflate(raw[: len(raw) // 2], "gzip")
    with pytest.raises(UndecodableBodyError, match="not valid gzip"):
        inflate(b"\x1f\x8b" + b"\x00" * 40, "gzip")


def test_a_gzip_bomb_is_refused_while_inflating_never_whole() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~65 KB
    with pytest.raises(PayloadTooLargeError, match=f"more than {MAX_COMPRESSION_RATIO}×") as caught:
        inflate(bomb, "gzip")
    assert "decompression bomb" in caught.value.message


def test_a_body_over_the_limit_once_inflated_is_413_even_at_a_plain_ratio() -> None:
    # random-ish text compresses ~2-3×: the ratio bound never trips, the size bound does
    text = b"".join(f"{i:x}{i * 7919 % 104729:x}".encode() for i in range(1_200_000))
    assert len(text) > MAX_DECOMPRESSED_BYTES
    with pytest.raises(PayloadTooLargeError, match=f"the limit is {MAX_DECOMPRESSED_BYTES}"):
        inflate(gzip.compress(text), "gzip")
    with pytest.raises(PayloadTooLargeError):
        inflate(text, None)


def test_truncated_or_foreign_protobuf_is_a_400_that_says_so() -> None:
    raw = sdk_request(agent_run).SerializeToString()
    with pytest.raises(OtlpBadRequestError, match="not a valid protobuf ExportTraceServiceRequest"):
        decode_export(raw[: len(raw) - 7], content_type=PROTOBUF, content_encoding=None)
    with pytest.raises(OtlpBadRequestError, match="not a valid protobuf"):
        decode_export(b'{"resourceSpans": []}', content_type=PROTOBUF, content_encoding=None)
    with pytest.raises(OtlpBadRequestError, match="empty"):  # (zero protobuf bytes: an empty export)
        decode_export(b"", content_type="application/json", content_encoding=None)


def test_otlp_json_with_hex_ids_decodes_to_the_same_request_as_protobuf() -> None:
    request = sdk_request(agent_run)
    body = json.dumps(otlp_json(request)).encode()
    export = decode_export(body, content_type="application/json", content_encoding=None)
    assert export.encoding == "json"
    assert export.request == request


def test_otlp_json_refusals() -> None:
    document = otlp_json(request_of(tool()))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "not-hex-at-all"
    with pytest.raises(OtlpBadRequestError, match="traceId 'not-hex-at-all' is not hex"):
        decode_export(json.dumps(document).encode(), content_type="application/json", content_encoding=None)
    with pytest.raises(OtlpBadRequestError, match="is an object, not a JSON list"):
        decode_export(b"[]", content_type="application/json", content_encoding=None)
    with pytest.raises(JsonTooDeepError):
        decode_export(b"[" * 5000 + b"]" * 5000, content_type="application/json", content_encoding=None)
    with pytest.raises(OtlpBadRequestError, match="does not follow OTLP/JSON"):
        decode_export(b'{"resourceSpans": 7}', content_type="application/json", content_encoding=None)
    with pytest.raises(UndecodableBodyError):
        decode_export(b'{"a": "\xff"}', content_type="application/json", content_encoding=None)


def test_unknown_json_fields_are_ignored_as_the_spec_requires() -> None:
    document = otlp_json(request_of(tool()))
    document["futureField"] = {"x": 1}
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["newThing"] = 3
    export = decode_export(
        json.dumps(document).encode(), content_type="application/json", content_encoding=None
    )
    assert export.span_count == 1


def test_too_many_spans_in_one_export_is_413() -> None:
    spans = [tool(span_id=i + 1) for i in range(MAX_SPANS_PER_REQUEST + 1)]
    raw = request_of(*spans).SerializeToString()
    with pytest.raises(PayloadTooLargeError, match=f"the limit is {MAX_SPANS_PER_REQUEST}"):
        decode_export(raw, content_type=PROTOBUF, content_encoding=None)


# ---- which spans are ops -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("attributes", "error", "kind"),
    [
        ({gen_ai.GEN_AI_OPERATION_NAME: "execute_tool"}, None, "tool"),
        ({gen_ai.GEN_AI_OPERATION_NAME: "chat"}, None, "model"),
        ({gen_ai.GEN_AI_OPERATION_NAME: "text_completion"}, None, "model"),
        ({gen_ai.GEN_AI_OPERATION_NAME: "generate_content"}, None, "model"),
        ({gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent"}, None, "agent"),
        ({gen_ai.GEN_AI_OPERATION_NAME: "retrieval"}, None, "retrieval"),
        ({SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.TOOL.value}, None, "tool"),
        ({SpanAttributes.OPENINFERENCE_SPAN_KIND: "llm"}, None, "model"),  # case as some exporters send it
        ({SpanAttributes.OPENINFERENCE_SPAN_KIND: "AGENT"}, None, "agent"),
        ({SpanAttributes.OPENINFERENCE_SPAN_KIND: "RETRIEVER"}, None, "retrieval"),
        ({"http.request.method": "GET"}, "connection reset", "error"),
        ({"opslake.endpoint": "runtime:model_call"}, None, "explicit"),
        ({gen_ai.GEN_AI_OPERATION_NAME: "embeddings"}, None, None),
        ({SpanAttributes.OPENINFERENCE_SPAN_KIND: "CHAIN"}, None, None),
        ({"http.request.method": "GET"}, None, None),
    ],
)
def test_which_spans_become_ops(attributes: dict[str, Any], error: str | None, kind: str | None) -> None:
    made = span("x", error=error)
    made.attributes.extend(kv(k, v) for k, v in attributes.items())
    mapped = map_export(request_of(made))
    if kind is None:
        assert (mapped.ops, mapped.skipped) == ([], 1)
        kept = map_export(request_of(made), keep_all=True)
        assert [m.op["attributes"]["otlp.op"] for m in kept.ops] == ["span"]
    else:
        assert [m.op["attributes"]["otlp.op"] for m in mapped.ops] == [kind]


# ---- the mapping -------------------------------------------------------------------------------
def test_an_sdk_agent_run_maps_to_ops_with_every_field() -> None:
    request = sdk_request(agent_run)
    mapped = map_export(request)
    assert mapped.skipped == 1 and not mapped.rejected
    ops = {m.op["endpoint"]: m.op for m in mapped.ops}
    assert set(ops) == {"agent:planner", "tool:query_db", "model:gpt-x"}
    agent, tool_op, model = ops["agent:planner"], ops["tool:query_db"], ops["model:gpt-x"]
    trace_id = agent["trace_id"]
    assert len(trace_id) == 32 and tool_op["trace_id"] == model["trace_id"] == trace_id
    assert tool_op["op_id"] == f"{trace_id}:{tool_op['attributes']['otel.span_id']}"
    assert tool_op["attributes"]["otel.parent_span_id"] == agent["attributes"]["otel.span_id"]
    # the children inherit the agent and session their parent names (same export)
    assert {op["agent_id"] for op in ops.values()} == {"planner"}
    assert {op["session_id"] for op in ops.values()} == {"s-42"}
    assert tool_op["success"] is True and "error" not in tool_op
    assert json.loads(tool_op["input_summary"]) == {"sql": "SELECT 1"}
    assert tool_op["output_summary"] == "1 row"
    assert model["success"] is False
    assert model["error"] == "the model timed out after 30 s"  # the exception event
    assert model["error_type"] == "TimeoutError"  # from the exception event
    assert model["attributes"][gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert model["attributes"][gen_ai.GEN_AI_REQUEST_MODEL] == "gpt-x"
    assert model["source"] == "otlp"
    assert 0 <= model["duration_ms"] < 10_000
    assert datetime.fromisoformat(model["ts"]).tzinfo is not None


def test_endpoint_rules() -> None:
    spans = [
        tool("search", span_id=1),
        span("llm call", span_id=2, openinference__span__kind="LLM", llm__model_name="m-oi"),
        span("chat", span_id=3, gen_ai__operation__name="chat", gen_ai__response__model="m-resp"),
        span("chat", span_id=4, gen_ai__operation__name="chat"),  # no model: the span name
        span("   ", span_id=5, gen_ai__operation__name="invoke_agent"),  # no name either
        span("n" * 500, span_id=6, gen_ai__operation__name="invoke_agent"),
        span("x", span_id=7, opslake__endpoint="runtime:model_call", gen_ai__operation__name="chat",
             gen_ai__request__model="ignored"),
    ]  # fmt: skip
    endpoints = [m.op["endpoint"] for m in map_export(request_of(*spans)).ops]
    assert endpoints == [
        "tool:search", "model:m-oi", "model:m-resp", "chat", "agent:unnamed_agent",
        ("agent:" + "n" * 500)[:MAX_ENDPOINT_CHARS],
        "runtime:model_call",
    ]  # fmt: skip


def test_errors_and_error_types() -> None:
    def error_type(value: str) -> dict[str, Any]:
        return {ERROR_TYPE.replace(".", "__"): value}

    with_type = span(
        "a", span_id=1, error="quota exceeded", gen_ai__operation__name="chat", **error_type("429")
    )
    bare = span("b", span_id=2, error="", gen_ai__operation__name="chat")
    ok_with_type = span("c", span_id=3, gen_ai__operation__name="chat", **error_type("retry"))
    ops = [m.op for m in map_export(request_of(with_type, bare, ok_with_type)).ops]
    assert (ops[0]["error"], ops[0]["error_type"]) == ("quota exceeded", "429")
    assert (ops[1]["error"], ops[1]["error_type"]) == ("the span's status is ERROR", "span_error")
    assert ops[2]["success"] is True and ops[2]["error_type"] == "retry" and "error" not in ops[2]


def test_current_attribute_names_win_and_legacy_ones_are_read() -> None:
    legacy = span("a", span_id=1, gen_ai__operation__name="chat", gen_ai__prompt="old prompt",
                  gen_ai__completion="old answer")  # fmt: skip
    both = span("b", span_id=2, gen_ai__operation__name="chat", gen_ai__prompt="old prompt",
                gen_ai__input__messages='[{"role":"user"}]')  # fmt: skip
    openinference = span(
        "c", span_id=3, openinference__span__kind="TOOL", input__value="in", output__value="out"
    )
    ops = [m.op for m in map_export(request_of(legacy, both, openinference)).ops]
    assert (ops[0]["input_summary"], ops[0]["output_summary"]) == ("old prompt", "old answer")
    assert ops[1]["input_summary"] == '[{"role":"user"}]'
    assert (ops[2]["input_summary"], ops[2]["output_summary"]) == ("in", "out")


def test_structured_values_become_json_text() -> None:
    made = span("a", gen_ai__operation__name="chat")
    messages = AnyValue()
    entry = messages.array_value.values.add()
    entry.kvlist_value.values.append(kv("role", "user"))
    entry.kvlist_value.values.append(kv("content", "hello"))
    made.attributes.append(KeyValue(key=gen_ai.GEN_AI_INPUT_MESSAGES, value=messages))
    (op,) = [m.op for m in map_export(request_of(made)).ops]
    assert json.loads(op["input_summary"]) == [{"role": "user", "content": "hello"}]


def test_opslake_attributes_carry_what_only_a_runtime_knows() -> None:
    made = span(
        "rescue", opslake__endpoint="/sql", opslake__source="runtime", opslake__event_kind="rescue",
        opslake__task_class="sql_question", opslake__sig_hash="ab12", opslake__applied_at_turn=3,
        opslake__rescue_attempted=True, opslake__rescue_succeeded=False, opslake__correction="describe first",
        opslake__attributes__mode="sql_guessed_column",
    )  # fmt: skip
    (op,) = [m.op for m in map_export(request_of(made)).ops]
    assert {k: op[k] for k in ("endpoint", "source", "event_kind", "task_class", "sig_hash")} == {
        "endpoint": "/sql", "source": "runtime", "event_kind": "rescue", "task_class": "sql_question",
        "sig_hash": "ab12",
    }  # fmt: skip
    assert (op["applied_at_turn"], op["rescue_attempted"], op["rescue_succeeded"]) == (3, True, False)
    assert op["correction"] == "describe first"
    assert op["attributes"]["mode"] == "sql_guessed_column"


def test_agent_comes_from_the_span_then_its_ancestors_then_the_resource() -> None:
    other_trace = bytes(16 * [7])
    spans = [
        span("root", span_id=1, gen_ai__operation__name="invoke_agent", gen_ai__agent__id="a-1",
             gen_ai__conversation__id="conv-9"),
        span("mid", span_id=2, parent=1),  # not an op, but on the way up
        tool("t", span_id=3, parent=2),
        tool("own", span_id=4, parent=1, gen_ai__agent__name="a-2"),
        tool("elsewhere", span_id=3, parent=1, trace=other_trace),  # another trace: no parent here
        span("loop-a", span_id=10, parent=11, gen_ai__operation__name="chat"),
        span("loop-b", span_id=11, parent=10),  # a cycle must not hang
    ]  # fmt: skip
    ops = {m.op["endpoint"]: m.op for m in map_export(request_of(*spans, service="svc-1")).ops}
    assert (ops["tool:t"]["agent_id"], ops["tool:t"]["session_id"]) == ("a-1", "conv-9")
    assert ops["tool:own"]["agent_id"] == "a-2"
    assert ops["tool:elsewhere"]["agent_id"] == "svc-1" and "session_id" not in ops["tool:elsewhere"]
    assert ops["loop-a"]["agent_id"] == "svc-1"
    no_resource = {m.op["endpoint"]: m.op for m in map_export(request_of(tool("x"))).ops}
    assert "agent_id" not in no_resource["tool:x"]  # the reporter becomes the agent when validated


@pytest.mark.parametrize(
    ("made", "reason"),
    [
        (Span(trace_id=b"\x01" * 8, span_id=b"\x02" * 8, name="short", start_time_unix_nano=T0,
              end_time_unix_nano=T0 + 1), "trace_id must be 16 bytes"),
        (Span(trace_id=TRACE, span_id=b"", name="noid", start_time_unix_nano=T0, end_time_unix_nano=T0 + 1),
         "span_id 8 bytes"),
        (span("never started", start=0, duration_ns=1), "start_time_unix_nano is not set"),
        (span("backwards", duration_ns=-5), "before start_time_unix_nano"),
    ],
)  # fmt: skip
def test_spans_no_op_can_be_made_of_are_rejected_with_the_reason(made: Span, reason: str) -> None:
    made.status.code = Status.STATUS_CODE_ERROR
    mapped = map_export(request_of(made, tool("fine", span_id=99)))
    assert [m.op["endpoint"] for m in mapped.ops] == ["tool:fine"]
    ((ref, message),) = mapped.rejected
    assert reason in message and ref.name == made.name


# ---- ingest: the /events validation, persist then acknowledge -------------------------------------
def ingest(request: ExportTraceServiceRequest, queue: MemoryQueue | None = None) -> TraceIngestResult:
    export = decode_export(request.SerializeToString(), content_type=PROTOBUF, content_encoding=None)
    return ingest_export(export, reporter_id="key-runtime", queue=queue or MemoryQueue(), received_at=NOW)


def queued(queue: MemoryQueue) -> Iterator[dict[str, Any]]:
    from opslake.queue import unpack

    for message in queue.messages:
        yield from (json.loads(record) for record in unpack(message))


def test_ops_are_validated_like_events_and_bad_spans_are_named() -> None:
    queue = MemoryQueue()
    secret = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    spans = [
        tool("ok", span_id=1, gen_ai__tool__call__arguments=f'{{"token": "{secret}"}}'),
        tool("claims-llm", span_id=2, opslake__source="llm"),  # reserved for opslake's own records
        tool("slow", span_id=3, duration_ns=8 * 24 * 3600 * 10**9),  # longer than any op may be
        span(
            "future",
            span_id=4,
            start=int(NOW.timestamp() * 1e9) + 48 * 3600 * 10**9,
            gen_ai__operation__name="chat",
        ),
    ]
    result = ingest(request_of(*spans), queue)
    assert len(result.stored) == 1 and result.spans == 4
    (record,) = queued(queue)
    assert record["endpoint"] == "tool:ok" and record["reporter_id"] == "key-runtime"
    assert secret not in json.dumps(record) and "[REDACTED]" in record["input_summary"]
    assert record["agent_id"] == "key-runtime"  # no claim anywhere: the reporter
    message = result.error_message()
    assert message.startswith("3 of 4 spans rejected: span 0000000000000002 ('execute_tool claims-llm'): ")
    assert "reserved" in message and "duration_ms" in message and "in the future" in message


def test_the_rejection_message_is_bounded() -> None:
    spans = [span(f"s{i}", span_id=i + 1, duration_ns=-1, gen_ai__operation__name="chat") for i in range(40)]
    result = ingest(request_of(*spans))
    message = result.error_message()
    assert len(result.rejected) == 40 and message.endswith(f"; and {40 - MAX_REJECTIONS_LISTED} more")
    assert len(message) <= 2_000


def test_nothing_is_acknowledged_when_the_queue_fails() -> None:
    with pytest.raises(ServiceUnavailableError, match="nothing was stored") as caught:
        ingest(request_of(tool()), MemoryQueue(fail=True))
    assert caught.value.headers["Retry-After"] == "5"


def test_an_export_with_nothing_to_store_sends_nothing() -> None:
    queue = MemoryQueue(fail=True)  # would raise if called
    result = ingest(request_of(span("plain"), span("bad", span_id=2, duration_ns=-1, error="x")), queue)
    assert (result.stored, result.skipped, len(result.rejected)) == ([], 1, 1)


def test_a_retried_export_has_the_same_op_ids() -> None:
    request = sdk_request(agent_run)
    assert ingest(request).stored == ingest(request).stored


# ---- answers -----------------------------------------------------------------------------------
def test_full_success_is_an_empty_response_in_both_encodings() -> None:
    result = TraceIngestResult(spans=3, stored=["a", "b"], skipped=1)
    protobuf = success_answer(result, "protobuf")
    assert (protobuf.status, protobuf.body, protobuf.content_type) == (200, b"", "application/x-protobuf")
    assert protobuf.headers == {"x-opslake-spans-stored": "2", "x-opslake-spans-skipped": "1"}
    as_json = success_answer(result, "json")
    assert (json.loads(as_json.body), as_json.content_type) == ({}, "application/json")


def test_partial_success_names_the_refused_spans() -> None:
    result = TraceIngestResult(spans=2, stored=["a"], rejected=["span 01 ('x'): bad"])
    answer = ExportTraceServiceResponse.FromString(success_answer(result, "protobuf").body)
    assert answer.partial_success.rejected_spans == 1
    assert answer.partial_success.error_message == "1 of 2 spans rejected: span 01 ('x'): bad"
    document = json.loads(success_answer(result, "json").body)
    assert document["partialSuccess"]["rejectedSpans"] in ("1", 1)


def test_errors_are_rpc_statuses_with_the_error_code() -> None:
    answer = error_answer(ServiceUnavailableError("queue down", retry_after_s=7), "protobuf")
    status = RpcStatus.FromString(answer.body)
    assert (answer.status, status.code, status.message) == (503, 14, "queue down")
    assert answer.headers == {"Retry-After": "7"}
    info = ErrorInfo()
    assert status.details[0].Unpack(info) and info.reason == "service_unavailable"
    document = json.loads(error_answer(UnsupportedMediaTypeError("no"), "json").body)
    assert document["code"] == 3 and document["message"] == "no"
    assert document["details"][0]["reason"] == "unsupported_media_type"


def test_spans_past_the_text_budget_are_refused_by_name_not_run_into_the_timeout() -> None:
    from opslake.otlp.ingest import MAX_EXPORT_TEXT_CHARS, redaction_cost

    text = "x" * 3_000  # a summary is read up to 2,000 + 1,024 characters
    spans = [tool(f"t{i:04d}", span_id=i + 1, gen_ai__tool__call__arguments=text) for i in range(2_000)]
    per_span = redaction_cost(map_export(request_of(spans[0])).ops[0].op)
    fits = MAX_EXPORT_TEXT_CHARS // per_span
    queue = MemoryQueue()
    result = ingest(request_of(*spans), queue)
    assert len(result.stored) == fits and len(result.rejected) == 2_000 - fits
    assert "over the 4194304 characters one request may carry" in result.rejected[0]
    assert sum(1 for _ in queued(queue)) == fits


def test_a_tool_span_without_an_operation_name_is_a_tool() -> None:
    older = span("running tool", gen_ai__tool__name="get_weather")  # older Pydantic AI / OpenLLMetry
    assert [m.op["endpoint"] for m in map_export(request_of(older)).ops] == ["tool:get_weather"]


def test_the_last_exception_recorded_is_the_error() -> None:
    made = span("chat", gen_ai__operation__name="chat", error="")
    for kind, message in (("ConnectionError", "reset, retrying"), ("TimeoutError", "gave up after 3 tries")):
        event = made.events.add(name="exception", time_unix_nano=T0 + 1)
        event.attributes.extend([kv("exception.type", kind), kv("exception.message", message)])
    (op,) = [m.op for m in map_export(request_of(made)).ops]
    assert (op["error_type"], op["error"]) == ("TimeoutError", "gave up after 3 tries")


# ---- tool spans that answered an error while their status stayed OK -----------------------------
def result_map(**fields: str) -> KeyValue:
    """A structured ``gen_ai.tool.call.result`` (an OTLP map value, not JSON text)."""
    value = AnyValue()
    value.kvlist_value.values.extend(kv(key, text) for key, text in fields.items())
    return KeyValue(key=gen_ai.GEN_AI_TOOL_CALL_RESULT, value=value)


def test_a_tool_span_whose_result_is_an_error_is_a_failed_op_marked_as_inferred() -> None:
    permission = json.dumps({"error": {"message": "permission denied", "type": "PermissionError"}})
    mcp = json.dumps({"content": [{"type": "text", "text": "no such table: wrokers"}], "isError": True})
    structured = tool("lookup_worker", span_id=5)
    structured.attributes.append(result_map(error="not_found", message="no worker W00042"))
    spans = [
        tool("read_file", span_id=1, gen_ai__tool__call__result=permission),
        span("query_db", span_id=2, openinference__span__kind="TOOL", tool__name="query_db", output__value=mcp),
        span("run", span_id=3, opslake__endpoint="tool:shell", output__value="Error: exit status 2"),
        span("parse_date", span_id=4, openinference__span__kind="TOOL", output__value="ValueError: month 13"),
        structured,
        tool("fetch", span_id=6, gen_ai__tool__call__result='{"error": "HTTP 502"}', error__type="UpstreamError"),
    ]  # fmt: skip
    ops = by_endpoint(request_of(*spans))
    expected = {
        "tool:read_file": ("permission denied", "PermissionError", "error_field"),
        "tool:query_db": ("no such table: wrokers", "tool_error_result", "is_error"),
        "tool:shell": ("exit status 2", "tool_error_result", "error_text"),
        "parse_date": ("month 13", "ValueError", "error_text"),  # a TOOL span with no tool name
        "tool:lookup_worker": ("no worker W00042", "not_found", "error_field"),
        "tool:fetch": ("HTTP 502", "UpstreamError", "error_field"),  # the span's error.type comes first
    }
    for endpoint, (error, error_type, rule) in expected.items():
        op = ops[endpoint]
        assert (op["success"], op["error"], op["error_type"]) == (False, error, error_type), endpoint
        assert op["attributes"]["opslake.failure_inferred"] == rule, endpoint
    assert ops["tool:read_file"]["output_summary"] == permission  # the result itself is kept as it was
    assert json.loads(ops["tool:lookup_worker"]["output_summary"]) == {
        "error": "not_found", "message": "no worker W00042",
    }  # fmt: skip

    queue = MemoryQueue()
    result = ingest(request_of(*spans), queue)
    assert len(result.stored) == len(spans) and not result.rejected
    records = {record["endpoint"]: record for record in queued(queue)}
    assert records["tool:read_file"]["success"] is False
    assert records["tool:read_file"]["attributes"]["opslake.failure_inferred"] == "error_field"


def test_what_a_span_result_does_not_make_a_failure() -> None:
    failed = tool("fetch", span_id=3, error="connect timeout", gen_ai__tool__call__result='{"error": "x"}')
    spans = [
        span("chat", span_id=1, gen_ai__operation__name="chat", gen_ai__request__model="m",
             gen_ai__output__messages="Error: the tool failed, so I stopped"),
        span("planner", span_id=2, openinference__span__kind="AGENT", output__value='{"error": "gave up"}'),
        failed,
        tool("grep", span_id=4, gen_ai__tool__call__result="No error found in 3 files"),
        tool("stats", span_id=5, gen_ai__tool__call__result='{"errors": [], "error_rate": 0.2}'),
        tool("jobs", span_id=6, gen_ai__tool__call__result='{"status": "ok", "data": {"error": "x"}}'),
        tool("mcp", span_id=7, gen_ai__tool__call__result='{"content": [{"type": "text", "text": "Error: x"}]}'),
        tool("empty", span_id=8, gen_ai__tool__call__result='{"error": null}'),
        # a runtime cannot set opslake's own marker as one of its claims
        tool("claims", span_id=9, opslake__attributes__opslake__failure_inferred="true"),
    ]  # fmt: skip
    ops = by_endpoint(request_of(*spans))
    assert ops["tool:fetch"]["success"] is False  # failed already: its own words, not marked
    assert (ops["tool:fetch"]["error"], ops["tool:fetch"]["error_type"]) == ("connect timeout", "span_error")
    for endpoint, op in ops.items():
        assert "opslake.failure_inferred" not in op["attributes"], endpoint
        if endpoint != "tool:fetch":
            assert op["success"] is True and "error" not in op, endpoint
    assert len(ingest(request_of(*spans)).stored) == len(spans)


def test_the_marker_takes_a_conventions_place_never_a_claims() -> None:
    def with_claims(count: int, span_id: int) -> Span:
        claims = {f"opslake__attributes__k{i}": "v" for i in range(count)}
        return tool(f"t{count}", span_id=span_id, gen_ai__tool__call__result='{"error": "boom"}', **claims)

    # a root span with no scope has 3 ids of its own: 47 claims fill the room, 46 leave one slot
    ops = by_endpoint(request_of(with_claims(47, 1), with_claims(46, 2)))
    full, one_free = ops["tool:t47"], ops["tool:t46"]
    assert full["success"] is True and "opslake.failure_inferred" not in full["attributes"]
    assert one_free["success"] is False and len(one_free["attributes"]) == 50
    assert one_free["attributes"]["opslake.failure_inferred"] == "error_field"
    assert gen_ai.GEN_AI_OPERATION_NAME not in one_free["attributes"]  # the convention made room
    alone = by_endpoint(request_of(tool("t", span_id=3)))["tool:t"]
    assert gen_ai.GEN_AI_OPERATION_NAME in alone["attributes"]  # (kept when nothing needs its place)


@pytest.mark.parametrize("claim", ["gateway\u0000", "\uff47ateway", "m\u200bcp", "LLM"])
def test_a_spans_reserved_source_claim_is_refused_in_any_spelling(claim: str) -> None:
    """The span's opslake.source is compared like an op's (issue 25): NFKC, no invisible characters."""
    result = ingest(request_of(tool("ok", span_id=1), tool("claims", span_id=2, opslake__source=claim)))
    assert len(result.stored) == 1 and "reserved" in result.error_message()
