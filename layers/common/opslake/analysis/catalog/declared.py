"""Tool schemas a team registers, so the catalog knows its tools before the traffic does
(``opslake tools register FILE``): what each tool is called and which arguments it takes, with their
JSON Schema type, enum, pattern and whether they are required.

Read from the forms tool schemas already come in:

* an MCP ``tools/list`` result (``{"tools": [{"name", "description", "inputSchema"}]}``, bare or
  inside its JSON-RPC response);
* OpenAI function definitions (``[{"type": "function", "function": {"name", "parameters"}}]``, the
  Responses API's flat ``{"type": "function", "name", "parameters"}``, or bare ``{"name",
  "parameters"}``), and Anthropic's ``{"name", "input_schema"}``;
* one JSON Schema object with a ``title`` (the tool's name).

A tool becomes the endpoint ``tool:<name>`` (how runtimes' tool spans are named, see
:mod:`opslake.otlp.mapping`) unless ``prefix`` says otherwise. Declared items are known to the
learning logic without traffic (an operator registered them); descriptions are kept as data only,
never served. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from opslake.analysis.fence import endpoint_refusal
from opslake.models.catalog import (
    MAX_ARGUMENTS,
    MAX_DESCRIPTION_CHARS,
    MAX_ENUM_VALUES,
    MAX_SHAPE_CHARS,
    MAX_TOOLS,
    ArgumentStat,
    ToolStat,
)

DEFAULT_PREFIX = "tool:"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
_ARGUMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class DeclaredSchemaError(ValueError):
    """A registered document is no tool schema opslake reads (the message says what was wrong)."""


def _tool_specs(document: Any) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
    """(name, input JSON Schema, description) of each tool the document declares."""
    if isinstance(document, Mapping) and isinstance(document.get("result"), Mapping):
        document = document["result"]  # a JSON-RPC response to tools/list
    if isinstance(document, Mapping) and isinstance(document.get("tools"), list):
        document = document["tools"]
    items = document if isinstance(document, list) else [document]
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise DeclaredSchemaError(f"tool {index}: expected an object, got {type(item).__name__}")
        function = item.get("function")
        spec: Mapping[str, Any] = function if isinstance(function, Mapping) else item
        name = spec.get("name") or spec.get("title")
        schema = spec.get("inputSchema") or spec.get("input_schema") or spec.get("parameters")
        if schema is None and spec.get("type") == "object":
            schema = spec  # a bare JSON Schema: the tool's arguments are its properties
        if not isinstance(name, str) or not name:
            raise DeclaredSchemaError(
                f"tool {index}: no name (MCP and OpenAI give 'name', a JSON Schema 'title')"
            )
        if not isinstance(schema, Mapping):
            raise DeclaredSchemaError(
                f"tool {name!r}: no input schema (MCP 'inputSchema', OpenAI 'parameters', Anthropic 'input_schema')"
            )
        description = spec.get("description")
        yield name, schema, description if isinstance(description, str) else None


def _argument(name: str, schema: Any, required: bool) -> ArgumentStat:
    spec = schema if isinstance(schema, Mapping) else {}
    kind = spec.get("type")
    enum = [str(v)[:MAX_SHAPE_CHARS] for v in spec.get("enum", []) if isinstance(v, str | int | float)]
    pattern = spec.get("pattern") if isinstance(spec.get("pattern"), str) else None
    return ArgumentStat(
        name=name, declared=True, required=required,
        type=kind[:40] if isinstance(kind, str) else None,
        enum=enum[:MAX_ENUM_VALUES],
        pattern=pattern[:MAX_SHAPE_CHARS] if pattern else None,
    )  # fmt: skip


def declared_tools(document: Any, *, prefix: str = DEFAULT_PREFIX) -> list[ToolStat]:
    """The tools a registered document declares (see the module doc); raises
    :class:`DeclaredSchemaError` with what was wrong."""
    tools: dict[str, ToolStat] = {}
    for name, schema, description in _tool_specs(document):
        if not _NAME.fullmatch(name):
            raise DeclaredSchemaError(
                f"tool {name[:60]!r}: a name is letters, digits, '_', '.', '-' (at most 128)"
            )
        endpoint = f"{prefix}{name}"
        reason = endpoint_refusal(endpoint)
        if reason:
            raise DeclaredSchemaError(f"tool {name!r}: {reason}")
        properties = schema.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise DeclaredSchemaError(f"tool {name!r}: 'properties' must be an object")
        required = {r for r in schema.get("required", []) if isinstance(r, str)}
        bad = [a for a in properties if not _ARGUMENT.fullmatch(str(a))]
        if bad:
            raise DeclaredSchemaError(
                f"tool {name!r}: argument names must be identifiers, got {bad[0][:60]!r}"
            )
        if len(properties) > MAX_ARGUMENTS:
            raise DeclaredSchemaError(f"tool {name!r}: {len(properties)} arguments; at most {MAX_ARGUMENTS}")
        tools[endpoint] = ToolStat(
            endpoint=endpoint, declared=True,
            description=description[:MAX_DESCRIPTION_CHARS] if description else None,
            arguments=[_argument(str(a), s, str(a) in required) for a, s in properties.items()],
        )  # fmt: skip
    if not tools:
        raise DeclaredSchemaError("the document declares no tool")
    if len(tools) > MAX_TOOLS:
        raise DeclaredSchemaError(f"{len(tools)} tools; at most {MAX_TOOLS}")
    return list(tools.values())
