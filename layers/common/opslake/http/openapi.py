"""The OpenAPI 3.1 document of the REST API, built from the code that serves it.

One registry, :func:`operations`, says per route what the document says: method, path, summary,
the pydantic models of its body, query or path parameters (their ``model_json_schema()``), its
answer, whether it needs the API key and which errors it answers itself. The gateway tools' routes
are not restated: they come from the MCP tool registry (:data:`opslake.tools.mcp.registry.TOOLS`,
which already names each tool's route, description and input model), and only what REST adds (the
answer's model, the status codes) is said here. Models are named ``"module:Class"`` and imported
when the document is first built, so importing this module costs nothing.

``tests/infrastructure/test_openapi.py`` holds the registry equal to the ``Api`` events of
template.yaml and to the routes the handlers' resolvers declare, so a route cannot be added,
moved or dropped without the document following. ``POST``/``GET``/``DELETE /mcp`` are left out on
purpose (:data:`NOT_REST`): they are the MCP transport (JSON-RPC over Streamable HTTP), not REST
operations, and an agent framework loading REST tools from this document would make a tool of them.

Served by ``GET /openapi.json`` (functions/observer/health.py), with the API key like every route
but ``/health``: it lists what the key may call.
"""

from __future__ import annotations

import copy
import importlib
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from opslake import __version__

OPENAPI_VERSION = "3.1.0"
#: The header API Gateway reads API keys from (``ApiKeySourceType: HEADER``; the name is fixed).
API_KEY_HEADER = "x-api-key"
SECURITY_SCHEME = "api_key"
#: The MCP transport's routes: in template.yaml, not REST operations (see the module docstring).
NOT_REST: frozenset[tuple[str, str]] = frozenset({("POST", "/mcp"), ("GET", "/mcp"), ("DELETE", "/mcp")})

Method = Literal["GET", "POST", "DELETE"]
_PATH_PARAMETER = re.compile(r"\{([^}]+)\}")

#: What each status a route answers itself means (the body is :class:`ErrorBody`).
STATUS_TEXT = {
    400: "The request is invalid; `message` says what to fix and `detail` which field.",
    404: "Nothing of that name; `message` says what exists.",
    413: "The body is too large.",
    415: "The body's Content-Type or Content-Encoding is not accepted.",
    502: "A service behind opslake (Athena, Glue, the model) failed; `message` says which.",
    503: "Unavailable right now; retry after `Retry-After` seconds.",
}


class ErrorBody(BaseModel):
    """The body of every error opslake answers itself (:meth:`opslake.errors.OpslakeError.body`)."""

    model_config = ConfigDict(extra="forbid", title="Error")

    error: str = Field(description="a stable machine-readable code, e.g. bad_request, not_found")
    message: str = Field(description="what was wrong and how to fix it")
    detail: Any = Field(default=None, description="the fields or values at fault, when there are any")


class GatewayErrorBody(BaseModel):
    """API Gateway's own answer, before any function runs (a missing or wrong API key: 403; the usage
    plan's throttle or daily quota: 429)."""

    model_config = ConfigDict(title="GatewayError")

    message: str = Field(description="e.g. Forbidden, Too Many Requests, Limit Exceeded")


def _ops_batch_model() -> type[BaseModel]:
    from opslake.ingest.events import MAX_OPS_PER_REQUEST
    from opslake.models.ops import OpInput

    class OpBatch(BaseModel):
        ops: list[OpInput] = Field(max_length=MAX_OPS_PER_REQUEST)

    class EventsBody(RootModel[OpInput | OpBatch]):
        """One op, or ``{"ops": [...]}``; each op is validated on its own (a bad one is listed in
        ``rejected``, the others are accepted)."""

    return EventsBody


def _playbooks_answer_model() -> type[BaseModel]:
    """``GET /playbooks``' JSON: each entry as :meth:`PlaybookEntry.served` gives it (the entry's
    served fields, with their own schemas, and the evidence count and first ids)."""
    from pydantic import create_model

    from opslake.models.playbooks import _SERVED_FIELDS, MAX_SERVED_EVIDENCE_IDS, PlaybookEntry

    served: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in PlaybookEntry.model_fields.items()
        if name in _SERVED_FIELDS
    }
    entry = create_model(
        "ServedEntry",
        __doc__="A playbook entry as agents get it: the advice and its provenance.",
        evidence_count=(int, Field(ge=0)),
        evidence_op_ids=(list[str], Field(max_length=MAX_SERVED_EVIDENCE_IDS)),
        **served,
    )
    answer: type[BaseModel] = create_model(
        "PlaybooksAnswer",
        entries=(list[entry], ...),
        generated_at=(str | None, Field(description="when the snapshot was built (None: no snapshot yet)")),
    )
    return answer


@dataclass(frozen=True)
class Parameter:
    """A path or query parameter no model describes (its JSON Schema is given here)."""

    name: str
    where: Literal["path", "query"]
    schema: dict[str, Any]
    description: str = ""


@dataclass(frozen=True)
class Answer:
    """A success answer: its status, description, and a model (``"module:Class"``), a JSON Schema,
    or neither (no body); ``media`` adds other media types with their schemas."""

    status: int = 200
    description: str = "OK"
    model: str | None = None
    schema: dict[str, Any] | None = None
    media: tuple[tuple[str, dict[str, Any]], ...] = ()
    headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Operation:
    """One REST route as the document describes it."""

    method: Method
    path: str
    operation_id: str
    summary: str
    tag: str
    description: str = ""
    body_model: str | None = None
    #: Other media types the body may have (``POST /v1/traces``: protobuf), with their schemas.
    body_media: tuple[tuple[str, dict[str, Any]], ...] = ()
    query_model: str | None = None
    path_model: str | None = None
    parameters: tuple[Parameter, ...] = ()
    answers: tuple[Answer, ...] = (Answer(),)
    #: Error statuses the route answers itself (beyond the ``default`` any route may answer).
    errors: tuple[int, ...] = ()
    api_key: bool = True
    #: Answers are not JSON (the OTLP route answers in the request's encoding).
    error_media: tuple[str, ...] = ("application/json",)

    @property
    def route(self) -> tuple[str, str]:
        return self.method, self.path


def _hours(default_name: str) -> Parameter:
    from opslake.models import insights

    return Parameter(
        name="hours",
        where="query",
        schema={
            "type": "integer",
            "minimum": 1,
            "maximum": insights.MAX_WINDOW_HOURS,
            "default": getattr(insights, default_name),
        },
        description="the window: the last N hours",
    )


_OBJECT = {"type": "object"}
_OTLP_PROTOBUF = {"type": "string", "contentMediaType": "application/x-protobuf"}


def _observer_operations() -> tuple[Operation, ...]:
    """The routes of functions/observer/ (the tools' routes come from the MCP registry)."""
    return (
        Operation(
            "POST",
            "/events",
            "post_events",
            "Report ops (one op, or a batch of up to 500)",
            "ingest",
            description="Each op is validated on its own; the answer lists the accepted op ids (as "
            "stored) and each rejected op with why. A client op_id is an idempotency key per API key.",
            body_model="opslake.http.openapi:_ops_batch_model",
            answers=(Answer(202, "Accepted: the ops are queued", "opslake.ingest.events:IngestResult"),),
            errors=(400, 413, 415, 503),
        ),
        Operation(
            "POST",
            "/v1/traces",
            "post_traces",
            "Export OpenTelemetry traces (OTLP/HTTP, protobuf or JSON, gzip allowed)",
            "ingest",
            description="Point an OTLP/HTTP exporter here. Op-shaped spans (tool, model, agent, "
            "retrieval spans, and failures) become ops. Every answer, errors included, is in the "
            "request's encoding: an ExportTraceServiceResponse, or a google.rpc.Status on failure.",
            body_media=(("application/x-protobuf", _OTLP_PROTOBUF), ("application/json", _OBJECT)),
            answers=(
                Answer(
                    200,
                    "ExportTraceServiceResponse (partial_success when spans were refused)",
                    media=(("application/x-protobuf", _OTLP_PROTOBUF), ("application/json", _OBJECT)),
                ),
            ),
            errors=(400, 413, 415, 503),
            error_media=("application/x-protobuf", "application/json"),
        ),
        Operation(
            "GET",
            "/health",
            "get_health",
            "Liveness and version (no API key)",
            "service",
            answers=(
                Answer(
                    schema={
                        "type": "object",
                        "properties": {
                            "status": {"const": "ok"},
                            "service": {"type": "string"},
                            "version": {"type": "string"},
                            "stage": {"type": "string"},
                        },
                        "required": ["status", "service", "version", "stage"],
                    }
                ),
            ),
            api_key=False,
        ),
        Operation(
            "GET",
            "/openapi.json",
            "get_openapi",
            "This document (OpenAPI 3.1)",
            "service",
            answers=(Answer(description="The OpenAPI document", schema=_OBJECT),),
        ),
        Operation(
            "GET",
            "/stats",
            "get_stats",
            "Totals, failure rates and p95 latency of every agent's ops",
            "insights",
            parameters=(_hours("DEFAULT_STATS_HOURS"),),
            answers=(Answer(model="opslake.models.insights:StatsAnswer"),),
            errors=(400, 502, 503),
        ),
        Operation(
            "GET",
            "/profile/{agent_id}",
            "get_profile",
            "One agent's ops: success rate, p95 latency, top errors, recent ops, reporters",
            "insights",
            parameters=(
                Parameter("agent_id", "path", {"type": "string", "minLength": 1}, "the agent's id"),
                _hours("DEFAULT_PROFILE_HOURS"),
            ),
            answers=(Answer(model="opslake.models.insights:ProfileAnswer"),),
            errors=(400, 404, 502, 503),
        ),
    )


_SQL_ANSWER = {
    "type": "object",
    "properties": {
        "columns": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
            },
        },
        "rows": {"type": "array", "items": {"type": "array"}},
        "row_count": {"type": "integer"},
        "truncated": {"type": "boolean"},
        "engine": {"type": "string"},
        "query_id": {"type": ["string", "null"]},
        "bytes_scanned": {"type": ["integer", "null"]},
        "tables": {"type": "array", "items": {"type": "string"}},
    },
}
_NULLABLE = ["string", "number", "boolean", "null"]

#: What REST adds to each MCP tool: its answers and the errors it answers itself.
TOOL_ANSWERS: dict[str, tuple[tuple[Answer, ...], tuple[int, ...]]] = {
    "sql": ((Answer(schema=_SQL_ANSWER),), (400, 415, 502, 503)),
    "match": ((Answer(model="opslake.tools.datasets:MatchAnswer"),), (400, 415, 502, 503)),
    "search": ((Answer(model="opslake.tools.search:SearchAnswer"),), (400, 415, 502, 503)),
    "ask": ((Answer(model="opslake.tools.ask:AskAnswer"),), (400, 415, 502, 503)),
    "log": (
        (
            Answer(
                202,
                "Recorded: the op record's id",
                schema={"type": "object", "properties": {"op_id": {"type": "string"}}, "required": ["op_id"]},
            ),
        ),
        (400, 415, 503),
    ),
    "tables": (
        (
            Answer(
                schema={
                    "type": "object",
                    "properties": {
                        "tables": {"type": "array", "items": {"$ref": "opslake.tools.datasets:TableInfo"}}
                    },
                }
            ),
        ),
        (502, 503),
    ),
    "table": ((Answer(model="opslake.tools.datasets:TableInfo"),), (404, 502, 503)),
    "worker": (
        (
            Answer(
                description="The worker's record and its placements count",
                schema={
                    "type": "object",
                    "properties": {"worker": {"type": "object"}, "engine": {"type": "string"}},
                },
            ),
        ),
        (400, 404, 502, 503),
    ),
    "playbooks": (
        (
            Answer(
                description="The entries (JSON, or Markdown with format=md or Accept: text/markdown)",
                model="opslake.http.openapi:_playbooks_answer_model",
                media=(("text/markdown", {"type": "string"}),),
                headers=("ETag",),
            ),
            Answer(304, "Not modified: If-None-Match names the current ETag", headers=("ETag",)),
        ),
        (400, 503),
    ),
    "model": (
        (
            Answer(
                schema={
                    "type": "object",
                    "properties": {
                        "provider": {"type": ["string", "null"]},
                        "model": {"type": ["string", "null"]},
                        "configured": {"type": "boolean"},
                        "reachable": {"type": ["boolean", "null"]},
                        "diagnoser": {"enum": ["llm", "heuristic"]},
                        "circuit_breaker": {"type": ["string", "null"]},
                        "recent_error_rate": {"type": ["number", "null"]},
                        "tokens_in_24h": {"type": ["integer", "null"]},
                        "tokens_out_24h": {"type": ["integer", "null"]},
                        "state_updated_at": {"type": ["string", "null"]},
                    },
                }
            ),
        ),
        (),
    ),
}


def _tool_operations() -> tuple[Operation, ...]:
    """The gateway tools' routes, from the MCP registry (one source for both transports)."""
    from opslake.tools.mcp.registry import TOOLS

    missing = sorted({tool.name for tool in TOOLS} ^ set(TOOL_ANSWERS))
    if missing:
        raise ValueError(f"TOOL_ANSWERS and the MCP tools disagree on {missing}")
    operations = []
    for tool in TOOLS:
        answers, errors = TOOL_ANSWERS[tool.name]
        summary, _, rest = tool.description.partition(". ")
        operations.append(
            Operation(
                tool.method,
                tool.route,
                tool.name,
                summary.rstrip("."),
                "tools",
                description=tool.description if rest else "",
                body_model=tool.input_model if tool.arguments_as == "body" else None,
                query_model=tool.input_model if tool.arguments_as == "query" else None,
                path_model=tool.input_model if tool.arguments_as == "path" else None,
                answers=answers,
                errors=errors,
            )
        )
    return tuple(operations)


def operations() -> tuple[Operation, ...]:
    """Every REST route of the API, as the document lists them."""
    return _observer_operations() + _tool_operations()


# ---- building the document ------------------------------------------------------------------------
def _model(reference: str) -> type[BaseModel]:
    module, _, name = reference.partition(":")
    found = getattr(importlib.import_module(module), name)
    model: type[BaseModel] = found() if not isinstance(found, type) else found  # a factory
    return model


class _Schemas:
    """The models' JSON Schemas as ``components/schemas`` entries (pydantic names them and their
    nested models uniquely), and ``$ref``s to them."""

    def __init__(self, references: list[str]) -> None:
        from pydantic.json_schema import models_json_schema

        self.models = {ref: _model(ref) for ref in dict.fromkeys(references)}
        keys, top = models_json_schema(
            [(model, "validation") for model in self.models.values()],
            ref_template="#/components/schemas/{model}",
        )
        self.components: dict[str, Any] = top.get("$defs", {})
        self._refs = {ref: keys[(model, "validation")] for ref, model in self.models.items()}

    def ref(self, reference: str) -> dict[str, Any]:
        return self._refs[reference]

    def inline(self, reference: str) -> dict[str, Any]:
        """The model's own schema (for parameters, which are listed field by field)."""
        schema: dict[str, Any] = _model(reference).model_json_schema()
        if "$defs" in schema:
            raise ValueError(f"{reference}: a parameter model may not nest models")
        return schema


def _resolve_refs(schema: Any, schemas: _Schemas) -> Any:
    """``{"$ref": "module:Class"}`` inside a hand-given schema becomes the model's component ref."""
    if isinstance(schema, dict):
        if set(schema) == {"$ref"} and ":" in schema["$ref"]:
            return schemas.ref(schema["$ref"])
        return {k: _resolve_refs(v, schemas) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_resolve_refs(v, schemas) for v in schema]
    return schema


def _model_references(operation: Operation) -> list[str]:
    """The models whose schemas are components (parameter models are listed field by field)."""
    found = [operation.body_model, *(a.model for a in operation.answers)]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {"$ref"} and ":" in node["$ref"]:
                found.append(node["$ref"])
            for value in node.values():
                walk(value)

    for answer in operation.answers:
        walk(answer.schema)
    return [ref for ref in found if ref]


def _unwrap_optional(schema: dict[str, Any]) -> dict[str, Any]:
    """``X | None = None`` as a parameter: a query string value is absent, never null."""
    branches = schema.get("anyOf")
    if not branches or {"type": "null"} not in branches or len(branches) != 2:
        return schema
    (kept,) = [b for b in branches if b != {"type": "null"}]
    rest = {k: v for k, v in schema.items() if k != "anyOf" and not (k == "default" and v is None)}
    return kept | rest


def _parameters(operation: Operation, schemas: _Schemas) -> list[dict[str, Any]]:
    parameters = []
    for reference, where in ((operation.path_model, "path"), (operation.query_model, "query")):
        if reference is None:
            continue
        schema = schemas.inline(reference)
        required = set(schema.get("required", ()))
        for name, prop in schema.get("properties", {}).items():
            prop = _unwrap_optional({k: v for k, v in prop.items() if k != "title"})
            description = prop.pop("description", "")
            parameter = {"name": name, "in": where, "required": where == "path" or name in required}
            parameters.append(
                parameter | ({"description": description} if description else {}) | {"schema": prop}
            )
    for given in operation.parameters:
        parameter = {"name": given.name, "in": given.where, "required": given.where == "path"}
        if given.description:
            parameter["description"] = given.description
        parameters.append(parameter | {"schema": given.schema})
    declared = {p["name"] for p in parameters if p["in"] == "path"}
    in_path = set(_PATH_PARAMETER.findall(operation.path))
    if declared != in_path:
        raise ValueError(f"{operation.path}: path parameters {sorted(in_path)}, described {sorted(declared)}")
    return parameters


def _answer(answer: Answer, schemas: _Schemas) -> dict[str, Any]:
    described: dict[str, Any] = {"description": answer.description}
    content: dict[str, Any] = {}
    if answer.model is not None:
        content["application/json"] = {"schema": schemas.ref(answer.model)}
    elif answer.schema is not None:
        content["application/json"] = {"schema": _resolve_refs(answer.schema, schemas)}
    content.update({media: {"schema": schema} for media, schema in answer.media})
    if content:
        described["content"] = content
    if answer.headers:
        described["headers"] = {name: {"schema": {"type": "string"}} for name in answer.headers}
    return described


def _errors(operation: Operation) -> dict[str, Any]:
    def error(description: str, schema: str = "Error") -> dict[str, Any]:
        ref = {"$ref": f"#/components/schemas/{schema}"}
        content = {
            media: {"schema": ref if media == "application/json" else _OTLP_PROTOBUF}
            for media in operation.error_media
        }
        return {"description": description, "content": content}

    responses = {str(status): error(STATUS_TEXT[status]) for status in operation.errors}
    if operation.api_key:
        responses["403"] = {
            "description": "No API key, or not a key of this API (answered by API Gateway)",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/GatewayError"}}},
        }
        responses["429"] = {
            "description": "The key's throttle or daily quota is spent (answered by API Gateway)",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/GatewayError"}}},
        }
    responses["default"] = error("Any other error (500, 502, 504): `error` names it, `message` says why")
    return responses


def _operation(operation: Operation, schemas: _Schemas) -> dict[str, Any]:
    described: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "tags": [operation.tag],
    }
    if operation.description:
        described["description"] = operation.description
    parameters = _parameters(operation, schemas)
    if parameters:
        described["parameters"] = parameters
    content: dict[str, Any] = {}
    if operation.body_model is not None:
        content["application/json"] = {"schema": schemas.ref(operation.body_model)}
    content.update({media: {"schema": schema} for media, schema in operation.body_media})
    if content:
        described["requestBody"] = {"required": True, "content": content}
    responses = {str(a.status): _answer(a, schemas) for a in operation.answers}
    described["responses"] = responses | _errors(operation)
    described["security"] = [{SECURITY_SCHEME: []}] if operation.api_key else []
    return described


@cache
def _document() -> dict[str, Any]:
    listed = operations()
    seen: set[tuple[str, str]] = set()
    for operation in listed:
        if operation.route in seen or operation.route in NOT_REST:
            raise ValueError(f"{operation.method} {operation.path} is listed twice or is not REST")
        seen.add(operation.route)
    schemas = _Schemas([ref for op in listed for ref in _model_references(op)])
    paths: dict[str, dict[str, Any]] = {}
    for operation in listed:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(operation, schemas)
    components = dict(schemas.components)
    components["Error"] = ErrorBody.model_json_schema()
    components["GatewayError"] = GatewayErrorBody.model_json_schema()
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "opslake",
            "version": __version__,
            "description": "The REST API of opslake, a serverless observer for AI agents: report ops "
            "and traces, read what the lake learned (stats, profiles, playbooks), and the gateway "
            "tools (sql, search, match, ask, log, ...). Every operation but GET /health needs an API "
            "key in the x-api-key header. The same tools are served over MCP (Streamable HTTP) at "
            "POST /mcp, which is not a REST operation and is not listed here.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                SECURITY_SCHEME: {"type": "apiKey", "in": "header", "name": API_KEY_HEADER},
            },
        },
    }


def openapi_document(server_url: str | None = None) -> dict[str, Any]:
    """The document (built once per container), with ``servers`` naming ``server_url`` when given."""
    document = copy.deepcopy(_document())
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document


def server_url(event: dict[str, Any]) -> str | None:
    """The API's base URL as the client called it, from a REST proxy event: the scheme API Gateway
    forwards (``X-Forwarded-Proto``; http when absent, as on the local stack), the Host, and what
    ``requestContext.path`` holds before the route's path (the stage on an execute-api host, a base
    path mapping on a custom domain, nothing on the local stack)."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    context = event.get("requestContext") or {}
    host = headers.get("host") or context.get("domainName")
    if not host:
        return None
    scheme = (headers.get("x-forwarded-proto") or "http").split(",")[0].strip()
    path, called = event.get("path") or "", context.get("path") or ""
    prefix = called[: -len(path)] if path and called.endswith(path) else ""
    return f"{scheme}://{host}{prefix.rstrip('/')}"
