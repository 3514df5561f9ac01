"""POST /v1/traces read against the OTLP/HTTP specification and the exporters that speak it (review E).

Each test names the rule it checks: the OTLP specification (opentelemetry-proto docs/specification.md,
"OTLP/HTTP"), the resource and GenAI semantic conventions, or what a real exporter sends (the Python
OTLP/HTTP exporter in .venv, whose retry rules and compression the tests import rather than restate).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.rpc.error_details_pb2 import BadRequest
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.exporter.otlp.common.http import Compression, _is_retryable, _OTLPHTTPClient
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from opslake.errors import (
    OpslakeError,
    PayloadTooLargeError,
    ServiceUnavailableError,
    UndecodableBodyError,
    UnsupportedMediaTypeError,
)
from opslake.ingest.events import MAX_REQUEST_BYTES
from opslake.otlp.decode import OtlpBadRequestError, decode_export
from opslake.otlp.ingest import MAX_EXPORT_TEXT_CHARS, TraceIngestResult, ingest_export
from opslake.otlp.mapping import map_export
from opslake.otlp.responses import error_answer, success_answer

from ...fakes import MemoryQueue

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
T0 = int(datetime(2026, 11, 22, 11, 59, tzinfo=UTC).timestamp() * 1e9)
TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def tool_span(span_id: int, name: str = "lookup", **attributes: Any) -> Span:
    """An execute_tool span (an op) built with the opentelemetry-proto classes."""
    made = Span(
        trace_id=TRACE,
        span_id=span_id.to_bytes(8, "big"),
        name=f"execute_tool {name}",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 5_000_000,
    )
    pairs = {gen_ai.GEN_AI_OPERATION_NAME: "execute_tool", gen_ai.GEN_AI_TOOL_NAME: name, **attributes}
    made.attributes.extend(KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in pairs.items())
    return made


def request_of(*spans: Span) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def ingest(
    export_body: bytes, content_type: str = PROTOBUF, encoding: str | None = None
) -> TraceIngestResult:
    export = decode_export(export_body, content_type=content_type, content_encoding=encoding)
    return ingest_export(export, reporter_id="key-runtime", queue=MemoryQueue(), received_at=NOW)


# ---- empty requests ------------------------------------------------------------------------------
# Spec, OTLP/HTTP Response > Full Success: "If the server receives an empty request (a request that
# does not carry any telemetry data) the server SHOULD respond with success." An empty
# ExportTraceServiceRequest serializes to zero bytes in protobuf.
def test_an_empty_protobuf_export_is_a_success() -> None:
    body = ExportTraceServiceRequest().SerializeToString()
    assert body == b""
    result = ingest(body)
    assert (result.spans, result.stored, result.rejected) == (0, [], [])


def test_an_empty_json_export_is_a_success() -> None:
    for body in (b"{}", b'{"resourceSpans": []}', b'{"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}'):
        result = ingest(body, JSON)
        assert (result.spans, result.stored, result.rejected) == (0, [], [])
        answer = success_answer(result, "json")
        assert (answer.status, json.loads(answer.body)) == (200, {})


# ---- gzip ------------------------------------------------------------------------------------------
# RFC 1952 §2.2: "A gzip file consists of a series of 'members' (compressed data sets)." Go's
# gzip.Reader (the Collector) and Python's gzip.decompress read every member; zlib.decompressobj stops
# after the first, so the spans of the later members were dropped without a word (a 200 with no
# partial_success: the "never a silent drop" rule of issue 14).
def test_a_multi_member_gzip_body_is_read_whole() -> None:
    first = request_of(tool_span(1, "a")).SerializeToString()
    second = request_of(tool_span(2, "b")).SerializeToString()
    merged = ExportTraceServiceRequest.FromString(first + second)  # protobuf concatenation merges
    assert sum(len(scope.spans) for rs in merged.resource_spans for scope in rs.scope_spans) == 2
    body = gzip.compress(first) + gzip.compress(second)
    assert gzip.decompress(body) == first + second  # what the standard library reads
    result = ingest(body, encoding="gzip")
    assert result.spans == 2 and len(result.stored) == 2


def test_bytes_after_the_gzip_stream_are_refused() -> None:
    body = gzip.compress(request_of(tool_span(1)).SerializeToString()) + b"not gzip"
    with pytest.raises(UndecodableBodyError):
        decode_export(body, content_type=PROTOBUF, content_encoding="gzip")


# The Python exporter's own compression options are none, gzip and deflate (OTEL_EXPORTER_OTLP_
# COMPRESSION=deflate sends zlib.compress(data) with Content-Encoding: deflate; RFC 9110 §8.4.1.2
# defines "deflate" as the zlib format). The OTLP spec requires only gzip: this is compatibility,
# not conformance, but a 415 is not retryable and the exporter drops every batch.
def test_deflate_content_encoding_from_the_python_exporter_is_accepted() -> None:
    raw = request_of(tool_span(1)).SerializeToString()
    client = _OTLPHTTPClient(transport=None, endpoint="http://x/v1/traces", kind="spans",  # type: ignore[arg-type]
                             compression=Compression.DEFLATE)  # fmt: skip
    sent, encoding = client._compress(raw), client._headers["Content-Encoding"]
    assert encoding == "deflate" and sent == zlib.compress(raw)
    assert ingest(sent, encoding=encoding).spans == 1


# ---- OTLP/JSON -----------------------------------------------------------------------------------
def test_otlp_json_as_the_spec_example_writes_it() -> None:
    """Upper-case hex ids ("case-insensitive hex-encoded strings"), 64-bit integers as strings or
    numbers, enums as integers, unknown enum values and unknown fields tolerated."""
    span = {
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "EEE19B7EC3C1B174",
        "parentSpanId": "EEE19B7EC3C1B173",
        "name": "execute_tool lookup",
        "kind": 99,  # a span kind a newer proto may define
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": T0 + 5_000_000,
        "status": {"code": 2, "message": "boom"},
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 3}},
        ],
        "flags": 257,
        "someFutureField": {"x": [1, 2]},
    }
    document = {
        "resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "s"}, "spans": [span]}]}]
    }
    (mapped,) = map_export(decode_export(json.dumps(document).encode(), content_type=JSON,
                                         content_encoding=None).request).ops  # fmt: skip
    op = mapped.op
    assert op["op_id"] == "5b8efff798038103d269b633813fc60c:eee19b7ec3c1b174"
    assert op["attributes"]["otel.parent_span_id"] == "eee19b7ec3c1b173"
    assert op["success"] is False and op["error"] == "boom"
    assert op["duration_ms"] == 5.0
    assert op["attributes"][gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 12
    assert op["attributes"][gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 3


def test_a_json_id_of_the_wrong_length_refuses_the_span_not_the_batch() -> None:
    good = {"traceId": TRACE.hex(), "spanId": "00000000000000aa", "name": "a", "startTimeUnixNano": T0,
            "endTimeUnixNano": T0 + 1, "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]}  # fmt: skip
    short = {**good, "spanId": "abcd"}  # hex, but 2 bytes
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [good, short]}]}]}
    result = ingest(json.dumps(document).encode(), JSON)
    assert len(result.stored) == 1 and len(result.rejected) == 1
    assert "span_id 8 bytes" in result.rejected[0]


def test_a_json_partial_success_answer_parses_back_as_the_response_message() -> None:
    result = TraceIngestResult(spans=3, stored=["a"], rejected=["span 01 ('x'): bad", "span 02 ('y'): bad"])
    answer = success_answer(result, "json")
    assert answer.content_type == JSON
    parsed = json_format.Parse(answer.body, ExportTraceServiceResponse())
    assert parsed.partial_success.rejected_spans == 2
    assert parsed.partial_success.error_message.startswith("2 of 3 spans rejected")


# ---- retries and failures as the exporters read them ------------------------------------------------
# Spec, Retryable Response Codes: 429, 502, 503, 504 "SHOULD be retried. All other 4xx or 5xx response
# status codes MUST NOT be retried." Checked with the Python exporter's own rule.
@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (OtlpBadRequestError("bad"), False),
        (PayloadTooLargeError("big"), False),
        (UnsupportedMediaTypeError("what"), False),
        (UndecodableBodyError("gz"), False),
        (ServiceUnavailableError("queue down", retry_after_s=5), True),
    ],
)
def test_only_a_transient_failure_invites_the_exporter_to_retry(error: OpslakeError, retryable: bool) -> None:
    for encoding in ("protobuf", "json"):
        answer = error_answer(error, encoding)
        assert _is_retryable(answer.status) is retryable
        assert ("Retry-After" in answer.headers) is retryable
        status = (
            RpcStatus.FromString(answer.body)
            if encoding == "protobuf"
            else json_format.Parse(answer.body, RpcStatus())
        )
        assert status.message == error.message


# Spec, Bad Data: "The Status.details field in the response SHOULD contain a BadRequest that describes
# the bad data." (A SHOULD: the ErrorInfo opslake sends is allowed, a BadRequest is what clients look for.)
def test_a_400_status_carries_a_bad_request_detail() -> None:
    answer = error_answer(OtlpBadRequestError("span 0: traceId 'zz' is not hex"), "protobuf")
    status = RpcStatus.FromString(answer.body)
    assert answer.status == 400
    assert any(detail.Is(BadRequest.DESCRIPTOR) for detail in status.details)


# ---- the rejection message ----------------------------------------------------------------------------
def test_a_span_name_cannot_forge_lines_or_entries_in_the_rejection_message() -> None:
    forged = tool_span(1, "x")
    forged.name = "x\n0 of 1 spans rejected: all fine\r\n"
    forged.end_time_unix_nano = forged.start_time_unix_nano - 1
    result = ingest(request_of(forged, tool_span(2)).SerializeToString())
    message = result.error_message()
    assert len(result.rejected) == 1 and "\n" not in message and "\r" not in message
    assert message.startswith("1 of 2 spans rejected: span 0000000000000001 (")


# ---- claims --------------------------------------------------------------------------------------
# Resource semantic conventions, service.name: "If the value was not specified, SDKs MUST fallback to
# `unknown_service:` concatenated with `process.executable.name`". Every SDK whose user did not set
# OTEL_SERVICE_NAME sends it: it names no agent, and the reporter (the API key) is the better answer.
def test_the_sdk_default_service_name_is_not_an_agent() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({}))  # what an unconfigured SDK sends
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span(
        "execute_tool x", attributes={gen_ai.GEN_AI_OPERATION_NAME: "execute_tool"}
    ):
        pass
    provider.shutdown()
    request = encode_spans(memory.get_finished_spans())
    resource = {kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes}
    assert resource["service.name"].startswith("unknown_service")
    (op,) = [m.op for m in map_export(request).ops]
    assert not str(op.get("agent_id", "")).startswith("unknown_service")  # validation makes it the reporter


# GenAI conventions, gen_ai.tool.call.id: "The tool call identifier", e.g. `call_mszuSIzqtI65i1wAUOE8w5H4`
# (the OpenAI form). The id that links a tool execution to the model call that asked for it is kept
# as an op attribute, but redaction takes an OpenAI call id for a random secret.
def test_a_tool_call_id_survives_ingest() -> None:
    from opslake.queue import unpack

    queue = MemoryQueue()
    raw = request_of(tool_span(1, **{gen_ai.GEN_AI_TOOL_CALL_ID: "call_mszuSIzqtI65i1wAUOE8w5H4"}))
    export = decode_export(raw.SerializeToString(), content_type=PROTOBUF, content_encoding=None)
    ingest_export(export, reporter_id="key-runtime", queue=queue, received_at=NOW)
    (record,) = [json.loads(r) for m in queue.messages for r in unpack(m)]
    assert record["attributes"][gen_ai.GEN_AI_TOOL_CALL_ID] == "call_mszuSIzqtI65i1wAUOE8w5H4"


# ---- the CPU budget ----------------------------------------------------------------------------------
def _function_budget(name: str) -> tuple[int, int]:
    """(MemorySize, Timeout) of a function in template.yaml (CPU follows memory in Lambda)."""
    template = (ROOT / "template.yaml").read_text(encoding="utf-8")
    block = re.search(rf"^  {name}:\n(.*?)(?=^  \S)", template, re.M | re.S)
    assert block is not None, name
    memory = re.search(r"^\s+MemorySize: (\d+)$", block.group(1), re.M)
    timeout = re.search(r"^\s+Timeout: (\d+)$", block.group(1), re.M)
    assert memory and timeout, name
    return int(memory.group(1)), int(timeout.group(1))


# POST /events is sized for redacting a hostile 1 MiB body in about 2 s at 1,024 MB (template.yaml's
# comment on EventsFunction). An OTLP export is validated and redacted by the same op contract, up to
# 8 MiB once inflated, with the same memory and timeout: 4,500 spans of 780-character JSON arguments
# with secret-named keys (7.4 MiB) cost 7.2 s of one local core, ~12 s at 1,024 MB (0.58 vCPU). Past
# the 10 s timeout API Gateway answers 504, which every exporter retries: the batch is never stored
# and each retry burns another 10 s. Fixed by a text budget per export (spans past it are refused in
# partial_success) and a function sized for it. The check is on the configuration, never a timing.
def test_an_export_carries_no_more_redaction_work_than_its_function_is_sized_for() -> None:
    events_memory, events_timeout = _function_budget("EventsFunction")
    traces_memory, traces_timeout = _function_budget("TracesFunction")
    budget_ratio = (traces_memory * traces_timeout) / (events_memory * events_timeout)
    assert budget_ratio >= MAX_EXPORT_TEXT_CHARS / MAX_REQUEST_BYTES


# ---- ids -------------------------------------------------------------------------------------------
# opentelemetry-proto trace.proto, Span.trace_id: "An ID with all zeroes OR of length other than 16
# bytes is considered invalid"; Span.span_id: the same for 8 bytes. opslake refused the wrong
# lengths but stored the all-zero ids, so every span of a client with a broken id generator got the
# op id "000…0:000…0" and all but one were deduplicated away: a silent drop.
def test_all_zero_ids_are_invalid_spans() -> None:
    zero_trace = tool_span(1)
    zero_trace.trace_id = bytes(16)
    zero_span = tool_span(2)
    zero_span.span_id = bytes(8)
    result = ingest(request_of(zero_trace, zero_span, tool_span(3)).SerializeToString())
    assert len(result.stored) == 1 and len(result.rejected) == 2


# trace.proto, Span.parent_span_id: "If this is a root span, then this field must be empty." Some
# bridges (Zipkin and Jaeger translations, hand-written JSON) send sixteen zeros for a root instead.
def test_an_all_zero_parent_is_a_root() -> None:
    root = tool_span(1)
    root.parent_span_id = bytes(8)
    (mapped,) = map_export(request_of(root)).ops
    assert "otel.parent_span_id" not in mapped.op["attributes"]


# ---- a JSON number that crashes the parser ---------------------------------------------------------
# RFC 8259 §6 allows 1e400 (Python reads it as inf); protobuf's json_format raises OverflowError, not
# ParseError, converting inf for an enum field, so the handler answered 500 ("unhandled error" logged,
# ServerErrors counted) for bad data the spec answers with "HTTP 400 Bad Request" (Bad Data).
@pytest.mark.parametrize("field", ['"kind": 1e400', '"status": {"code": -1e400}', '"kind": Infinity'])
def test_an_out_of_range_json_number_is_a_400(field: str) -> None:
    span = f'{{"traceId": "{TRACE.hex()}", "spanId": "00000000000000aa", "name": "n", {field}}}'
    body = f'{{"resourceSpans": [{{"scopeSpans": [{{"spans": [{span}]}}]}}]}}'.encode()
    with pytest.raises(OtlpBadRequestError):
        decode_export(body, content_type=JSON, content_encoding=None)


# ---- what API Gateway does with the answer ---------------------------------------------------------
# AWS, "Binary media types for REST APIs": "API Gateway uses the first Accept header from clients to
# determine if a response should return binary media. To return binary media when you can't control
# the order of Accept header values [...] set your API's binary media types to */*." The Python
# exporter (requests) sends "Accept: */*", Go's net/http (the Go SDK, the Collector) no Accept at
# all: a protobuf answer then reaches them as base64 text, which the Go exporter's proto.Unmarshal
# of a partial_success (or a Status) fails on. The local stack decodes every base64 answer, so the
# integration tests cannot see this. Unverified on a deployment: the check reads the template.
def test_binary_media_types_cover_the_accept_header_exporters_send() -> None:
    template = (ROOT / "template.yaml").read_text(encoding="utf-8")
    block = re.search(r"BinaryMediaTypes:\n((?:\s+- \S+\n)+)", template)
    assert block is not None
    types = [entry.strip("\"'").replace("~1", "/") for entry in re.findall(r"- (\S+)", block.group(1))]
    assert "application/x-protobuf" in types
    assert "*/*" in types  # the one entry "Accept: */*" matches


# ---- what the answer echoes ------------------------------------------------------------------------
# Every text opslake keeps is redacted; the partial_success message quoted each refused span's name
# as sent. Exporters log that message (the Go SDK hands it to otel.Handle, the Collector logs partial
# success as a warning), so a token in a span name went from the span into the client's own logs by
# way of opslake's answer.
def test_the_rejection_message_does_not_echo_a_secret_from_a_span_name() -> None:
    secret = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    refused = tool_span(1, f"fetch {secret}", **{"opslake.source": "llm"})  # a reserved source: refused
    result = ingest(request_of(refused).SerializeToString())
    assert len(result.rejected) == 1
    assert secret not in result.error_message()
