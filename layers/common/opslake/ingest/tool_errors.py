"""Failures a tool's result reports while its op claims success.

Many tools answer an error as their result instead of raising: the model reads the error and may
try again, and the span's status (or the ``success`` a runtime posts) stays OK. Counted as a
success, such a call hides the very failures the analyzer learns from, so a **tool op** (endpoint
``tool:<name>``, or an OTLP span of the tool kind) that claims success and whose result is an error
is stored failed, with ``attributes["opslake.failure_inferred"]`` naming the rule that fired.

What counts, in this order (the result as a JSON object, or text):

* ``isError`` / ``is_error`` true: an MCP ``CallToolResult`` (the MCP spec reports tool execution
  errors in the result with ``isError``, not as protocol errors) or an Anthropic ``tool_result``.
  The flag is the protocol's own word: ``false`` means success, whatever the text says.
* a LangChain ``ToolMessage`` (``"type": "tool"``) with ``"status": "error"``: what a tool with
  ``handle_tool_error`` answers, and what OpenInference records as the tool span's output
  (``status`` ``"success"`` is its word for success, again final).
* a top-level ``error`` key holding a non-empty string, an object that names something, or
  ``true`` (the seed's ``if (data.error)``; Slack's ``{"ok": false, "error": "code"}``, OpenAI's
  ``{"error": {"message", "type"}}``, opslake's own ``{"error": "bad_request", "message"}``).
* text that begins with ``Error:`` (any case: LangGraph's ToolNode templates, Postgres' ``ERROR:``,
  JavaScript's ``String(new Error(m))``), with an exception's name (``ValueError: …``,
  ``requests.exceptions.HTTPError: …``: Python's ``f"{type(e).__name__}: {e}"``, JavaScript's
  ``String(new TypeError(m))``; the name becomes ``error_type``), or with the sentences LangGraph
  and the OpenAI Agents SDK's ``default_tool_error_function`` answer for a tool that raised
  (``Error executing tool …``, ``Error invoking tool …``, ``An error occurred while running the
  tool …``). A JSON string holding such text counts too. The message is what follows ``Error:``.

What does not, and why:

* ``error`` that is null, false, 0, empty (``""``, ``{}``, ``[]``) or says there is none
  (``"none"``, ``"null"``, ``"ok"``, ``"no error"``): a field reserved for an error, left empty.
* other keys that mention errors (``errors``, ``error_rate``, ``errorCount``) and an ``error``
  nested deeper (``{"data": {"error": …}}``): they describe what the tool found (a GraphQL answer
  with partial data, a job whose status is failed), not the call itself.
* text that mentions an error anywhere but its start (``No error found``, ``3 errors in the
  log``), and a result that is not a JSON object or text (a list, a number).
* JSON that does not parse (a cut result), and a result over :data:`MAX_PARSED_CHARS`: an error
  object is small, and a large answer is not read twice.
* anything but a tool op (a model's or an agent's output may quote an error it handled), and an op
  that already failed (it keeps its own error and type).

The op keeps what it states: ``error`` and ``error_type`` are filled from the result only where
the op names none (a runtime that set ``error`` but forgot ``success: false`` describes its own
failure best). The marker needs one attribute: an op that already carries the most attributes an
op may (50) keeps its claim rather than lose one of them or fail unmarked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from opslake.models.ops import MAX_ATTRIBUTES, MAX_ID_CHARS, OpInput

#: The op attribute that marks an inferred failure; its value is the :data:`Rule` that fired.
FAILURE_INFERRED = "opslake.failure_inferred"
#: ``error_type`` when the result names no type of its own.
TOOL_ERROR_RESULT = "tool_error_result"
#: An endpoint that starts with this is a tool op (``tool:query_db``; the OTLP mapping writes it).
TOOL_ENDPOINT_PREFIX = "tool:"
#: The OTLP mapping's endpoints of a model call (``model:gpt-4o``) and an agent run (``agent:planner``).
MODEL_ENDPOINT_PREFIX, AGENT_ENDPOINT_PREFIX = "model:", "agent:"
#: Results longer than this (characters) are not parsed as JSON.
MAX_PARSED_CHARS = 64 * 1024

Rule = Literal["is_error", "tool_message", "error_field", "error_text"]


@dataclass(frozen=True)
class ToolError:
    """The error a tool's result reports: its message, its type, and which rule found it."""

    message: str
    error_type: str
    rule: Rule


# Values that leave a field reserved for an error empty (compared stripped, lowercased).
_NO_ERROR = frozenset({"", "none", "null", "nil", "undefined", "false", "0", "n/a", "ok", "no error"})
# An exception's name at the start of a text, maybe dotted: "KeyError:", "Exception:" (a bare
# "Error:" is the generic opening below, often a framework's template rather than a type).
_EXCEPTION_NAME = re.compile(
    r"(?P<name>[A-Za-z_][\w.]{0,150}?Error|(?:[A-Za-z_][\w.]{0,150}?)?Exception)\s*:"
)
_ERROR_OPENINGS = re.compile(
    r"error\s*:|error (?:executing|invoking) tool\b"
    r"|an error occurred while (?:running the tool|parsing tool arguments)\b",
    re.IGNORECASE,
)
_ERROR_COLON = re.compile(r"error\s*:\s*", re.IGNORECASE)
_LABEL = re.compile(r"\S(?:.*\S)?")
# Where an error's type is: an error object's own fields (a serialized JavaScript Error has
# "name"); beside a top-level "error", only fields that cannot be the result's own kind or name.
_ERROR_TYPE_KEYS = ("type", "code", "name")
_RESULT_TYPE_KEYS = ("error_type", "code")


def is_tool_endpoint(endpoint: str) -> bool:
    return endpoint.startswith(TOOL_ENDPOINT_PREFIX)


def tool_error_of(result: Any) -> ToolError | None:
    """The error a tool's result reports, or None when it reports none (the rules above).

    ``result`` is the result as the op or span carries it: text (JSON or not) or an object (an
    OTLP map value). Never raises: every shape is either an error or not one.
    """
    if isinstance(result, Mapping):
        return _from_object(result)
    if not isinstance(result, str):
        return None
    text = result.strip()
    if text[:1] in ("{", '"'):
        if len(text) > MAX_PARSED_CHARS:
            return None
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if isinstance(parsed, dict):
            return _from_object(parsed)
        return _from_text(parsed.strip()) if isinstance(parsed, str) else None
    return _from_text(text)


def with_inferred_failure(op: OpInput) -> OpInput:
    """A ``POST /events`` op with the rule applied: failed, marked, ``error``/``error_type`` filled
    where it names none; unchanged when it is no tool op, already failed, has no room for the
    marker, or its result reports no error.

    The marker is the server's word: an op that sends it itself is refused (ValueError), as
    ``reporter_id`` is.
    """
    if FAILURE_INFERRED in op.attributes:
        raise ValueError(
            f"attributes.{FAILURE_INFERRED} is set by the server (when a tool op's result reports an "
            "error); leave it out"
        )
    if not op.success or not is_tool_endpoint(op.endpoint) or len(op.attributes) >= MAX_ATTRIBUTES:
        return op
    found = tool_error_of(op.output_summary)
    if found is None:
        return op
    return op.model_copy(
        update={
            "success": False,
            "error": op.error or found.message,
            "error_type": op.error_type or found.error_type,
            "attributes": {**op.attributes, FAILURE_INFERRED: found.rule},
        }
    )


def _from_object(result: Mapping[str, Any]) -> ToolError | None:
    for flag in ("isError", "is_error"):
        if isinstance(result.get(flag), bool):
            return _mcp_error(result) if result[flag] else None
    if result.get("type") == "tool" and result.get("status") in ("error", "success"):
        if result["status"] == "success":
            return None
        text = _content_text(result.get("content"))
        return ToolError(text or "the tool message's status is error", TOOL_ERROR_RESULT, "tool_message")
    return _error_field(result)


def _mcp_error(result: Mapping[str, Any]) -> ToolError:
    """The text the model read (the result's text content), typed by ``structuredContent`` when
    that is itself an error object (opslake's own MCP tools answer ``{"error": code, "message"}``)."""
    structured = result.get("structuredContent")
    described = _error_field(structured) if isinstance(structured, Mapping) else None
    message = _content_text(result.get("content")) or (described.message if described else "")
    error_type = described.error_type if described else TOOL_ERROR_RESULT
    return ToolError(message or "the tool's result has isError: true", error_type, "is_error")


def _error_field(result: Mapping[str, Any]) -> ToolError | None:
    error = result.get("error")
    if error is True:
        message = _text(result.get("message")) or _compact(result)
        return ToolError(message, _type_of(result, _RESULT_TYPE_KEYS) or TOOL_ERROR_RESULT, "error_field")
    if isinstance(error, str) and _meaningful(error):
        error = error.strip()
        code = _label(error) if len(error.split()) == 1 else None  # one word is a code: "not_found"
        stated = _text(result.get("message"))
        if code and stated:  # {"error": "not_found", "message": "no worker W00042"}
            return ToolError(stated, code, "error_field")
        return ToolError(
            error, code or _type_of(result, _RESULT_TYPE_KEYS) or TOOL_ERROR_RESULT, "error_field"
        )
    if isinstance(error, Mapping) and any(_meaningful(value) for value in error.values()):
        described = _text(error.get("message")) or _text(error.get("detail")) or _compact(error)
        named = _type_of(error, _ERROR_TYPE_KEYS) or _type_of(result, _RESULT_TYPE_KEYS)
        return ToolError(described, named or TOOL_ERROR_RESULT, "error_field")
    return None


def _from_text(text: str) -> ToolError | None:
    named = _EXCEPTION_NAME.match(text)
    if named is not None:  # "ValueError: bad input": the exception's name is the type
        message, error_type = text[named.end() :].strip(), named["name"]
    elif _ERROR_OPENINGS.match(text) is not None:
        after = _ERROR_COLON.search(text)  # the Agents SDK and LangGraph end with "… error: <it>"
        message, error_type = (text[after.end() :].strip() if after else text), TOOL_ERROR_RESULT
    else:
        return None
    if message and not _meaningful(message):  # "Error: none" reports that there is none
        return None
    return ToolError(message or text, error_type, "error_text")


def _content_text(content: Any) -> str:
    """The text of a result's content: a string, or the text blocks of a content list (MCP,
    LangChain) joined by lines."""
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    texts = (
        block if isinstance(block, str) else block.get("text")
        for block in content
        if isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")
    )
    return "\n".join(text.strip() for text in texts if isinstance(text, str) and text.strip())


def _meaningful(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().strip(".").lower() not in _NO_ERROR
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return bool(value)  # a non-empty object or list names something; None does not


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and _meaningful(value) else None


def _label(value: Any) -> str | None:
    """A value usable as ``error_type``: an op id-like label (one line, no surrounding blanks, at
    most 200 characters), so that taking it can never make the op invalid."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not _meaningful(value):
        return None
    label = value.strip()
    return label if len(label) <= MAX_ID_CHARS and label.isprintable() and _LABEL.fullmatch(label) else None


def _type_of(fields: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((label for key in keys if (label := _label(fields.get(key)))), None)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False)


__all__ = [
    "FAILURE_INFERRED",
    "MAX_PARSED_CHARS",
    "TOOL_ENDPOINT_PREFIX",
    "TOOL_ERROR_RESULT",
    "Rule",
    "ToolError",
    "is_tool_endpoint",
    "tool_error_of",
    "with_inferred_failure",
]
