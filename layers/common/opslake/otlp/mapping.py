"""Which spans are ops, and the op each one becomes (before the /events validation, redaction and
truncation every op goes through).

A span is an op when it is an AI agent's unit of work under the GenAI semantic conventions or
OpenInference (a tool execution, a model call, an agent invocation, a retrieval), when it failed
(status ERROR), or when it says so with ``opslake.endpoint``. Everything else (HTTP client spans,
database spans, framework internals) is counted and skipped unless a deployment keeps all spans.

Attribute names come from the maintained convention packages, never typed by hand; current and
legacy names are both read (``gen_ai.input.messages`` and the deprecated ``gen_ai.prompt``), and
content a framework sends as span events instead (Strands) fills what the attributes leave empty.
One agent run is one ``agent:<name>`` op: agent spans nested in a run (LangGraph's graph nodes) and
spans that only wrap named agents (the OpenAI Agents SDK's workflow) are not runs. A failure's error
is the exception's message and its type the error_type, never a traceback (LangChain puts one in
the status).
Values are claims like every field of ``POST /events``: ``gen_ai.agent.id`` is who the span says
ran it, not who sent it (the API key says that). A span's status is one of them: a tool span whose
result is an error (``{"error": …}``, MCP's ``isError``, "Error: …") is a failed op, marked as
inferred (:mod:`opslake.ingest.tool_errors`, the rule ``POST /events`` applies too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from openinference.semconv.trace import OpenInferenceSpanKindValues as OpenInferenceKind
from openinference.semconv.trace import SpanAttributes as OpenInference
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.exception_attributes import EXCEPTION_MESSAGE, EXCEPTION_TYPE
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME

from opslake.ingest.redact import redact
from opslake.ingest.tool_errors import (
    AGENT_ENDPOINT_PREFIX,
    FAILURE_INFERRED,
    MODEL_ENDPOINT_PREFIX,
    TOOL_ENDPOINT_PREFIX,
    ToolError,
    is_tool_endpoint,
    tool_error_of,
)
from opslake.models.ops import MAX_ATTRIBUTES

OpKind = Literal["tool", "model", "agent", "retrieval", "error", "explicit", "span"]
Operation = gen_ai.GenAiOperationNameValues

#: GenAI operation names and OpenInference span kinds that make a span an op, and which kind.
OPERATION_KINDS: dict[str, OpKind] = {
    Operation.EXECUTE_TOOL.value: "tool",
    Operation.CHAT.value: "model",
    Operation.TEXT_COMPLETION.value: "model",
    Operation.GENERATE_CONTENT.value: "model",
    Operation.INVOKE_AGENT.value: "agent",
    Operation.INVOKE_WORKFLOW.value: "agent",
    Operation.RETRIEVAL.value: "retrieval",
}
OPENINFERENCE_KINDS: dict[str, OpKind] = {
    OpenInferenceKind.TOOL.value: "tool",
    OpenInferenceKind.LLM.value: "model",
    OpenInferenceKind.AGENT.value: "agent",
    OpenInferenceKind.RETRIEVER.value: "retrieval",
}

# opslake's own attributes: what only a runtime knows, mapped to the /events field of that name.
OPSLAKE_PREFIX = "opslake."
OPSLAKE_ENDPOINT = "opslake.endpoint"
OPSLAKE_ATTRIBUTES_PREFIX = "opslake.attributes."
OPSLAKE_FIELDS = (
    "source", "event_kind", "task_class", "sig_hash", "correction", "applied_at_turn",
    "rescue_attempted", "rescue_succeeded",
)  # fmt: skip
DEFAULT_SOURCE = "otlp"
UNKNOWN_SERVICE = "unknown_service"  # the resource semantic conventions' default service.name prefix
FAILED_SPAN_ERROR_TYPE = "span_error"
EXCEPTION_EVENT = "exception"
UNNAMED_AGENT = "unnamed_agent"  # an agent span with no name attribute and a blank span name
# Python's traceback header: a status description holding one is a stack dump (local paths, code
# lines), not a message; LangChain's tracer (OpenInference) sets it as the status of a failed tool.
TRACEBACK_HEADER = "Traceback (most recent call last):"
_TRACEBACK_FRAME = re.compile(r'^\s+File "', re.MULTILINE)
_EXCEPTION_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
MAX_ENDPOINT_CHARS = 200
# Summaries are cut again (and redacted) by the op contract; this bounds the work before that.
MAX_VALUE_CHARS = 8_000

# First attribute present wins.
TOOL_NAMES = (gen_ai.GEN_AI_TOOL_NAME, OpenInference.TOOL_NAME)
MODEL_NAMES = (gen_ai.GEN_AI_REQUEST_MODEL, gen_ai.GEN_AI_RESPONSE_MODEL, OpenInference.LLM_MODEL_NAME)
AGENT_IDS = (gen_ai.GEN_AI_AGENT_ID, gen_ai.GEN_AI_AGENT_NAME, OpenInference.AGENT_NAME)
AGENT_NAMES = (
    gen_ai.GEN_AI_AGENT_NAME,
    OpenInference.AGENT_NAME,
    gen_ai.GEN_AI_AGENT_ID,
)  # an endpoint names the role
#: Prefixes of an agent span's name before the agent's own ("invoke_agent support_agent").
AGENT_SPAN_PREFIXES = (Operation.INVOKE_AGENT.value, Operation.INVOKE_WORKFLOW.value)
SESSION_IDS = (SESSION_ID, gen_ai.GEN_AI_CONVERSATION_ID, OpenInference.SESSION_ID)
INPUTS = (
    gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS, OpenInference.INPUT_VALUE, gen_ai.GEN_AI_INPUT_MESSAGES,
    gen_ai.GEN_AI_PROMPT,
)  # fmt: skip
OUTPUTS = (
    gen_ai.GEN_AI_TOOL_CALL_RESULT, OpenInference.OUTPUT_VALUE, gen_ai.GEN_AI_OUTPUT_MESSAGES,
    gen_ai.GEN_AI_COMPLETION,
)  # fmt: skip
TOOL_RESULTS = (gen_ai.GEN_AI_TOOL_CALL_RESULT, OpenInference.OUTPUT_VALUE)  # what the tool answered
# Content sent as span events instead of attributes. The GenAI conventions' current event (one or
# more per span, each with some of the message attributes; the contrib instrumentations' event-only
# mode, Strands with gen_ai_latest_experimental) and the deprecated per-message events (Strands'
# default): their names are not in the convention package, whose events module is not generated.
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system", "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool",
}  # fmt: skip
CHOICE_EVENT = "gen_ai.choice"
EVENT_CONTENT, EVENT_CHOICE_MESSAGE = "content", "message"
#: Span attributes kept as op attributes under their own names (models, tokens, providers, ids).
KEPT_ATTRIBUTES = (
    gen_ai.GEN_AI_OPERATION_NAME, gen_ai.GEN_AI_REQUEST_MODEL, gen_ai.GEN_AI_RESPONSE_MODEL,
    gen_ai.GEN_AI_PROVIDER_NAME, gen_ai.GEN_AI_SYSTEM, gen_ai.GEN_AI_TOOL_CALL_ID, gen_ai.GEN_AI_TOOL_TYPE,
    gen_ai.GEN_AI_AGENT_NAME, gen_ai.GEN_AI_USAGE_INPUT_TOKENS, gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
    gen_ai.GEN_AI_USAGE_PROMPT_TOKENS, gen_ai.GEN_AI_USAGE_COMPLETION_TOKENS,
    gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    OpenInference.OPENINFERENCE_SPAN_KIND, OpenInference.LLM_MODEL_NAME, OpenInference.LLM_PROVIDER,
    OpenInference.LLM_SYSTEM, OpenInference.LLM_TOKEN_COUNT_PROMPT, OpenInference.LLM_TOKEN_COUNT_COMPLETION,
    OpenInference.LLM_TOKEN_COUNT_TOTAL,
)  # fmt: skip
# opslake's names for what the span itself carries (not attributes of the span).
ATTR_KIND, ATTR_SPAN_ID, ATTR_PARENT_SPAN_ID, ATTR_SPAN_NAME, ATTR_SCOPE = (
    "otlp.op", "otel.span_id", "otel.parent_span_id", "otel.span_name", "otel.scope",
)  # fmt: skip


@dataclass(frozen=True)
class SpanRef:
    """Where a span sits in the export and what names it in a rejection message."""

    span_id: str
    name: str

    def describe(self) -> str:
        """How an answer names the span: its id and the start of its name, redacted (exporters log
        the answer) and quoted (a name cannot add lines or entries to the message)."""
        return f"span {self.span_id or '(no id)'} ({redact(self.name[:60])!r})"


@dataclass(frozen=True)
class MappedSpan:
    """A span that is an op: the raw op (as a client would post it to /events) and its reference."""

    ref: SpanRef
    op: dict[str, Any]


@dataclass
class MappedExport:
    """What one export held: the ops, the spans skipped as not op-shaped, and the spans refused."""

    ops: list[MappedSpan]
    skipped: int
    rejected: list[tuple[SpanRef, str]]


def value_of(value: AnyValue) -> Any:
    """An AnyValue as Python: scalars as they are, arrays and maps as lists and dicts, bytes as hex."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def attributes_of(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs}


def as_text(value: Any) -> str | None:
    """A value as text for a summary or an error (structured values as compact JSON)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text[:MAX_VALUE_CHARS] or None


def _first(attributes: Mapping[str, Any], names: Iterable[str]) -> Any:
    for name in names:
        value = attributes.get(name)
        if value not in (None, "", [], {}):
            return value
    return None


def kind_of(span: Span, attributes: Mapping[str, Any], *, keep_all: bool) -> OpKind | None:
    """Which kind of op a span is, or None when it is not one (skipped, counted)."""
    if OPSLAKE_ENDPOINT in attributes:
        return "explicit"
    operation = attributes.get(gen_ai.GEN_AI_OPERATION_NAME)
    if isinstance(operation, str) and operation in OPERATION_KINDS:
        return OPERATION_KINDS[operation]
    span_kind = attributes.get(OpenInference.OPENINFERENCE_SPAN_KIND)
    if isinstance(span_kind, str) and span_kind.upper() in OPENINFERENCE_KINDS:
        return OPENINFERENCE_KINDS[span_kind.upper()]
    if _first(attributes, TOOL_NAMES) is not None:  # a tool span without an operation name (older
        return "tool"  # Pydantic AI and OpenLLMetry versions)
    if span.status.code == Status.STATUS_CODE_ERROR:
        return "error"
    return "span" if keep_all else None


def endpoint_of(span: Span, attributes: Mapping[str, Any], kind: OpKind) -> Any:
    """``opslake.endpoint``; ``tool:<name>`` for a tool, ``model:<name>`` for a model call,
    ``agent:<name>`` for an agent invocation (a label like the others, not the span name "invoke_agent
    <name>"); else the span's name (cut to the endpoint limit: a name is not a claim worth refusing a
    span for)."""
    if kind == "explicit":
        return attributes[OPSLAKE_ENDPOINT]  # the client's own claim: validated, never cut
    tool = _first(attributes, TOOL_NAMES) if kind == "tool" else None
    model = _first(attributes, MODEL_NAMES) if kind == "model" else None
    agent = agent_name_of(span, attributes) if kind == "agent" else None
    if tool is not None:
        name = f"{TOOL_ENDPOINT_PREFIX}{as_text(tool)}"
    elif model is not None:
        name = f"{MODEL_ENDPOINT_PREFIX}{as_text(model)}"
    elif agent is not None or kind == "agent":  # every agent run under one prefix, named or not
        name = f"{AGENT_ENDPOINT_PREFIX}{agent or UNNAMED_AGENT}"
    else:
        name = span.name.strip() or "otlp:unnamed_span"
    return name[:MAX_ENDPOINT_CHARS].strip()


def agent_name_of(span: Span, attributes: Mapping[str, Any]) -> str | None:
    """The agent an agent span runs: its name attribute (GenAI, OpenInference), its graph node id, or
    its span name without the operation ("invoke_agent support_agent" names support_agent)."""
    named = _first(attributes, (*AGENT_NAMES, OpenInference.GRAPH_NODE_ID))
    if named is not None:
        return as_text(named)
    name = span.name.strip()
    for prefix in AGENT_SPAN_PREFIXES:
        if name == prefix or name.startswith(prefix + " "):
            name = name.removeprefix(prefix).strip()
    return name or None


def _exception_line(traceback: str) -> str | None:
    """What a Python traceback says after its last frame: the exception line ("ValueError: …", and
    the notes Python 3.11 adds), without the frames' file paths and code."""
    frames = list(_TRACEBACK_FRAME.finditer(traceback))
    if not frames:
        return None
    lines = traceback[frames[-1].end() :].splitlines()[1:]  # the rest of the frame line
    while lines and (not lines[0].strip() or lines[0][:1].isspace()):  # the frame's code and carets
        lines.pop(0)
    return "\n".join(line for line in lines if line.strip()) or None


def error_of(span: Span, attributes: Mapping[str, Any], failed: bool) -> tuple[str | None, str | None]:
    """(error, error_type): the last exception event's message; else the status description,
    unless it is a traceback; else the message of the traceback's exception line. The type is
    ``error.type`` or that exception's (a failed span with neither gets ``span_error``).

    A description holding a traceback (LangGraph's tool failures) is never stored: it is a stack
    dump with local file paths and code, and the exception event says the same in one line."""
    # the last exception recorded is the one that ended the span (earlier ones were retried)
    exception = next(
        (attributes_of(e.attributes) for e in reversed(span.events) if e.name == EXCEPTION_EVENT), {}
    )
    description = span.status.message
    traceback = TRACEBACK_HEADER in description
    exception_type, exception_message = (
        as_text(exception.get(EXCEPTION_TYPE)),
        as_text(exception.get(EXCEPTION_MESSAGE)),
    )
    # The message is the error and the type its error_type, however a framework spelled the two
    # (the OTel SDK writes "<Type>: <message>" into the status, Strands the message alone, LangGraph
    # a traceback): the same failure reads the same, and as a runtime's POST /events would send it.
    error = exception_message or (None if traceback else as_text(description))
    if error is None and traceback:
        line = as_text(_exception_line(description)) or ""
        named = _EXCEPTION_TYPE.match(line)
        exception_type = exception_type or (named.group(1) if named else None)
        error = as_text(line[named.end() :].strip() if named and line[named.end() :].strip() else line)
    error_type = as_text(attributes.get(ERROR_TYPE)) or exception_type
    if failed:
        return error or "the span's status is ERROR", error_type or FAILED_SPAN_ERROR_TYPE
    return error, error_type  # a successful span may still name an error it recovered from


def event_content(span: Span) -> dict[str, Any]:
    """The content a span sent as events, under the attribute names it would have as attributes:
    ``gen_ai.input.messages``/``gen_ai.output.messages`` from the details events (merged: a span
    may send input and output in two), and from the per-message events the input (one message's
    content as it is, as a tool's arguments are; several as a list of role and content) and the
    output (the choices' messages likewise)."""
    found: dict[str, Any] = {}
    inputs: list[dict[str, Any]] = []
    choices: list[Any] = []
    for event in span.events:
        if event.name == DETAILS_EVENT:
            found.update(
                (kv.key, value_of(kv.value))
                for kv in event.attributes
                if kv.key in (gen_ai.GEN_AI_INPUT_MESSAGES, gen_ai.GEN_AI_OUTPUT_MESSAGES)
            )
        elif event.name in MESSAGE_EVENTS or event.name == CHOICE_EVENT:
            values = attributes_of(event.attributes)
            if event.name == CHOICE_EVENT and values.get(EVENT_CHOICE_MESSAGE) is not None:
                choices.append(values[EVENT_CHOICE_MESSAGE])
            elif event.name in MESSAGE_EVENTS and values.get(EVENT_CONTENT) is not None:
                inputs.append({"role": MESSAGE_EVENTS[event.name], "content": values[EVENT_CONTENT]})
    if inputs:
        found.setdefault(gen_ai.GEN_AI_PROMPT, inputs[0]["content"] if len(inputs) == 1 else inputs)
    if choices:
        found.setdefault(gen_ai.GEN_AI_COMPLETION, choices[0] if len(choices) == 1 else choices)
    return found


def _service(resource: Mapping[str, Any]) -> Any:
    """The resource's service name, unless it is the SDKs' default (``unknown_service:<process>``,
    sent when the user set none): that names no agent, and the reporter is the better answer."""
    name = resource.get(SERVICE_NAME)
    return None if isinstance(name, str) and name.startswith(UNKNOWN_SERVICE) else name


def _timestamp(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class RunContext:
    """Who ran a span and in which session, as the span or its nearest ancestor in the same export
    says: a tool span seldom repeats the agent name its ``invoke_agent`` parent carries."""

    agent_id: Any = None
    session_id: Any = None


def _op_attributes(
    span: Span,
    kind: OpKind,
    attributes: Mapping[str, Any],
    span_id: str,
    scope: str,
    inferred: ToolError | None = None,
) -> dict[str, Any]:
    """The op's attributes within the op limit (50): the span's own ids first (how a failure is
    followed to its run), then the runtime's ``opslake.attributes.*`` (refused, with the room left,
    when they do not fit), then the marker of an ``inferred`` failure, then the convention
    attributes kept (models, tokens) as room allows. The marker takes a convention's place, never a
    claim's: when the claims fill the room, it is left out (and the caller keeps the span's status)."""
    own: dict[str, Any] = {ATTR_KIND: kind, ATTR_SPAN_ID: span_id, ATTR_SPAN_NAME: span.name[:1_000]}
    if any(span.parent_span_id):  # some bridges send zeros for a root, which has none
        own[ATTR_PARENT_SPAN_ID] = span.parent_span_id.hex()
    if scope:
        own[ATTR_SCOPE] = scope[:1_000]
    claimed = {
        key.removeprefix(OPSLAKE_ATTRIBUTES_PREFIX): value
        for key, value in attributes.items()
        if key.startswith(OPSLAKE_ATTRIBUTES_PREFIX) and isinstance(value, str | int | float | bool)
    }
    # ids and opslake's own marker are not claims
    claimed = {key: value for key, value in claimed.items() if key not in own and key != FAILURE_INFERRED}
    room = MAX_ATTRIBUTES - len(own)
    if len(claimed) > room:
        raise ValueError(
            f"{len(claimed)} opslake.attributes.* given; at most {room} fit beside the span's own "
            f"{len(own)} ({', '.join(own)}) within the op limit of {MAX_ATTRIBUTES} attributes"
        )
    marker = {FAILURE_INFERRED: inferred.rule} if inferred is not None and len(claimed) < room else {}
    conventions = [
        (name, attributes[name])
        for name in KEPT_ATTRIBUTES
        if name not in claimed and isinstance(attributes.get(name), str | int | float | bool)
    ]
    return {**dict(conventions[: room - len(claimed) - len(marker)]), **claimed, **own, **marker}


def span_to_op(
    span: Span,
    kind: OpKind,
    attributes: Mapping[str, Any],
    resource: Mapping[str, Any],
    scope: str,
    inherited: RunContext = RunContext(),
) -> dict[str, Any]:
    """The op a span is, shaped like a ``POST /events`` op (the same validation follows).

    Raises ValueError for what no op can be made of: ids of the wrong length, no start time, an
    end before the start.
    """
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        raise ValueError("trace_id must be 16 bytes and span_id 8 bytes (32 and 16 hex characters)")
    if not any(span.trace_id) or not any(span.span_id):  # trace.proto: all zeroes is invalid
        raise ValueError("an all-zero trace_id or span_id is invalid (fix the exporter's id generator)")
    if span.start_time_unix_nano <= 0:
        raise ValueError("start_time_unix_nano is not set")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise ValueError("end_time_unix_nano is before start_time_unix_nano (or not set)")
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    events = event_content(span)  # read only where the attributes say nothing
    failed = span.status.code == Status.STATUS_CODE_ERROR
    error, error_type = error_of(span, attributes, failed)
    endpoint = endpoint_of(span, attributes, kind)
    # a tool span whose status says OK may still have answered an error (read from the raw value:
    # a structured result as it is, a long one before it is cut to a summary)
    is_tool = kind == "tool" or (isinstance(endpoint, str) and is_tool_endpoint(endpoint))
    inferred = None if failed or not is_tool else tool_error_of(_first(attributes, TOOL_RESULTS))
    kept = _op_attributes(span, kind, attributes, span_id, scope, inferred)
    if inferred is not None and FAILURE_INFERRED in kept:  # the span's own error words come first
        failed, error, error_type = True, error or inferred.message, error_type or inferred.error_type
    op: dict[str, Any] = {
        "op_id": f"{trace_id}:{span_id}",
        "trace_id": trace_id,
        "ts": _timestamp(span.start_time_unix_nano),
        "duration_ms": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
        "endpoint": endpoint,
        "success": not failed,
        "source": DEFAULT_SOURCE,
        "error": error,
        "error_type": error_type,
        "agent_id": as_text(
            _first(attributes, AGENT_IDS)
            or (agent_name_of(span, attributes) if kind == "agent" else None)
            or inherited.agent_id
            or _service(resource)
        ),
        "session_id": as_text(_first(attributes, SESSION_IDS) or inherited.session_id),
        "input_summary": as_text(_first(attributes, INPUTS) or _first(events, INPUTS)),
        "output_summary": as_text(_first(attributes, OUTPUTS) or _first(events, OUTPUTS)),
        "attributes": kept,
    }
    for field in OPSLAKE_FIELDS:  # a runtime's own claims, validated like /events fields
        if OPSLAKE_PREFIX + field in attributes:
            op[field] = attributes[OPSLAKE_PREFIX + field]
    return {name: value for name, value in op.items() if value is not None}


MAX_ANCESTORS = 64  # how far up a trace an agent or session is looked for (a cycle cannot loop)
# OpenInference's LangChain instrumentation marks each LangGraph node's span with its node in the
# span's metadata; a node named "agent" is an AGENT span, a step of the graph's run, not a run.
GRAPH_STEP_KEYS = ("langgraph_node",)


def is_graph_step(attributes: Mapping[str, Any]) -> bool:
    """Whether the span's OpenInference metadata names the graph node it executes."""
    metadata = attributes.get(OpenInference.METADATA)
    if isinstance(metadata, str) and any(key in metadata for key in GRAPH_STEP_KEYS):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return False
    return isinstance(metadata, dict) and any(key in metadata for key in GRAPH_STEP_KEYS)


@dataclass(frozen=True)
class _Node:
    parent: bytes
    kind: OpKind | None
    agent: Any  # the agent the span names by attribute
    session: Any
    run_name: str | None  # the agent it runs, when it is an agent span
    graph_step: bool
    named: bool  # it names its agent by attribute (not only by its span name)


class _Ancestry:
    """Each span's parent, kind and own agent/session claims in one export: to find a span's run
    context, and which agent spans are runs (the outermost of an agent) and which are its steps."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[bytes, bytes], _Node] = {}
        self._wrappers: set[tuple[bytes, bytes]] | None = None  # found once all spans are added

    def add(self, span: Span, attributes: Mapping[str, Any], kind: OpKind | None) -> None:
        if not any(span.span_id):
            return  # an invalid id (its span is refused) is nobody's parent
        agent = kind == "agent"
        self._nodes[(span.trace_id, span.span_id)] = _Node(
            span.parent_span_id,
            kind,
            _first(attributes, AGENT_IDS),
            _first(attributes, SESSION_IDS),
            agent_name_of(span, attributes) if agent else None,
            agent and is_graph_step(attributes),
            agent and _first(attributes, AGENT_NAMES) is not None,
        )
        self._wrappers = None

    def _wrapper_keys(self) -> set[tuple[bytes, bytes]]:
        """Agent spans that name no agent and enclose one that does: a workflow around agent runs
        (the OpenAI Agents SDK's "Agent workflow" trace span, which OpenInference makes an AGENT
        span), not a run of its own."""
        if self._wrappers is None:
            self._wrappers = set()
            for (trace_id, _), node in self._nodes.items():
                if node.kind != "agent" or not node.named:
                    continue
                parent = node.parent
                for _ in range(MAX_ANCESTORS):
                    above = self._nodes.get((trace_id, parent)) if parent else None
                    if above is None:
                        break
                    if above.kind == "agent" and not above.named:
                        self._wrappers.add((trace_id, parent))
                    parent = above.parent
        return self._wrappers

    def is_wrapper(self, span: Span) -> bool:
        return (span.trace_id, span.span_id) in self._wrapper_keys()

    def _ancestors(self, span: Span) -> Iterator[tuple[tuple[bytes, bytes], _Node]]:
        return self._ancestors_of(span.trace_id, span.parent_span_id)

    def _ancestors_of(self, trace_id: bytes, parent: bytes) -> Iterator[tuple[tuple[bytes, bytes], _Node]]:
        for _ in range(MAX_ANCESTORS):
            key = (trace_id, parent)
            node = self._nodes.get(key) if parent else None
            if node is None:
                return
            yield key, node
            parent = node.parent

    def _run_of(self, key: tuple[bytes, bytes], node: _Node) -> bool:
        return node.kind == "agent" and not node.graph_step and key not in self._wrapper_keys()

    def _is_run(self, key: tuple[bytes, bytes], node: _Node) -> bool:
        """An agent span that is a run, not a step of an enclosing run (:meth:`is_step`, by node)."""
        if not self._run_of(key, node):
            return False
        enclosing = next((n for k, n in self._ancestors_of(key[0], node.parent) if self._run_of(k, n)), None)
        if enclosing is None:
            return True
        return node.named and node.run_name not in (enclosing.run_name, as_text(enclosing.agent))

    def is_step(self, span: Span, attributes: Mapping[str, Any]) -> bool:
        """An agent span is a step of a run, not a run, when its metadata names the graph node it
        executes, or when an agent span encloses it in this export and it names no other agent
        (LangGraph nests AGENT spans per node; a sub-agent with a name of its own is a run)."""
        if is_graph_step(attributes):
            return True
        enclosing = next((n for key, n in self._ancestors(span) if self._run_of(key, n)), None)
        if enclosing is None:
            return False
        named = _first(attributes, AGENT_NAMES)
        return named is None or as_text(named) in (enclosing.run_name, as_text(enclosing.agent))

    def context_of(self, span: Span) -> RunContext:
        """The agent and session of the nearest ancestors that name them (an agent run names its
        agent even without an attribute: the tool spans under it are its calls)."""
        agent = session = None
        for key, node in self._ancestors(span):
            # a step (a graph node, an unnamed agent span inside a run) names no agent: its run does
            agent = agent or node.agent or (node.run_name if self._is_run(key, node) else None)
            session = session or node.session
            if agent is not None and session is not None:
                break
        return RunContext(agent, session)


def _spans(request: ExportTraceServiceRequest) -> Iterator[tuple[Span, dict[str, Any], str]]:
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield span, resource, scope_spans.scope.name


def map_export(request: ExportTraceServiceRequest, *, keep_all: bool = False) -> MappedExport:
    """Every span of an export: an op, skipped (not op-shaped) or rejected (with the reason)."""
    result = MappedExport(ops=[], skipped=0, rejected=[])
    spans = [
        (span, attributes_of(span.attributes), resource, scope) for span, resource, scope in _spans(request)
    ]
    kinds = [kind_of(span, attributes, keep_all=keep_all) for span, attributes, _, _ in spans]
    ancestry = _Ancestry()
    for (span, attributes, _, _), kind in zip(spans, kinds, strict=True):
        ancestry.add(span, attributes, kind)
    for (span, attributes, resource, scope), kind in zip(spans, kinds, strict=True):
        if kind == "agent" and (ancestry.is_step(span, attributes) or ancestry.is_wrapper(span)):
            kind = "span" if keep_all else None  # one agent op per run, not per graph step or workflow
        if kind is None:
            result.skipped += 1
            continue
        ref = SpanRef(span.span_id.hex(), span.name)
        try:
            op = span_to_op(span, kind, attributes, resource, scope, ancestry.context_of(span))
        except ValueError as exc:
            result.rejected.append((ref, str(exc)))
            continue
        result.ops.append(MappedSpan(ref, op))
    return result
