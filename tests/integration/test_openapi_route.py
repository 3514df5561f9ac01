"""GET /openapi.json through the local stack: keyed like every route but /health, it is the document
the code builds, its server is where the client called, and the answers of the routes it lists
(successes and errors) are what it says they are."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from opslake.http.openapi import openapi_document
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Local = tuple[LocalStack, httpx.Client, Drainer]


def _key(local: Local) -> dict[str, str]:
    stack = local[0]
    assert stack.api_key is not None
    return {"x-api-key": stack.api_key.value}


@pytest.fixture(scope="module")
def served(local: Local) -> dict[str, Any]:
    answer = local[1].get("/openapi.json", headers=_key(local))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    document: dict[str, Any] = answer.json()
    return document


def _check(document: dict[str, Any], method: str, path: str, answer: httpx.Response) -> None:
    """The answer's body against the document's schema for that route and status (JSON only)."""
    responses = document["paths"][path][method]["responses"]
    described = responses.get(str(answer.status_code), responses["default"])
    schema = described["content"]["application/json"]["schema"]
    Draft202012Validator({**document, **schema}).validate(answer.json())


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong-key-" + "0" * 30}], ids=["no key", "wrong key"])
def test_the_document_needs_the_api_key(local: Local, headers: dict[str, str]) -> None:
    answer = local[1].get("/openapi.json", headers=headers)
    assert answer.status_code == 403
    assert answer.json() == {"message": "Forbidden"}


def test_it_is_the_document_the_code_builds_with_the_url_the_client_called(
    local: Local, served: dict[str, Any]
) -> None:
    base = str(local[1].base_url).rstrip("/")
    assert served["servers"] == [{"url": base}]
    assert served == openapi_document(base)


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("get", "/health", None, 200),
        ("get", "/stats", None, 200),
        ("get", "/tables", None, 200),
        ("get", "/model", None, 200),
        ("get", "/playbooks?limit=5", None, 200),
        ("get", "/playbooks?limit=0", None, 400),
        ("post", "/events", {"endpoint": "tool:query_db", "success": True, "duration_ms": 3.5}, 202),
        ("post", "/log", {"operation": "probe", "approach": "read the docs", "result": "lesson"}, 202),
        ("post", "/sql", {"sql": "SELECT count(*) AS n FROM ops"}, 200),
        ("post", "/sql", {"sql": ""}, 400),
        ("get", "/stats?hours=0", None, 400),
        ("get", "/tables/no_such_table", None, 404),
    ],
)
def test_a_client_reading_only_the_document_gets_the_answers_it_describes(
    local: Local, served: dict[str, Any], method: str, path: str, body: Any, status: int
) -> None:
    url = served["servers"][0]["url"] + path
    answer = local[1].request(method.upper(), url, json=body, headers=_key(local))
    assert answer.status_code == status, answer.text
    route = path.partition("?")[0]
    route = "/tables/{name}" if route.startswith("/tables/") else route
    _check(served, method, route, answer)
