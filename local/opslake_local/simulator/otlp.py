"""``report="otlp"``: the simulated runtime reports what only it knows as OpenTelemetry spans, the
way an instrumented agent framework would, instead of posting ops to ``POST /events``.

Each agent is its own runtime: a :class:`~opentelemetry.sdk.trace.TracerProvider` with the resource
``service.name`` = the agent id and a batch processor whose OTLP/HTTP exporter (protobuf, gzip)
sends to ``<base_url>/v1/traces`` with the agent's own API key (the key says who reported, as for
``/events``). Each task runs inside an ``invoke_agent`` span (GenAI semantic conventions), so every
report of a task shares its trace id; the tool calls carry that trace id too
(``x-opslake-trace-id``), since the gateway already records each of them (no ``execute_tool``
spans for opslake's tools: the same call would be counted twice). A runtime with tools of its own
(:mod:`opslake_local.worlds`) records each of their calls as an ``execute_tool`` span
(:meth:`TaskSpans.tool_call`): those calls reach opslake only that way.

A report is the op the runtime would have posted to ``/events``, written as one span: the runtime's
model call is a GenAI ``chat`` span (model, token usage, status ERROR with the timeout as an
exception event); a correction, a rescue or a result check is an ``opslake.*`` span. Every report
carries ``opslake.endpoint`` and the other ``opslake.*`` extension attributes, so ``/v1/traces``
stores the same op ``/events`` would have (apart from its id, trace id and the span's own
attributes). Attribute names come from the convention packages; only the ``opslake.*`` names are
opslake's own (the /v1/traces contract), imported from the mapping that reads them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from openinference.semconv.trace import SpanAttributes as OpenInference
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, format_span_id, format_trace_id
from opentelemetry.util.types import AttributeValue

from opslake.otlp.mapping import OPSLAKE_ATTRIBUTES_PREFIX, OPSLAKE_ENDPOINT, OPSLAKE_FIELDS, OPSLAKE_PREFIX
from opslake_local.simulator.agents import SimAgent

Report = Literal["events", "otlp"]
REPORTS: tuple[Report, ...] = ("events", "otlp")
TRACES_PATH = "/v1/traces"
SCOPE = "opslake_local.simulator"
Operation = gen_ai.GenAiOperationNameValues

#: Set on the ``invoke_agent`` span when the task ends: whether it reached its goal. Not a status:
#: a task fails because a tool call failed, and that failure is already an op of its own.
TASK_SUCCEEDED = OPSLAKE_ATTRIBUTES_PREFIX + "task_succeeded"


@dataclass(frozen=True)
class ModelCall:
    """What the span of the runtime's own model call says beyond its op: the model and its tokens."""

    model: str
    input_tokens: int
    output_tokens: int = 0


class CountingExporter(SpanExporter):
    """An exporter that counts the spans its inner exporter delivered and the ones it could not
    (the export thread calls it; the simulator reads the counts after a flush)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def otlp_exporter(base_url: str, agent: SimAgent) -> SpanExporter:
    """The exporter of one agent's runtime: OTLP/HTTP protobuf, gzip, with the agent's API key."""
    return OTLPSpanExporter(
        endpoint=base_url.rstrip("/") + TRACES_PATH,
        headers={"x-api-key": agent.api_key},
        compression=Compression.Gzip,
    )


def op_attributes(op: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The span attributes that carry an ``/events`` op's fields (``agent_id`` comes from the
    resource, ``success``/``error`` from the status, ``duration_ms`` from the span's times)."""
    attributes: dict[str, AttributeValue] = {OPSLAKE_ENDPOINT: op["endpoint"]}
    if op.get("session_id"):
        attributes[SESSION_ID] = op["session_id"]
    for name in OPSLAKE_FIELDS:
        if op.get(name) is not None:
            attributes[OPSLAKE_PREFIX + name] = op[name]
    for key, value in (op.get("attributes") or {}).items():
        attributes[OPSLAKE_ATTRIBUTES_PREFIX + key] = value
    if op.get("input_summary"):
        attributes[OpenInference.INPUT_VALUE] = op["input_summary"]
    if op.get("output_summary"):
        attributes[OpenInference.OUTPUT_VALUE] = op["output_summary"]
    if not op["success"] and op.get("error_type"):
        attributes[ERROR_TYPE] = op["error_type"]
    return attributes


def model_attributes(model: ModelCall) -> dict[str, AttributeValue]:
    """A GenAI ``chat`` span's own attributes: operation, requested model and token usage."""
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_OPERATION_NAME: Operation.CHAT.value,
        gen_ai.GEN_AI_REQUEST_MODEL: model.model,
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: model.input_tokens,
    }
    if model.output_tokens:
        attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = model.output_tokens
    return attributes


class TaskSpans:
    """The spans of one task: its ``invoke_agent`` span and the runtime's reports inside it.

    A report's span starts when it is reported and lasts the op's ``duration_ms`` (the simulated
    runtime's time, as ``/events`` would have been told); the task span ends after the last one.
    """

    #: Tool calls of a task start at least this far apart: ops are ordered by ``ts``, which keeps
    #: milliseconds, so two calls in the same millisecond would have no order within their session.
    TOOL_CALL_SPACING_NS = 1_000_000

    def __init__(
        self, tracer: trace.Tracer, span: Span, *, session: str | None = None, task_class: str | None = None
    ) -> None:
        self.tracer, self.span = tracer, span
        self.context = trace.set_span_in_context(span)
        self.trace_id = format_trace_id(span.get_span_context().trace_id)
        self.session, self.task_class = session, task_class
        self.reported = 0
        self.tool_calls = 0
        self.last_end_ns = 0
        self.next_start_ns = 0  # the earliest start of the task's next tool call

    def report(self, op: Mapping[str, Any], model: ModelCall | None = None) -> None:
        """One runtime op as one span: a GenAI ``chat`` span for a model call, else an ``opslake.*``
        span named after its event kind and endpoint."""
        attributes = op_attributes(op)
        if model is not None:
            attributes.update(model_attributes(model))
            name, kind = f"{Operation.CHAT.value} {model.model}", SpanKind.CLIENT
        else:
            name, kind = f"{op.get('event_kind') or 'report'} {op['endpoint']}", SpanKind.INTERNAL
        start = time.time_ns()
        end = start + round(float(op["duration_ms"]) * 1e6)
        span = self.tracer.start_span(name, self.context, kind, attributes, start_time=start)
        if not op["success"]:
            error = str(op.get("error") or op.get("error_type") or "failed")
            if model is not None:  # the call raised: its exception event, as an instrumentation records it
                span.record_exception(TimeoutError(error), timestamp=end, escaped=True)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
        self.reported += 1
        self.last_end_ns = max(self.last_end_ns, end)

    def tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        result: Any = None,
        error: BaseException | None = None,
        duration_ms: float,
    ) -> str:
        """One execution of the runtime's own tool, as a GenAI instrumentation records it: an
        ``execute_tool`` span with the tool's name, call id, arguments (JSON) and result (JSON, or the
        text the tool returned), the task's session and class; a tool that raised has status ERROR,
        its exception as an event and ``error.type``. A tool that returned an error as its result is
        recorded as it is: status OK, the error in the result. The call starts now (at least
        :data:`TOOL_CALL_SPACING_NS` after the task's previous one) and lasts ``duration_ms``.
        Returns the op id ``/v1/traces`` gives the span (``<trace id>:<span id>``)."""
        self.tool_calls += 1
        start = max(time.time_ns(), self.next_start_ns)
        end = start + round(duration_ms * 1e6)
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
            gen_ai.GEN_AI_TOOL_CALL_ID: f"call_{self.trace_id[:8]}_{self.tool_calls}",
            gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(dict(arguments)),
        }
        if error is None:
            attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = (
                result if isinstance(result, str) else json.dumps(result)
            )
        if self.session:
            attributes[SESSION_ID] = self.session
        if self.task_class:
            attributes[OPSLAKE_PREFIX + "task_class"] = self.task_class
        span = self.tracer.start_span(
            f"{Operation.EXECUTE_TOOL.value} {name}",
            self.context,
            SpanKind.INTERNAL,
            attributes,
            start_time=start,
        )
        if error is not None:
            span.record_exception(error, timestamp=end, escaped=True)
            span.set_attribute(ERROR_TYPE, type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end(end_time=end)
        self.next_start_ns = start + self.TOOL_CALL_SPACING_NS
        self.last_end_ns = max(self.last_end_ns, end)
        context = span.get_span_context()
        return f"{format_trace_id(context.trace_id)}:{format_span_id(context.span_id)}"

    def finish(self, succeeded: bool) -> None:
        """Record the task's outcome on its span (an attribute: see :data:`TASK_SUCCEEDED`)."""
        self.span.set_attribute(TASK_SUCCEEDED, succeeded)


class SpanReporter:
    """A fleet's OTLP reporting: one tracer provider per agent (its resource and its key), created
    when the agent runs its first task, flushed by :meth:`flush`, shut down by :meth:`shutdown`."""

    #: Spans wait for :meth:`flush` (the end of a cycle) instead of the batch processor's 5 s timer,
    #: so a run does not depend on when a timer fired (same seed, same closing note). Before the
    #: local stack's API functions took turns (``opslake_local.invoke.Invoker``), an export during a
    #: tool call also gave ~10 of 270 with-fleet op records the ``/v1/traces`` route.
    EXPORT_AT_FLUSH_MS = 3_600_000

    def __init__(self, exporter_for: Callable[[SimAgent], SpanExporter]) -> None:
        self.exporter_for = exporter_for
        self._runtimes: dict[str, tuple[TracerProvider, CountingExporter]] = {}

    def _tracer(self, agent: SimAgent) -> trace.Tracer:
        if agent.agent_id not in self._runtimes:
            exporter = CountingExporter(self.exporter_for(agent))
            provider = TracerProvider(resource=Resource.create({SERVICE_NAME: agent.agent_id}))
            processor = BatchSpanProcessor(exporter, schedule_delay_millis=self.EXPORT_AT_FLUSH_MS)
            provider.add_span_processor(processor)
            self._runtimes[agent.agent_id] = (provider, exporter)
        return self._runtimes[agent.agent_id][0].get_tracer(SCOPE)

    @contextmanager
    def task(self, agent: SimAgent, task_class: str, session: str) -> Iterator[TaskSpans]:
        """The ``invoke_agent`` span of one task (GenAI conventions: agent id and name, session as
        ``session.id`` and ``gen_ai.conversation.id``); the task's reports go inside it."""
        tracer = self._tracer(agent)
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.INVOKE_AGENT.value,
            gen_ai.GEN_AI_AGENT_ID: agent.agent_id,
            gen_ai.GEN_AI_AGENT_NAME: agent.agent_id,
            SESSION_ID: session,
            gen_ai.GEN_AI_CONVERSATION_ID: session,
            OPSLAKE_PREFIX + "task_class": task_class,
        }
        name = f"{Operation.INVOKE_AGENT.value} {agent.agent_id}"
        span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)
        spans = TaskSpans(tracer, span, session=session, task_class=task_class)
        try:
            yield spans
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            span.end(end_time=max(time.time_ns(), spans.last_end_ns))

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every ended span now (the loop's writer must see them before the analyzer runs)."""
        return all(provider.force_flush(timeout_millis) for provider, _ in self._runtimes.values())

    @property
    def exported(self) -> int:
        """Spans the exporters delivered so far (all agents)."""
        return sum(exporter.exported for _, exporter in self._runtimes.values())

    @property
    def failed(self) -> int:
        """Spans the exporters could not deliver so far (all agents)."""
        return sum(exporter.failed for _, exporter in self._runtimes.values())

    def shutdown(self) -> None:
        for provider, _ in self._runtimes.values():
            provider.shutdown()
        self._runtimes.clear()
