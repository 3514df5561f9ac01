"""Failures a tool's result reports while its op claims success (opslake.ingest.tool_errors): the
rule on the result shapes frameworks really answer, what it does not take for an error, and what a
``POST /events`` op becomes (failed, marked, error and type filled, redacted and cut like any op).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from opslake.ingest.events import ingest
from opslake.ingest.tool_errors import (
    FAILURE_INFERRED,
    MAX_PARSED_CHARS,
    TOOL_ERROR_RESULT,
    ToolError,
    tool_error_of,
    with_inferred_failure,
)
from opslake.models.ops import MAX_ATTRIBUTES, MAX_ERROR_CHARS, TRUNCATION_MARK, OpInput, QueuedOp

from ...fakes import MemoryQueue

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # MCP CallToolResult: tool execution errors are reported in the result with isError
        (
            {"content": [{"type": "text", "text": "worker id must be W followed by five digits"}],
             "isError": True},
            ToolError("worker id must be W followed by five digits", TOOL_ERROR_RESULT, "is_error"),
        ),
        # opslake's own MCP answer: the text the model read, typed by the structured error object
        (
            json.dumps({"content": [{"type": "text", "text": "no worker W00042"}],
                        "structuredContent": {"error": "not_found", "message": "no worker W00042"},
                        "isError": True}),
            ToolError("no worker W00042", "not_found", "is_error"),
        ),
        # an Anthropic tool_result block
        (
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "file not found", "is_error": True},
            ToolError("file not found", TOOL_ERROR_RESULT, "is_error"),
        ),
        # a LangChain ToolMessage (handle_tool_error=True) as OpenInference records the tool's output
        (
            json.dumps({"content": "Invalid date: 2026-13-01", "additional_kwargs": {}, "response_metadata": {},
                        "type": "tool", "name": "book", "id": None, "tool_call_id": "call_1", "artifact": None,
                        "status": "error"}),
            ToolError("Invalid date: 2026-13-01", TOOL_ERROR_RESULT, "tool_message"),
        ),
        # the seed's shape: a top-level error string
        (
            '{"error": "column \\"wrokers\\" does not exist"}',
            ToolError('column "wrokers" does not exist', TOOL_ERROR_RESULT, "error_field"),
        ),
        # a code and a message (opslake's gateway errors); a code alone (Slack's {"ok": false})
        (
            {"error": "not_found", "message": "no worker W00042"},
            ToolError("no worker W00042", "not_found", "error_field"),
        ),
        ({"ok": False, "error": "channel_not_found"}, ToolError("channel_not_found", "channel_not_found", "error_field")),
        # an error object: OpenAI's {"error": {"message", "type", "code"}}, Google's numeric code
        (
            {"error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error",
                       "param": None, "code": "model_not_found"}},
            ToolError("The model `gpt-9` does not exist", "invalid_request_error", "error_field"),
        ),
        (
            {"error": {"code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND"}},
            ToolError("Requested entity was not found.", "404", "error_field"),
        ),
        ({"error": True, "message": "rate limited", "code": "E429"}, ToolError("rate limited", "E429", "error_field")),
        # text: LangGraph's ToolNode templates, Postgres, an exception printed as text
        (
            "Error: ValueError('city is required')\n Please fix your mistakes.",
            ToolError("ValueError('city is required')\n Please fix your mistakes.", TOOL_ERROR_RESULT, "error_text"),
        ),
        (
            "Error: search_web is not a valid tool, try one of [query_db].",
            ToolError("search_web is not a valid tool, try one of [query_db].", TOOL_ERROR_RESULT, "error_text"),
        ),
        (
            "Error executing tool 'query_db' with kwargs {'sql': 'SELECT'} with error:\n syntax error at end\n"
            " Please fix the error and try again.",
            ToolError("syntax error at end\n Please fix the error and try again.", TOOL_ERROR_RESULT, "error_text"),
        ),
        (
            'ERROR:  relation "wrokers" does not exist',
            ToolError('relation "wrokers" does not exist', TOOL_ERROR_RESULT, "error_text"),
        ),
        (
            "TypeError: Cannot read properties of undefined",
            ToolError("Cannot read properties of undefined", "TypeError", "error_text"),
        ),
        (
            "requests.exceptions.HTTPError: 503 Server Error",
            ToolError("503 Server Error", "requests.exceptions.HTTPError", "error_text"),
        ),
        ("Exception: boom", ToolError("boom", "Exception", "error_text")),
        # the OpenAI Agents SDK's default_tool_error_function, as a runtime's hook receives it
        (
            "An error occurred while running the tool. Please try again. Error: division by zero",
            ToolError("division by zero", TOOL_ERROR_RESULT, "error_text"),
        ),
        # a JSON string holding such text (an instrumentation that json.dumps every result)
        (json.dumps("Error: timed out"), ToolError("timed out", TOOL_ERROR_RESULT, "error_text")),
        ("  Error:", ToolError("Error:", TOOL_ERROR_RESULT, "error_text")),  # says error, names none
    ],
)  # fmt: skip
def test_error_results_are_found_with_their_message_and_type(result: Any, expected: ToolError) -> None:
    assert tool_error_of(result) == expected


@pytest.mark.parametrize(
    "result",
    [
        {"error": None}, {"error": ""}, {"error": "  "}, {"error": False}, {"error": 0}, {"error": {}},
        {"error": []}, {"error": "none"}, {"error": "None"}, {"error": "null"}, {"error": "OK"},
        {"error": {"message": None, "code": 0}},  # an error object that names nothing
        {"errors": []}, {"errors": [{"message": "field x"}], "data": {"x": None}},  # GraphQL partial data
        {"error_rate": 0.2}, {"errorCount": 3}, {"rows": 3},
        {"status": "ok", "data": {"error": "x"}},  # nested: what the tool found, not the call
        {"status": "error", "job": "nightly"},  # a job's status the tool reported
        {"content": [{"type": "text", "text": "Error: x"}], "isError": False},  # MCP's own word
        {"content": [{"type": "text", "text": "Error: x"}]},  # isError absent: success, per the spec
        {"isError": False, "error": "x"},
        {"type": "tool", "status": "success", "content": "Error: in the text only"},  # LangChain's word
        "No error found", "3 errors in the log", "error_rate: 0.2", "Errors: 0", "Terror: a novel",
        "Error: none", "error: null", "The Error: heading is quoted later",
        "", "   ", '{"error": "cut', '"not json', "[1, 2]", '[{"error": "x"}]', '"just text"',
        42, None, True, ["Error: x"],
        "{" + " " * MAX_PARSED_CHARS + '"error": "x"}',  # too long to parse again
        "[" * 5_000 + "]" * 5_000, '{"a":' * 5_000 + "1" + "}" * 5_000,  # nesting cannot crash it
    ],
)  # fmt: skip
def test_what_is_not_an_error(result: Any) -> None:
    assert tool_error_of(result) is None


def test_a_type_that_could_not_be_an_op_label_is_not_taken() -> None:
    # error_type must stay a valid label (one line, at most 200 characters): else the default
    assert tool_error_of({"error": {"message": "m", "type": "two\nlines"}}) == ToolError(
        "m", TOOL_ERROR_RESULT, "error_field"
    )
    assert tool_error_of({"error": {"message": "m", "code": "c" * 201}}) == ToolError(
        "m", TOOL_ERROR_RESULT, "error_field"
    )
    assert tool_error_of({"error": True}) == ToolError('{"error":true}', TOOL_ERROR_RESULT, "error_field")


# ---- POST /events ------------------------------------------------------------------------------
def tool_op(**fields: Any) -> dict[str, Any]:
    return {"endpoint": "tool:query_db", "success": True, "duration_ms": 12.5, **fields}


def stored(*ops: dict[str, Any]) -> list[QueuedOp]:
    queue = MemoryQueue()
    result = ingest(json.dumps({"ops": list(ops)}), reporter_id="runtime-a", queue=queue, received_at=NOW)
    assert not result.rejected, result.rejected
    return [QueuedOp.model_validate_json(message) for message in queue.messages]


def test_a_tool_op_claiming_success_with_an_error_result_is_stored_failed_and_marked() -> None:
    (op,) = stored(tool_op(output_summary='{"error": {"message": "permission denied", "code": "EACCES"}}'))
    assert (op.success, op.error, op.error_type) == (False, "permission denied", "EACCES")
    assert op.attributes[FAILURE_INFERRED] == "error_field"
    assert op.output_summary == '{"error": {"message": "permission denied", "code": "EACCES"}}'


def test_what_the_op_states_is_kept_and_only_tool_ops_are_judged() -> None:
    result = '{"error": "boom"}'
    stated, failed, model, agent, plain = stored(
        tool_op(output_summary=result, error="the db proxy refused", error_type="ProxyError"),
        tool_op(output_summary=result, success=False, error="timeout", error_type="Timeout"),
        tool_op(endpoint="model:gpt-4o", output_summary="Error: the tool said no, so I stopped"),
        tool_op(endpoint="agent:planner", output_summary=result),
        tool_op(output_summary="No error found in 3 files", attributes={"files": 3}),
    )
    # a runtime that named the error but forgot success=false describes its failure best
    assert (stated.success, stated.error, stated.error_type) == (False, "the db proxy refused", "ProxyError")
    assert stated.attributes == {FAILURE_INFERRED: "error_field"}
    # an op that failed already keeps its own words and is not marked
    assert (failed.success, failed.error, failed.error_type) == (False, "timeout", "Timeout")
    assert failed.attributes == {}
    for untouched in (model, agent):
        assert untouched.success is True and untouched.error is None and untouched.attributes == {}
    assert plain.success is True and plain.attributes == {"files": "3"}


def test_the_inferred_error_is_redacted_and_cut_like_any_error() -> None:
    secret = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    long_message = "x" * (MAX_ERROR_CHARS + 500)
    redacted, cut = stored(
        tool_op(output_summary=json.dumps({"error": f"auth failed for token {secret}"})),
        tool_op(output_summary=json.dumps({"error": long_message})),
    )
    assert redacted.success is False and secret not in redacted.to_message()
    assert redacted.error is not None and redacted.error.startswith("auth failed for token ")
    assert cut.error is not None and len(cut.error) == MAX_ERROR_CHARS and cut.error.endswith(TRUNCATION_MARK)
    assert cut.truncated is True


def test_an_op_with_no_room_for_the_marker_keeps_its_claim() -> None:
    full = {f"k{i}": i for i in range(MAX_ATTRIBUTES)}
    one_free = {f"k{i}": i for i in range(MAX_ATTRIBUTES - 1)}
    kept, marked = stored(
        tool_op(output_summary='{"error": "boom"}', attributes=full),
        tool_op(output_summary='{"error": "boom"}', attributes=one_free),
    )
    assert kept.success is True and FAILURE_INFERRED not in kept.attributes
    assert marked.success is False and len(marked.attributes) == MAX_ATTRIBUTES
    assert marked.attributes[FAILURE_INFERRED] == "error_field"


def test_a_client_cannot_send_the_marker_itself() -> None:
    queue = MemoryQueue()
    result = ingest(
        json.dumps({"ops": [tool_op(attributes={FAILURE_INFERRED: "true"}, success=False), tool_op()]}),
        reporter_id="runtime-a",
        queue=queue,
        received_at=NOW,
    )
    assert len(result.accepted) == 1 and [r.index for r in result.rejected] == [0]
    assert f"attributes.{FAILURE_INFERRED} is set by the server" in result.rejected[0].message


def test_with_inferred_failure_leaves_other_ops_as_they_were() -> None:
    op = OpInput.model_validate(tool_op(output_summary="12 rows"))
    assert with_inferred_failure(op) is op
    no_result = OpInput.model_validate(tool_op())
    assert with_inferred_failure(no_result) is no_result
