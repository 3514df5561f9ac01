"""The observation middleware: every call, success or failure, becomes one op record."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

import opslake.ingest.observe as observe_module
from opslake.errors import BadRequestError, QueueError
from opslake.http.identity import KeyNameResolver
from opslake.http.responses import create_resolver
from opslake.ingest.observe import (
    SESSION_HEADER,
    TASK_CLASS_HEADER,
    TRACE_HEADER,
    Observer,
    build_record,
    observe,
    summarize,
    summarize_request,
)
from opslake.models import QueuedOp
from opslake.queue import OpsQueue

from ...conftest import api_event
from ...fakes import MemoryQueue


class BrokenQueue(OpsQueue):
    def send(self, messages):  # type: ignore[no-untyped-def]
        raise QueueError("the ops queue did not accept 1 record(s): ServiceUnavailable")


def make_app(queue: OpsQueue):
    app = observe(
        create_resolver(), Observer(lambda: queue, lambda: KeyNameResolver(lambda key_id: "agent-7"))
    )

    @app.post("/tool")
    def tool() -> dict:
        body = app.current_event.json_body
        if body.get("fail"):
            raise BadRequestError("column 'wrokers' cannot be resolved")
        if body.get("crash"):
            raise ZeroDivisionError("division by zero")
        summarize(app, "12 rows", table="workers")
        return {"rows": 12}

    return app


def call(app, body: dict, headers: dict[str, str] | None = None) -> dict:
    event = api_event("POST", "/tool", json.dumps(body), key_id="key-123")
    event["headers"] = {**(event.get("headers") or {}), **(headers or {})}
    return app.resolve(event, None)


def only_record(queue: MemoryQueue) -> QueuedOp:
    (message,) = queue.messages
    return QueuedOp.model_validate_json(message)


def test_success_is_recorded_with_identity_summary_and_attributes() -> None:
    queue = MemoryQueue()
    response = call(
        make_app(queue),
        {"q": "Bearer sekret-token-123"},
        {SESSION_HEADER: "s-1", TASK_CLASS_HEADER: "staffing"},
    )
    assert response["statusCode"] == 200
    op = only_record(queue)
    assert (op.endpoint, op.source, op.success) == ("/tool", "gateway", True)
    assert op.agent_id == op.reporter_id == "agent-7"
    assert op.output_summary == "12 rows" and op.attributes == {"http_status": "200", "table": "workers"}
    assert op.session_id == "s-1" and op.task_class == "staffing"
    assert op.input_summary is not None and op.input_summary.startswith("POST /tool")
    assert "sekret-token-123" not in op.to_message()
    assert op.duration_ms >= 0


def test_a_tool_error_is_a_failed_op_with_its_stable_code() -> None:
    queue = MemoryQueue()
    response = call(make_app(queue), {"fail": True})
    assert response["statusCode"] == 400
    assert json.loads(response["body"])["error"] == "bad_request"
    op = only_record(queue)
    assert op.success is False and op.error_type == "bad_request"
    assert op.error == "column 'wrokers' cannot be resolved"


def test_an_unexpected_exception_is_500_and_recorded_with_its_type() -> None:
    queue = MemoryQueue()
    response = call(make_app(queue), {"crash": True})
    assert response["statusCode"] == 500
    op = only_record(queue)
    assert op.error_type == "internal_error" and op.error == "ZeroDivisionError: division by zero"


def test_enqueue_failure_never_fails_the_call_and_logs_the_whole_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    response = call(make_app(BrokenQueue()), {"q": 1})
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"rows": 12}
    lost = [r for r in caplog.records if r.getMessage() == "op record not enqueued"]
    assert lost and lost[0].op_record["endpoint"] == "/tool"  # type: ignore[attr-defined]


def test_a_bad_optional_header_does_not_cost_the_record() -> None:
    queue = MemoryQueue()
    call(make_app(queue), {}, {SESSION_HEADER: "x" * 500})
    assert only_record(queue).session_id is None


def test_a_bad_optional_header_costs_only_itself() -> None:
    queue = MemoryQueue()
    headers = {SESSION_HEADER: "x" * 500, TRACE_HEADER: "trace-17", TASK_CLASS_HEADER: "billing"}
    call(make_app(queue), {}, headers)
    op = only_record(queue)
    assert (op.session_id, op.trace_id, op.task_class) == (None, "trace-17", "billing")


def test_build_record_marks_4xx_and_5xx_as_failures() -> None:
    common = dict(
        endpoint="/sql",
        reporter_id="a",
        started_at=datetime(2026, 11, 21, tzinfo=UTC),
        duration_ms=1.0,
        request_text="POST /sql",
        headers={},
        output_summary=None,
        attributes={},
    )
    ok = build_record(status=200, error_code=None, error_message=None, **common)  # type: ignore[arg-type]
    missing = build_record(status=404, error_code=None, error_message=None, **common)  # type: ignore[arg-type]
    assert ok.success and ok.output_summary == "HTTP 200"
    assert not missing.success and missing.error_type == "http_404"


def test_a_route_can_say_what_was_asked_instead_of_the_body_even_when_it_fails() -> None:
    """Issue 12: a route whose body the plain redaction cannot make safe (POST /log) gives the
    call's record its own request summary, set before anything can fail."""
    queue = MemoryQueue()
    app = observe(
        create_resolver(), Observer(lambda: queue, lambda: KeyNameResolver(lambda key_id: "agent-7"))
    )

    @app.post("/tool")
    def tool() -> dict:
        summarize_request(app, "POST /tool (body withheld)")
        if app.current_event.json_body.get("fail"):
            raise BadRequestError("refused")
        return {"ok": True}

    for body in ({"approach": "s3cr3t-value-123"}, {"approach": "s3cr3t-value-123", "fail": True}):
        queue.messages.clear()
        call(app, body)
        record = only_record(queue)
        assert record.input_summary == "POST /tool (body withheld)"
        assert "s3cr3t" not in record.model_dump_json()


def test_a_secret_in_the_session_header_keeps_sessions_apart_and_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 13: redacted to "[REDACTED]", two agents' sessions were one session in the lake."""
    counted: list[str] = []
    monkeypatch.setattr(
        observe_module.metrics, "add_metric", lambda name, unit, value: counted.extend([name] * int(value))
    )
    queue = MemoryQueue()
    secrets_ = ["ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "ghp_Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"]
    for secret in [*secrets_, secrets_[0]]:
        call(make_app(queue), {}, {SESSION_HEADER: f"s-{secret}"})
    sessions = [QueuedOp.model_validate_json(m).session_id for m in queue.messages]
    assert sessions[0] != sessions[1] and sessions[0] == sessions[2]
    assert all(s is not None and s.startswith("redacted-") for s in sessions)
    assert not any(secret in m for secret in secrets_ for m in queue.messages)
    assert counted.count("IdsRedacted") == 3


def test_a_route_decides_by_the_very_name_its_record_carries() -> None:
    """caller_name (the playbook holdout arms hash it): resolved once per call and reused by the record,
    even when the key-name lookup fails on the route's try and would succeed on the record's."""
    from opslake.ingest.observe import caller_name

    answers = iter([RuntimeError("GetApiKey throttled"), "agent-7", "agent-7"])

    def lookup(key_id: str) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    queue = MemoryQueue()
    resolver = KeyNameResolver(lookup)  # the container's one resolver: it caches names, not failures
    app = observe(create_resolver(), Observer(lambda: queue, lambda: resolver))
    seen: list[str] = []

    @app.post("/tool")
    def tool() -> dict:
        seen.extend([caller_name(app), caller_name(app)])
        return {}

    call(app, {})
    assert seen == ["key-123", "key-123"] and only_record(queue).reporter_id == "key-123"
    call(app, {})  # the next call: the lookup works, the route and the record say the name
    assert (
        seen[2:] == ["agent-7", "agent-7"]
        and QueuedOp.model_validate_json(queue.messages[1]).reporter_id == "agent-7"
    )
