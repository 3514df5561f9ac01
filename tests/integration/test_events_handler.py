"""POST /events and GET /health handlers, driven by API Gateway REST (v1) events, against moto."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest
from botocore.retries import standard as standard_retries
from moto.core.exceptions import JsonRESTError
from moto.sqs.responses import SQSResponse

from opslake.models import QueuedOp

from ..conftest import api_event, load_event, shared_fixture
from .conftest import Aws

OP = {"endpoint": "tool:query_db", "success": False, "duration_ms": 812.5, "error": "Bearer abc123secret"}


@pytest.fixture
def events(aws: Aws, load_handler):
    return load_handler("functions/observer/events.py", **aws.env())


def call(module, event: dict[str, Any], context) -> tuple[int, dict[str, str], dict[str, Any]]:
    response = module.handler(event, context)
    headers = dict(response.get("headers") or {})
    headers.update({name: values[-1] for name, values in (response.get("multiValueHeaders") or {}).items()})
    return response["statusCode"], headers, json.loads(response["body"])


def queued(aws: Aws) -> list[QueuedOp]:
    return [QueuedOp.model_validate_json(record) for record in aws.receive_records()]


def test_sample_event_is_accepted_and_enqueued_with_the_key_name(aws: Aws, events, lambda_context) -> None:
    event = load_event("events_post_single.json")
    event["requestContext"]["identity"]["apiKeyId"] = aws.key_id
    status, headers, body = call(events, event, lambda_context)
    assert status == 202, body
    assert headers["Content-Type"] == "application/json"
    (op,) = queued(aws)
    assert body["accepted"] == [op.op_id]
    assert op.reporter_id == "runtime-alpha" and op.agent_id == "agent-7"
    assert op.error == 'column "wrokers" does not exist'


def test_published_fixture_shape_is_handled(aws: Aws, events, lambda_context) -> None:
    base = shared_fixture("apiGatewayProxyEvent.json")
    if base is None:
        pytest.skip("../shared/fixtures/aws-events/ is not beside this clone (it is in CI)")
    event = api_event("POST", "/events", json.dumps(OP), key_id=aws.key_id, base=base)
    status, _, body = call(events, event, lambda_context)
    assert status == 202, body
    (op,) = queued(aws)
    assert "abc123secret" not in op.to_message()


def test_batch_with_invalid_ops_answers_each(aws: Aws, events, lambda_context) -> None:
    status, _, body = call(events, load_event("events_post_batch.json"), lambda_context)
    assert status == 202
    assert len(body["accepted"]) == len(queued(aws)) == 2
    (rejected,) = body["rejected"]
    assert rejected["index"] == 2 and "duration_ms" in rejected["message"]


def test_base64_body_is_decoded(aws: Aws, events, lambda_context) -> None:
    event = api_event(
        "POST", "/events", base64.b64encode(json.dumps(OP).encode()).decode(), key_id=aws.key_id
    )
    event["isBase64Encoded"] = True
    assert call(events, event, lambda_context)[0] == 202


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ("{oops", 400, "malformed_json"),
        (json.dumps({"ops": [{"endpoint": "/x"}]}), 400, "invalid_ops"),
        (json.dumps({"ops": [OP] * 501}), 413, "payload_too_large"),
        (json.dumps({**OP, "input_summary": "x" * 1_100_000}), 413, "payload_too_large"),
    ],
)
def test_client_errors_are_4xx_with_a_message_and_nothing_enqueued(
    aws: Aws, events, lambda_context, body: str, status: int, error: str
) -> None:
    got, _, payload = call(events, api_event("POST", "/events", body, key_id=aws.key_id), lambda_context)
    assert (got, payload["error"]) == (status, error)
    assert payload["message"]
    assert queued(aws) == []


def test_a_tool_op_that_claims_success_with_an_error_result_is_queued_failed(
    aws: Aws, events, lambda_context
) -> None:
    """The seed's rule (``if (data.error) success = false``) for a runtime's own report: the op is
    queued failed and marked, its error and type from the result; a model op is left as it was."""
    mcp = {
        "content": [{"type": "text", "text": "worker id must be W followed by five digits"}],
        "structuredContent": {"error": "bad_request", "message": "worker id must be W…"},
        "isError": True,
    }
    body = {"ops": [
        {"op_id": "tool-1", "endpoint": "tool:get_worker", "success": True, "duration_ms": 40.0,
         "output_summary": json.dumps(mcp)},
        {"op_id": "model-1", "endpoint": "model:gpt-4o-mini", "success": True, "duration_ms": 900.0,
         "output_summary": "Error: the worker id was wrong, asking again"},
    ]}  # fmt: skip
    status, _, payload = call(
        events, api_event("POST", "/events", json.dumps(body), key_id=aws.key_id), lambda_context
    )
    assert status == 202 and payload["accepted"] == ["tool-1", "model-1"]
    ops = {op.op_id: op for op in queued(aws)}
    tool, model = ops["tool-1"], ops["model-1"]
    assert (tool.success, tool.error, tool.error_type) == (
        False,
        "worker id must be W followed by five digits",
        "bad_request",
    )
    assert tool.attributes == {"opslake.failure_inferred": "is_error"}
    assert model.success is True and model.error is None and model.attributes == {}


def test_missing_key_identity_is_403(aws: Aws, events, lambda_context) -> None:
    status, _, payload = call(
        events, api_event("POST", "/events", json.dumps(OP), key_id=None), lambda_context
    )
    assert status == 403 and "x-api-key" in payload["message"]


def test_unknown_key_id_falls_back_to_the_id(aws: Aws, events, lambda_context) -> None:
    status, _, _ = call(
        events, api_event("POST", "/events", json.dumps(OP), key_id="deleted-key"), lambda_context
    )
    assert status == 202
    assert queued(aws)[0].reporter_id == "deleted-key"


def test_queue_failure_is_503_with_retry_after_and_nothing_listed(
    aws: Aws, load_handler, lambda_context
) -> None:
    events = load_handler(
        "functions/observer/events.py",
        **{**aws.env(), "OPSLAKE_OPS_QUEUE_URL": aws.queue_url.replace("opslake-ops", "missing-queue")},
    )
    status, headers, payload = call(
        events, api_event("POST", "/events", json.dumps(OP), key_id=aws.key_id), lambda_context
    )
    assert status == 503 and headers["Retry-After"] == "5"
    assert payload["detail"]["accepted"] == []


def test_transient_queue_errors_are_retried(
    aws: Aws, events, lambda_context, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQS throttles the first two requests; botocore's standard retries (not a loop of ours) absorb it
    injected = {"n": 0}
    send_message_batch = SQSResponse.send_message_batch

    def throttled(self: SQSResponse) -> Any:
        injected["n"] += 1
        if injected["n"] <= 2:
            raise JsonRESTError("ThrottlingException", "Rate exceeded")
        return send_message_batch(self)

    monkeypatch.setattr(SQSResponse, "send_message_batch", throttled)
    monkeypatch.setattr(standard_retries.ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    status, _, body = call(
        events, api_event("POST", "/events", json.dumps(OP), key_id=aws.key_id), lambda_context
    )
    assert status == 202 and injected["n"] == 3
    assert [op.op_id for op in queued(aws)] == body["accepted"]


def test_health_needs_no_key_and_touches_no_aws(load_handler, lambda_context) -> None:
    health = load_handler("functions/observer/health.py")
    response = health.handler(load_event("health_get.json"), lambda_context)
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert body["status"] == "ok" and body["version"]


# ---- bodies that used to crash the handler (issue 12): each is a 4xx that says why ----------------
def binary_event(aws: Aws, raw: bytes, **headers: str) -> dict[str, Any]:
    """The event API Gateway sends for a body that is not text: base64, with isBase64Encoded."""
    event = api_event("POST", "/events", base64.b64encode(raw).decode(), key_id=aws.key_id)
    event["isBase64Encoded"] = True
    event["headers"].update(headers)
    event["multiValueHeaders"].update({k: [v] for k, v in headers.items()})
    return event


def deep(levels: int, leaf: Any = 1) -> str:
    return "[" * levels + json.dumps(leaf) + "]" * levels


BAD_BODIES = {
    "array nested 1,000 deep": (deep(1000).encode(), {}, 400, "json_too_deep"),
    "op nested 100,000 deep": (
        ('{"endpoint": "/x", "attributes": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001).encode(),
        {},
        400,
        "json_too_deep",
    ),
    "invalid UTF-8": (b'{"endpoint": "tool:\xff\xfe", "success": true}', {}, 400, "invalid_encoding"),
    "UTF-16": (json.dumps(OP).encode("utf-16"), {}, 400, "invalid_encoding"),
    "gzip": (
        gzip.compress(json.dumps(OP).encode()),
        {"Content-Encoding": "gzip"},
        415,
        "unsupported_media_type",
    ),
    "gzip without its header": (gzip.compress(json.dumps(OP).encode()), {}, 400, "invalid_encoding"),
    "text/plain": (json.dumps(OP).encode(), {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    "a form": (b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
}


@pytest.mark.parametrize(("raw", "headers", "status", "error"), BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_undecodable_or_too_deep_bodies_are_4xx_that_say_why(
    aws: Aws, events, lambda_context, raw: bytes, headers: dict[str, str], status: int, error: str
) -> None:
    got, _, payload = call(events, binary_event(aws, raw, **headers), lambda_context)
    assert (got, payload["error"]) == (status, error), payload
    assert payload["message"]
    assert queued(aws) == []


def test_a_text_body_that_is_not_utf8_is_a_400(aws: Aws, events, lambda_context) -> None:
    event = api_event("POST", "/events", '{"endpoint": "tool:\ud800"}', key_id=aws.key_id)
    got, _, payload = call(events, event, lambda_context)
    assert (got, payload["error"]) == (400, "invalid_encoding") and "UTF-8" in payload["message"]


@pytest.mark.parametrize("content_type", [None, "application/json; charset=utf-8", "application/vnd.x+json"])
def test_json_or_missing_content_types_are_accepted(
    aws: Aws, events, lambda_context, content_type: str | None
) -> None:
    event = api_event("POST", "/events", json.dumps(OP), key_id=aws.key_id)
    for headers in (event["headers"], event["multiValueHeaders"]):
        headers.pop("Content-Type")
        if content_type:
            headers["content-type"] = content_type if headers is event["headers"] else [content_type]
    assert call(events, event, lambda_context)[0] == 202


def test_an_op_nested_within_the_limit_is_rejected_alone(aws: Aws, events, lambda_context) -> None:
    nested = {**OP, "attributes": json.loads(deep(30))}
    body = json.dumps({"ops": [OP, nested, OP]})
    status, _, payload = call(events, api_event("POST", "/events", body, key_id=aws.key_id), lambda_context)
    assert status == 202 and len(payload["accepted"]) == len(queued(aws)) == 2
    assert [r["index"] for r in payload["rejected"]] == [1]
