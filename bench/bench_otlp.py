"""POST /v1/traces: in-process decode + map + validate per span, and the handler's cold import.

(a) Batches of ``--spans`` spans (512: the OpenTelemetry SDK's default export batch) made by the
    real OpenTelemetry SDK and its OTLP encoder, seeded: agent runs under the GenAI conventions
    (invoke_agent, chat with input/output messages and token counts, execute_tool with arguments
    and results, some failing with a recorded exception) and some under OpenInference (AGENT, LLM,
    TOOL), with the plain HTTP client spans frameworks emit beside them (skipped, not ops). Each
    batch is timed as protobuf, gzip protobuf, OTLP/JSON and gzip OTLP/JSON through the route's own
    logic, one stage at a time, on one core (one thread, CPU time):
      decode    ``decode_export``: content type, bounded gunzip, protobuf or JSON parse;
      map       ``map_export``: which spans are ops, each span's op;
      validate  what ``ingest_export`` adds to map: the /events validation, redaction and
                truncation of every op, its queue record, and packing into SQS messages (the
                queue itself is a no-op here);
    and spans/s = spans in the batch ÷ (decode + ingest), µs per span the inverse.
(b) The handler's cold import as a ratio to ``/health``'s in the same run, ``/events`` beside it:
    bench_import.py's fresh ``python -S -X importtime`` processes against its Lambda-like package
    directory, rounds alternating the handlers; the ratio is the median of each round's ratio.

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_otlp.py [--spans 512] [--seed 7] [--batches 3] [--repeats 15]
                                         [--import-runs 15] [--part a|b|both]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from openinference.semconv.trace import OpenInferenceSpanKindValues as OpenInferenceKind  # noqa: E402
from openinference.semconv.trace import SpanAttributes as OpenInference  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.sdk.trace.id_generator import IdGenerator  # noqa: E402
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai  # noqa: E402
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID  # noqa: E402
from opentelemetry.semconv.attributes import (  # noqa: E402
    error_attributes,
    http_attributes,
    server_attributes,
    service_attributes,
    url_attributes,
)
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, set_span_in_context  # noqa: E402

Operation = gen_ai.GenAiOperationNameValues
PROTOBUF, JSON = "application/x-protobuf", "application/json"
BASE_NS = 1_795_300_000 * 10**9  # 2026-11-21: fixed, so a seed gives the same bytes every run
_VOCABULARY = (
    "the worker query returned rows for welders in Detroit and the placement table joins on worker_id "
    "filter state MI role certified shift night available since last week summarise candidates order "
    "by distance rate limit retry schedule interview confirm email phone address license expiry note "
    "customer site plant line supervisor overtime hours budget approve reject pending status updated"
)
WORDS = tuple(_VOCABULARY.split())
MODELS = ("gpt-4o-mini", "gpt-4.1", "claude-sonnet-4", "gemini-2.5-flash")
TOOLS = ("query_db", "search_docs", "send_email", "get_worker", "match_candidates", "fetch_url", "calendar")
ERRORS = (
    (TimeoutError, "the model did not answer within 30 s"),
    (ValueError, 'column "wrokers" does not exist'),
    (PermissionError, "403 Forbidden: the token lacks scope calendar.write"),
    (ConnectionError, "connection reset by peer while reading the response"),
)


class SeededIds(IdGenerator):
    """Trace and span ids from a seeded generator (the SDK's own draws from os.urandom)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1


class Runs:
    """Agent runs drawn from one seed, recorded by the real SDK (explicit, seeded timestamps)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.memory = InMemorySpanExporter()
        resource = Resource.create(
            {
                service_attributes.SERVICE_NAME: "staffing-agents",
                service_attributes.SERVICE_VERSION: "1.4.2",
                "deployment.environment.name": "production",
            }
        )
        self.provider = TracerProvider(resource=resource, id_generator=SeededIds(self.rng))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer: Tracer = self.provider.get_tracer("opentelemetry.instrumentation.openai_agents", "0.1.0")
        self.clock = BASE_NS

    def text(self, low: int, high: int) -> str:
        size, words = self.rng.randint(low, high), []
        while sum(len(w) + 1 for w in words) < size:
            words.append(self.rng.choice(WORDS))
        return " ".join(words)[:size]

    def messages(self, low: int, high: int, role: str) -> str:
        parts = [{"type": "text", "content": self.text(low // 2, high // 2)}]
        if role == "user":
            parts.insert(0, {"type": "text", "content": self.text(low // 2, high // 2)})
        return json.dumps([{"role": role, "parts": parts}])

    def span(
        self, name: str, parent: Any, attributes: dict[str, Any], duration_ms: float, kind: SpanKind
    ) -> Any:
        start = self.clock
        self.clock += int(duration_ms * 1e6) + self.rng.randint(10_000, 2_000_000)
        context = set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(name, context, kind, attributes, start_time=start), start + int(
            duration_ms * 1e6
        )

    def end(self, span: Any, end: int, *, fail: bool = False) -> None:
        if fail:
            kind, message = self.rng.choice(ERRORS)
            span.set_attribute(error_attributes.ERROR_TYPE, kind.__name__)
            span.record_exception(kind(message), timestamp=end - 1_000)
            span.set_status(Status(StatusCode.ERROR, message))
        span.end(end_time=end)

    def http_call(self, parent: Any) -> None:
        host = self.rng.choice(("api.internal.example", "search.example.com", "db-proxy.local"))
        span, end = self.span("GET", parent, {
            http_attributes.HTTP_REQUEST_METHOD: "GET",
            url_attributes.URL_FULL: f"https://{host}/v2/{self.rng.choice(WORDS)}?page={self.rng.randint(1, 9)}",
            server_attributes.SERVER_ADDRESS: host,
            http_attributes.HTTP_RESPONSE_STATUS_CODE: 200,
        }, self.rng.uniform(5, 120), SpanKind.CLIENT)  # fmt: skip
        span.end(end_time=end)

    def genai_run(self) -> None:
        agent = f"agent-{self.rng.randint(1, 8)}"
        root, _ = self.span(f"invoke_agent {agent}", None, {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.INVOKE_AGENT.value,
            gen_ai.GEN_AI_AGENT_NAME: agent,
            gen_ai.GEN_AI_AGENT_ID: f"asst_{self.rng.getrandbits(64):016x}",
            gen_ai.GEN_AI_PROVIDER_NAME: "openai",
            SESSION_ID: f"sess-{self.rng.getrandbits(48):012x}",
        }, 0, SpanKind.INTERNAL)  # fmt: skip
        for _ in range(self.rng.randint(3, 8)):
            if self.rng.random() < 0.55:
                model = self.rng.choice(MODELS)
                span, end = self.span(f"chat {model}", root, {
                    gen_ai.GEN_AI_OPERATION_NAME: Operation.CHAT.value,
                    gen_ai.GEN_AI_PROVIDER_NAME: "openai",
                    gen_ai.GEN_AI_REQUEST_MODEL: model,
                    gen_ai.GEN_AI_RESPONSE_MODEL: f"{model}-2026-08-01",
                    gen_ai.GEN_AI_REQUEST_TEMPERATURE: 0.2,
                    gen_ai.GEN_AI_REQUEST_MAX_TOKENS: 1024,
                    gen_ai.GEN_AI_RESPONSE_ID: f"chatcmpl-{self.rng.getrandbits(96):024x}",
                    gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
                    gen_ai.GEN_AI_USAGE_INPUT_TOKENS: self.rng.randint(200, 6_000),
                    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: self.rng.randint(20, 800),
                    gen_ai.GEN_AI_INPUT_MESSAGES: self.messages(600, 4_000, "user"),
                    gen_ai.GEN_AI_OUTPUT_MESSAGES: self.messages(200, 1_500, "assistant"),
                }, self.rng.uniform(300, 4_000), SpanKind.CLIENT)  # fmt: skip
            else:
                tool = self.rng.choice(TOOLS)
                span, end = self.span(f"execute_tool {tool}", root, {
                    gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
                    gen_ai.GEN_AI_TOOL_NAME: tool,
                    gen_ai.GEN_AI_TOOL_TYPE: "function",
                    gen_ai.GEN_AI_TOOL_CALL_ID: f"call_{self.rng.getrandbits(80):020x}",
                    gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"query": self.text(40, 600), "limit": 20}),
                    gen_ai.GEN_AI_TOOL_CALL_RESULT: json.dumps({"rows": [self.text(20, 200) for _ in range(5)]}),
                }, self.rng.uniform(20, 1_500), SpanKind.INTERNAL)  # fmt: skip
                if self.rng.random() < 0.5:
                    self.http_call(span)
            self.end(span, end, fail=self.rng.random() < 0.08)
        self.end(root, self.clock)

    def openinference_run(self) -> None:
        kind = OpenInference.OPENINFERENCE_SPAN_KIND
        root, _ = self.span("AgentExecutor", None, {
            kind: OpenInferenceKind.AGENT.value,
            OpenInference.AGENT_NAME: f"oi-agent-{self.rng.randint(1, 3)}",
            OpenInference.SESSION_ID: f"sess-{self.rng.getrandbits(48):012x}",
            OpenInference.INPUT_VALUE: self.text(80, 400),
        }, 0, SpanKind.INTERNAL)  # fmt: skip
        for _ in range(self.rng.randint(2, 6)):
            if self.rng.random() < 0.5:
                span, end = self.span("ChatOpenAI", root, {
                    kind: OpenInferenceKind.LLM.value,
                    OpenInference.LLM_MODEL_NAME: self.rng.choice(MODELS),
                    OpenInference.LLM_PROVIDER: "openai",
                    OpenInference.LLM_TOKEN_COUNT_PROMPT: self.rng.randint(200, 5_000),
                    OpenInference.LLM_TOKEN_COUNT_COMPLETION: self.rng.randint(20, 600),
                    OpenInference.LLM_TOKEN_COUNT_TOTAL: self.rng.randint(300, 5_600),
                    OpenInference.INPUT_VALUE: self.text(500, 3_000),
                    OpenInference.OUTPUT_VALUE: self.text(100, 1_200),
                }, self.rng.uniform(300, 3_000), SpanKind.INTERNAL)  # fmt: skip
            else:
                tool = self.rng.choice(TOOLS)
                span, end = self.span(tool, root, {
                    kind: OpenInferenceKind.TOOL.value,
                    OpenInference.TOOL_NAME: tool,
                    OpenInference.INPUT_VALUE: json.dumps({"q": self.text(20, 300)}),
                    OpenInference.OUTPUT_VALUE: self.text(100, 2_000),
                }, self.rng.uniform(20, 900), SpanKind.INTERNAL)  # fmt: skip
            self.end(span, end, fail=self.rng.random() < 0.08)
        self.end(root, self.clock)

    def batch(self, count: int) -> list[ReadableSpan]:
        """Whole agent runs until ``count`` spans (the last run cut short: an export is a batch of
        ended spans, not of whole traces)."""
        while len(self.memory.get_finished_spans()) < count:
            self.openinference_run() if self.rng.random() < 0.25 else self.genai_run()
        spans = list(self.memory.get_finished_spans())[:count]
        self.memory.clear()
        return spans


def otlp_json(request: Any) -> bytes:
    """OTLP/JSON: the protobuf JSON mapping, enums as integers, trace and span ids as hex."""
    from google.protobuf import json_format

    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in span:
                        span[name] = base64.b64decode(span[name]).hex()
    return json.dumps(document, separators=(",", ":")).encode()


def bodies(spans: Sequence[ReadableSpan]) -> dict[str, tuple[bytes, str, str | None]]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans(spans)
    protobuf, as_json = request.SerializeToString(), otlp_json(request)
    return {
        "protobuf": (protobuf, PROTOBUF, None),
        "protobuf+gzip": (gzip.compress(protobuf, 6), PROTOBUF, "gzip"),
        "json": (as_json, JSON, None),
        "json+gzip": (gzip.compress(as_json, 6), JSON, "gzip"),
    }


def cpu(function: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """(median, best) CPU seconds of ``function`` over ``repeats`` calls, and its last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.process_time()
        result = function()
        times.append(time.process_time() - start)
    return statistics.median(times), min(times), result


def per_span(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime

    from opslake.otlp.decode import decode_export
    from opslake.otlp.ingest import ingest_export
    from opslake.otlp.mapping import map_export
    from opslake.queue import OpsQueue, pack

    class PackingQueue(OpsQueue):
        """The handler's queue minus SQS: records packed into messages as SqsOpsQueue packs them."""

        def send(self, messages: Sequence[str]) -> None:
            pack(messages, 256 * 1024)

    queue = PackingQueue()
    received_at = datetime.fromtimestamp(BASE_NS / 1e9 + 3_600, UTC)
    runs = Runs(args.seed)
    spans = runs.batch(args.spans)
    print(f"(a) decode + map + validate, one core (CPU time), {len(spans)} spans per batch, seed {args.seed}, "
          f"{args.batches} batches x {args.repeats} repeats (median per batch; best in brackets)")  # fmt: skip
    rows: dict[str, list[tuple[float, float, float, float]]] = {}
    shapes: dict[str, int] = {}
    for batch in range(args.batches):
        if batch:
            spans = runs.batch(args.spans)
        for name, (body, content_type, encoding) in bodies(spans).items():
            shapes[name] = shapes.get(name, 0) + len(body)

            def decode(body: bytes = body, content_type: str = content_type, encoding: str | None = encoding):
                return decode_export(body, content_type=content_type, content_encoding=encoding)

            decode_s, decode_best, export = cpu(decode, args.repeats)
            map_s, _, _ = cpu(lambda export=export: map_export(export.request), args.repeats)
            ingest_s, ingest_best, result = cpu(
                lambda export=export: ingest_export(
                    export, reporter_id="bench-runtime", queue=queue, received_at=received_at
                ),
                args.repeats,
            )
            assert not result.rejected, result.error_message()  # a benchmark of the happy path
            rows.setdefault(name, []).append((decode_s, map_s, ingest_s, decode_best + ingest_best))
            shapes["ops"], shapes["skipped"] = len(result.stored), result.skipped
    print(
        f"    per batch: {shapes['ops']} ops, {shapes['skipped']} spans skipped (not op-shaped) in the last batch"
    )
    header = (
        f"    {'encoding':14} {'body KB':>8} {'decode ms':>9} {'map ms':>7} {'validate ms':>11} "
        f"{'total ms':>9} {'µs/span':>8} {'spans/s':>8} {'(best)':>8}"
    )
    print(header)
    for name, samples in rows.items():
        decode_s = statistics.median(s[0] for s in samples)
        map_s = statistics.median(s[1] for s in samples)
        ingest_s = statistics.median(s[2] for s in samples)
        best = min(s[3] for s in samples)
        total = decode_s + ingest_s
        print(
            f"    {name:14} {shapes[name] / len(samples) / 1024:8.0f} {decode_s * 1000:9.1f} {map_s * 1000:7.1f} "
            f"{(ingest_s - map_s) * 1000:11.1f} {total * 1000:9.1f} {total / args.spans * 1e6:8.0f} "
            f"{args.spans / total:8.0f} {args.spans / best:8.0f}"
        )


def cold_import(runs: int) -> None:
    from bench_import import measure

    handlers = [
        "functions/observer/health.py",
        "functions/observer/events.py",
        "functions/observer/traces.py",
    ]
    samples: dict[str, list[Any]] = {handler: [] for handler in handlers}
    for _ in range(runs):  # rounds alternate the handlers: the machine's load hits every row alike
        for handler in handlers:
            samples[handler].append(measure(ROOT, handler))
    base = samples[handlers[0]]
    print(f"(b) cold import (bench_import.py's Lambda-like site, python -S -X importtime), {runs} rounds; "
          "x = median of each round's ratio to /health")  # fmt: skip
    print(
        f"    {'handler':32} {'importtime ms':>13} {'x':>5} {'wall ms':>8} {'x':>5}  pyarrow  heaviest imports (ms)"
    )
    for handler, rows in samples.items():
        ratio = statistics.median(r.importtime_ms / b.importtime_ms for r, b in zip(rows, base, strict=True))
        wall = statistics.median(r.wall_ms / b.wall_ms for r, b in zip(rows, base, strict=True))
        heaviest = ", ".join(f"{name} {us / 1000:.0f}" for us, name in rows[-1].heaviest[:4])
        print(
            f"    {handler:32} {statistics.median(r.importtime_ms for r in rows):13.0f} {ratio:5.2f} "
            f"{statistics.median(r.wall_ms for r in rows):8.0f} {wall:5.2f}  "
            f"{'yes' if any(r.pyarrow for r in rows) else 'no':7}  {heaviest}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=512, help="spans per export (the SDK's default batch)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--batches", type=int, default=3, help="different batches of the same seed's runs")
    parser.add_argument("--repeats", type=int, default=15, help="timings of each stage per batch")
    parser.add_argument("--import-runs", type=int, default=15, help="rounds of (b)")
    parser.add_argument("--part", choices=("a", "b", "both"), default="both")
    args = parser.parse_args()
    if args.part in ("a", "both"):
        per_span(args)
    if args.part in ("b", "both"):
        cold_import(args.import_runs)


if __name__ == "__main__":
    main()
