"""API keys: required on every route except GET /health, checked in the API definition SAM generates."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure

OPEN_ROUTES = {("get", "/health")}
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "x-amazon-apigateway-any-method"}


@pytest.fixture(scope="module")
def api_body(transformed: dict[str, Any]) -> dict[str, Any]:
    api = transformed["Resources"]["OpsApi"]
    assert api["Type"] == "AWS::ApiGateway::RestApi"
    return api["Properties"]["Body"]


def _routes(body: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, item in body["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    }


def test_api_key_is_read_from_the_x_api_key_header(
    api_body: dict[str, Any], transformed: dict[str, Any]
) -> None:
    assert api_body["securityDefinitions"]["api_key"] == {
        "type": "apiKey",
        "name": "x-api-key",
        "in": "header",
    }
    source = transformed["Resources"]["OpsApi"]["Properties"].get("ApiKeySourceType", "HEADER")
    assert source == "HEADER"


def test_every_route_but_health_requires_an_api_key(
    api_body: dict[str, Any], functions: dict[str, Any]
) -> None:
    routes = _routes(api_body)
    declared = {
        (e["Properties"]["Method"].lower(), e["Properties"]["Path"])
        for props in functions.values()
        for e in props.get("Events", {}).values()
        if e["Type"] == "Api"
    }
    assert set(routes) == declared, "the generated API and the function events disagree"
    for route, operation in routes.items():
        keyed = any("api_key" in requirement for requirement in operation.get("security", []))
        assert keyed is (route not in OPEN_ROUTES), f"{route}: api key required = {keyed}"


def test_no_catch_all_route_bypasses_the_key(api_body: dict[str, Any]) -> None:
    assert not [p for p in api_body["paths"] if "{proxy+}" in p]
    assert not [r for r in _routes(api_body) if r[0] == "x-amazon-apigateway-any-method"]


def test_stage_traces_logs_access_and_does_not_cache(transformed: dict[str, Any]) -> None:
    stage = transformed["Resources"]["OpsApiStage"]["Properties"]
    assert stage["TracingEnabled"] is True
    assert stage["CacheClusterEnabled"] is False
    assert stage["AccessLogSetting"]["DestinationArn"] == {"Fn::GetAtt": ["OpsApiAccessLogs", "Arn"]}
    assert all(s["MetricsEnabled"] is True for s in stage["MethodSettings"])
    assert not any(s.get("DataTraceEnabled") for s in stage["MethodSettings"]), "would log request bodies"
    assert not any(s.get("CachingEnabled") for s in stage["MethodSettings"])
