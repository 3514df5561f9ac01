"""The OpenAPI document lists exactly the REST routes of template.yaml, which are exactly the routes
the handlers' resolvers declare, and it is a valid OpenAPI 3.1 document whose API key matches the
API SAM generates.

The handlers are read with ast (never imported: importing them needs each function's environment).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from opslake.http.openapi import API_KEY_HEADER, NOT_REST, openapi_document, operations

pytestmark = pytest.mark.infrastructure

Route = tuple[str, str]
_METHODS = {"get", "post", "put", "patch", "delete", "head", "options"}
# Powertools writes a path parameter <name>, API Gateway {name}; the names may differ (<worker_id>
# answers {id}: the handler reads pathParameters), so routes compare with parameters unnamed.
_PARAMETER = re.compile(r"<[^>]+>|\{[^}]+\}")


def unnamed(path: str) -> str:
    return _PARAMETER.sub("{}", path)


def template_routes(functions: dict[str, dict[str, Any]]) -> dict[Route, str]:
    """(METHOD, path) -> the function whose Api event it is."""
    routes: dict[Route, str] = {}
    for name, props in functions.items():
        for event in props.get("Events", {}).values():
            if event["Type"] == "Api":
                route = (event["Properties"]["Method"].upper(), event["Properties"]["Path"])
                assert route not in routes, f"{route} is the event of two functions"
                routes[route] = name
    return routes


def resolver_routes(source: str) -> set[Route]:
    """The routes a handler module's ``@app.<method>("<path>")`` decorators declare."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if (
                isinstance(decorator, ast.Call)
                and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr in _METHODS
                and isinstance(decorator.func.value, ast.Name)
                and decorator.func.value.id == "app"
                and decorator.args
                and isinstance(decorator.args[0], ast.Constant)
            ):
                found.add((decorator.func.attr.upper(), str(decorator.args[0].value)))
    return found


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document("https://api.example.com/dev")


def document_routes(document: dict[str, Any]) -> set[Route]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def test_the_document_lists_every_rest_route_of_the_template_and_no_other(
    document: dict[str, Any], functions: dict[str, dict[str, Any]]
) -> None:
    declared = set(template_routes(functions))
    listed = document_routes(document)
    assert declared - listed - NOT_REST == set(), "routes of template.yaml missing from the document"
    assert listed - declared == set(), "routes in the document that template.yaml does not serve"
    assert declared >= NOT_REST, "NOT_REST names a route template.yaml no longer has"
    assert not NOT_REST & listed


def test_every_template_route_is_declared_by_its_handlers_resolver(
    functions: dict[str, dict[str, Any]], project_root: Path
) -> None:
    """What the template sends a function is what its resolver serves, and nothing more: a route
    added to a handler but not to the template (or the document) fails here."""
    by_function: dict[str, set[Route]] = {}
    for route, function in template_routes(functions).items():
        by_function.setdefault(function, set()).add(route)
    for function, routes in by_function.items():
        props = functions[function]
        module = props["Handler"].rpartition(".")[0]
        source = (project_root / props["CodeUri"] / f"{module}.py").read_text(encoding="utf-8")
        served = {(m, unnamed(p)) for m, p in resolver_routes(source)}
        assert served == {(m, unnamed(p)) for m, p in routes}, function


def test_path_parameters_are_named_as_in_the_template(document: dict[str, Any]) -> None:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            named = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert named == set(re.findall(r"\{([^}]+)\}", path)), f"{method} {path}"


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    from openapi_spec_validator import OpenAPIV31SpecValidator, validate

    assert document["openapi"].startswith("3.1.")
    validate(document, cls=OpenAPIV31SpecValidator)
    operation_ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids)), "agent frameworks name tools by operationId"


def test_the_validator_refuses_a_broken_document(document: dict[str, Any]) -> None:
    """The check above can fail: a response without a description is not OpenAPI."""
    from openapi_spec_validator import OpenAPIV31SpecValidator, validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    broken = openapi_document()
    del broken["paths"]["/health"]["get"]["responses"]["200"]["description"]
    with pytest.raises(OpenAPIValidationError):
        validate(broken, cls=OpenAPIV31SpecValidator)


def test_api_key_security_matches_the_api_sam_generates(
    document: dict[str, Any], transformed: dict[str, Any]
) -> None:
    body = transformed["Resources"]["OpsApi"]["Properties"]["Body"]
    generated = body["securityDefinitions"]["api_key"]
    scheme = document["components"]["securitySchemes"]["api_key"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == (
        generated["type"],
        generated["in"],
        API_KEY_HEADER,
    )
    assert generated["name"] == API_KEY_HEADER
    keyed_in_api = {
        (method.upper(), path)
        for path, item in body["paths"].items()
        for method, operation in item.items()
        if any("api_key" in requirement for requirement in operation.get("security", []))
    }
    keyed_in_document = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if operation["security"] == [{"api_key": []}]
    }
    assert keyed_in_document == keyed_in_api - NOT_REST
    open_in_document = document_routes(document) - keyed_in_document
    assert open_in_document == {("GET", "/health")}
    assert all(document["paths"][path][method.lower()]["security"] == [] for method, path in open_in_document)


def test_the_registry_lists_each_route_once() -> None:
    routes = [operation.route for operation in operations()]
    assert len(routes) == len(set(routes))


# The route reader itself: it must find what Powertools would register, and only that.
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('@app.get("/a")\ndef f(): ...\n', {("GET", "/a")}),
        (
            '@app.post("/b/<x>")\ndef f(x): ...\n@app.delete("/b/<x>")\ndef g(x): ...\n',
            {("POST", "/b/<x>"), ("DELETE", "/b/<x>")},
        ),
        ('@other.get("/a")\ndef f(): ...\n', set()),
        ("@app.exception_handler(Exception)\ndef f(e): ...\n", set()),
        ("@app.not_found\ndef f(e): ...\n", set()),
    ],
)
def test_resolver_route_reader(source: str, expected: set[Route]) -> None:
    assert resolver_routes(source) == expected
