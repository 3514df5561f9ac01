"""The OpenAPI document's content: the tools' inputs as MCP describes them, the one error body, the
server URL a request was made to, and the registry's guards against a route described wrongly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from opslake import errors
from opslake.http import openapi
from opslake.http.openapi import ErrorBody, Operation, Parameter, openapi_document, server_url
from opslake.tools.mcp.registry import TOOLS

pytestmark = pytest.mark.unit

EVENTS = Path(__file__).resolve().parents[3] / "events"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document()


def component_validator(document: dict[str, Any], name: str) -> Draft202012Validator:
    """A validator of ``components/schemas/<name>``, its $refs resolved in the document."""
    return Draft202012Validator({**document, "$ref": f"#/components/schemas/{name}"})


def as_components(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's own JSON Schema with its $defs referenced as components (as the document has them)."""
    text = json.dumps({k: v for k, v in schema.items() if k != "$defs"})
    return json.loads(text.replace('"#/$defs/', '"#/components/schemas/'))


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_each_tool_takes_over_rest_what_its_mcp_tool_takes(document: dict[str, Any], tool: Any) -> None:
    operation = document["paths"][tool.route][tool.method.lower()]
    assert operation["operationId"] == tool.name
    expected = tool.input_schema()
    if tool.arguments_as == "body":
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        component = document["components"]["schemas"][ref.rpartition("/")[2]]
        assert component == as_components(expected)
        for name, definition in expected.get("$defs", {}).items():
            assert document["components"]["schemas"][name] == as_components(definition)
    else:
        where = {"path": "path", "query": "query", "none": None}[tool.arguments_as]
        parameters = {p["name"]: p for p in operation.get("parameters", [])}
        assert set(parameters) == set(expected.get("properties", {}))
        assert all(p["in"] == where for p in parameters.values())
        assert {n for n, p in parameters.items() if p["required"]} == set(expected.get("required", ())) | (
            set(parameters) if where == "path" else set()
        )
        assert "requestBody" not in operation


def test_a_query_parameter_is_never_null(document: dict[str, Any]) -> None:
    """``q: str | None = None`` is a parameter that may be absent; a query string has no null."""
    (q,) = [p for p in document["paths"]["/playbooks"]["get"]["parameters"] if p["name"] == "q"]
    assert q["schema"] == {"type": "string", "minLength": 1, "maxLength": 200}
    assert q["required"] is False and q["description"]


@pytest.mark.parametrize(
    "error",
    [
        errors.BadRequestError("the body is not JSON"),
        errors.InvalidOpsError("2 ops are invalid", detail={"rejected": [{"index": 0}]}),
        errors.NotFoundError("no table 'x'", detail={"tables": ["workers"]}),
        errors.ServiceUnavailableError("retry", retry_after_s=3),
        errors.SqlRejectedError("only SELECT"),
        errors.InternalError("failed"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_error_body_is_what_the_document_says(document: dict[str, Any], error: Any) -> None:
    status, body, _ = errors.error_response_parts(error)
    ErrorBody.model_validate(body)
    component_validator(document, "Error").validate(body)
    assert status >= 400


def test_the_error_schema_refuses_a_body_of_another_shape(document: dict[str, Any]) -> None:
    validator = component_validator(document, "Error")
    assert not validator.is_valid({"message": "no code"})
    assert not validator.is_valid({"error": "x", "message": "y", "extra": 1})


def test_every_route_but_health_needs_the_key_and_says_what_api_gateway_answers(
    document: dict[str, Any],
) -> None:
    for path, item in document["paths"].items():
        for operation in item.values():
            keyed = operation["security"] == [{"api_key": []}]
            assert keyed is (path != "/health")
            assert ("403" in operation["responses"]) is keyed
            assert "default" in operation["responses"]


def test_the_events_body_is_one_op_or_a_batch_of_at_most_500(document: dict[str, Any]) -> None:
    from opslake.ingest.events import MAX_OPS_PER_REQUEST

    validator = component_validator(document, "EventsBody")
    op = {"endpoint": "tool:query_db", "success": False, "duration_ms": 4.5}
    assert validator.is_valid(op)
    assert validator.is_valid({"ops": [op, op]})
    assert not validator.is_valid({"ops": [op] * (MAX_OPS_PER_REQUEST + 1)})


def test_server_url_of_an_api_gateway_event_includes_the_stage() -> None:
    event = json.loads((EVENTS / "openapi_get.json").read_text())
    assert server_url(event) == "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/dev"


@pytest.mark.parametrize(
    ("headers", "context_path", "path", "expected"),
    [
        (
            {"Host": "api.example.com", "X-Forwarded-Proto": "https"},
            "/v1/stats",
            "/stats",
            "https://api.example.com/v1",
        ),
        (
            {"Host": "api.example.com", "X-Forwarded-Proto": "https"},
            "/stats",
            "/stats",
            "https://api.example.com",
        ),
        ({"host": "127.0.0.1:8787"}, "/openapi.json", "/openapi.json", "http://127.0.0.1:8787"),
        ({}, "/dev/stats", "/stats", None),
    ],
    ids=["custom domain, base path", "custom domain at the root", "local stack", "no host"],
)
def test_server_url_is_where_the_client_called(
    headers: dict[str, str], context_path: str, path: str, expected: str | None
) -> None:
    event = {"headers": headers, "path": path, "requestContext": {"path": context_path}}
    assert server_url(event) == expected


def test_each_document_is_a_copy_with_its_own_server() -> None:
    first = openapi_document("https://a.example/dev")
    first["paths"].clear()
    second = openapi_document()
    assert second["paths"] and "servers" not in second
    assert openapi_document("https://b.example")["servers"] == [{"url": "https://b.example"}]


# ---- the registry's guards: a route described wrongly fails to build, never serves a wrong document
def _listed(monkeypatch: pytest.MonkeyPatch, *extra: Operation) -> None:
    """Build documents from ``extra`` and the tools, uncached, for the rest of the test."""
    monkeypatch.setattr(openapi, "_observer_operations", lambda: extra)
    uncached = getattr(openapi._document, "__wrapped__", openapi._document)
    monkeypatch.setattr(openapi, "_document", uncached)


def test_a_path_parameter_left_undescribed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _listed(monkeypatch, Operation("GET", "/things/{thing}", "get_thing", "a thing", "x"))
    with pytest.raises(ValueError, match=r"/things/\{thing\}"):
        openapi_document()


def test_a_route_listed_twice_or_an_mcp_route_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    health = Operation("GET", "/x", "x", "x", "x")
    _listed(monkeypatch, health, health)
    with pytest.raises(ValueError, match="GET /x"):
        openapi_document()
    _listed(monkeypatch, Operation("POST", "/mcp", "mcp", "mcp", "x"))
    with pytest.raises(ValueError, match="POST /mcp"):
        openapi_document()


def test_a_tool_without_its_rest_answers_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = dict(openapi.TOOL_ANSWERS)
    del answers["sql"]
    monkeypatch.setattr(openapi, "TOOL_ANSWERS", answers)
    _listed(monkeypatch)
    with pytest.raises(ValueError, match="sql"):
        openapi_document()


def test_a_described_path_parameter_is_listed_as_required(monkeypatch: pytest.MonkeyPatch) -> None:
    thing = Parameter("thing", "path", {"type": "string"}, "which thing")
    _listed(
        monkeypatch, Operation("GET", "/things/{thing}", "get_thing", "a thing", "x", parameters=(thing,))
    )
    (parameter,) = openapi_document()["paths"]["/things/{thing}"]["get"]["parameters"]
    assert parameter == {"name": "thing", "in": "path", "required": True, "description": "which thing",
                         "schema": {"type": "string"}}  # fmt: skip


def test_a_served_playbook_entry_is_what_the_document_says(document: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    from opslake.models.playbooks import PlaybookEntry

    entry = PlaybookEntry(
        entry_id="pb_sql", trigger="SQL question over workers", action="Describe the table first", kind="do",
        confidence=0.5, domain="sql", endpoint="/sql", status="active", created_at=datetime(2026, 11, 1, tzinfo=UTC),
        evidence_op_ids=[f"op-{i}" for i in range(8)],
    )  # fmt: skip
    served = entry.served()
    operation = document["paths"]["/playbooks"]["get"]["responses"]["200"]["content"]
    ref = operation["application/json"]["schema"]["$ref"]
    validator = Draft202012Validator({**document, "$ref": ref})
    validator.validate({"entries": [served], "generated_at": "2026-11-01T00:00:00+00:00"})
    assert not validator.is_valid({"entries": [served | {"kind": "maybe"}], "generated_at": None})
    assert not validator.is_valid(
        {"entries": [served | {"evidence_op_ids": ["x"] * 6}], "generated_at": None}
    )
    assert "text/markdown" in operation
