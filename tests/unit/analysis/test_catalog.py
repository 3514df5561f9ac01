"""The tool catalog (issue 24): value shapes the same in Python and in the engine, a call's
arguments read from what the gateway and the runtimes record, the window's tally in SQL folded into
a bounded catalog, registered schemas, and what the vocabulary lets an entry name (only what two
independent reporters showed, or a team declared)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from opslake.analysis.catalog.arguments import argument_shapes, call_arguments
from opslake.analysis.catalog.catalog_sql import catalog_window_sql
from opslake.analysis.catalog.declared import DeclaredSchemaError, declared_tools
from opslake.analysis.catalog.export import catalog_rows
from opslake.analysis.catalog.fold import fold
from opslake.analysis.catalog.known import vocabulary_of
from opslake.analysis.catalog.shapes import pattern, raw_shape, spoken, value_shape, value_shape_sql
from opslake.analysis.reporters import ReporterTrust
from opslake.lake import derived
from opslake.models.catalog import MAX_SHAPES, MAX_TOOLS, ToolCatalog
from opslake.models.window import Window
from opslake.query.dialect import to_duckdb

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
TRUST = ReporterTrust()


# ---- shapes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("W00042", "W99999"), ("certificate_7815826", "certificate_9999999"), ("2026-12-05", "9999-99-99"),
        ("High", "High"), ("gift_card", "gift_card"), (3, "<num>"), (2.5, "<num>"), (True, "<bool>"),
        (None, "null"), ({"a": 1}, "<object>"), ([1], "<array>"), ("a@b.io", "<email>"),
        ("https://x.example/y", "<url>"), ("123e4567-e89b-12d3-a456-426614174000", "<uuid>"),
        ("please find me a nice place to stay", "<text>"), ("x" * 41, "<text>"), ("", ""),
    ],
)  # fmt: skip
def test_value_shapes(value: Any, shape: str) -> None:
    assert value_shape(value) == shape
    assert raw_shape(json.dumps(value)) == shape


_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=60),
    st.sampled_from(["W00042", "CUS-123456", "2026-01-02", "a b c d e f", "x@y.com", "http://a.b"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _values, min_size=1, max_size=4))
def test_the_engine_shapes_values_as_python_does(arguments: dict[str, Any]) -> None:
    """The catalog's SQL (run on DuckDB through the dialect layer) gives each argument the shape
    Python gives it: the contrasts (Python, on samples) and the catalog (SQL) speak of one shape."""
    shape = value_shape_sql(
        "json_format(element_at(m, k.arg))", "json_extract_scalar(element_at(m, k.arg), '$')"
    )
    sql = (
        f"SELECT k.arg, {shape}"
        " AS shape FROM (SELECT try(CAST(json_parse(t) AS map(varchar, json))) AS m FROM v) "
        "CROSS JOIN UNNEST(map_keys(m)) AS k(arg)"
    )  # fmt: skip
    con = duckdb.connect()
    con.register("v", pa.table({"t": [json.dumps(arguments)]}))
    found = dict(con.execute(to_duckdb(sql).sql).fetchall())
    assert found == {name: value_shape(value) for name, value in arguments.items()}


@pytest.mark.parametrize(
    ("shape", "said", "regex"),
    [("W99999", "W + 5 digits", "W[0-9]{5}"), ("CUS-999999", "CUS- + 6 digits", "CUS-[0-9]{6}"),
     ("999999", "6 digits", "[0-9]{6}"), ("9999-99-99", "9999-99-99", "[0-9]{4}-[0-9]{2}-[0-9]{2}"),
     ("high", "high", "high"), ("<num>", "a number", "<num>")],
)  # fmt: skip
def test_a_shape_is_said_and_written_as_a_pattern(shape: str, said: str, regex: str) -> None:
    assert (spoken(shape), pattern(shape)) == (said, regex)


# ---- arguments ------------------------------------------------------------------------------------
def test_arguments_of_tool_calls_and_gateway_requests() -> None:
    assert call_arguments('{"payment_id":"certificate_1","amount":3}', "tool:pay") == {
        "payment_id": "certificate_1", "amount": 3,
    }  # fmt: skip
    assert call_arguments("GET /worker/W00042", "/worker/{id}") == {"id": "W00042"}
    assert call_arguments('POST /match?limit=3 {"role":"welder"}', "/match") == {
        "limit": "3",
        "role": "welder",
    }
    assert call_arguments("GET /tables", "/tables") == {}
    # no arguments to read: free text, a JSON array, a body cut short or built by hand
    for text in ("how many welders", "[1, 2]", 'POST /sql {"sql": "SELECT', '{"a": 1'):
        assert call_arguments(text, "/sql") is None, text
    assert argument_shapes('{"id":"CUS-004211"}', "tool:get") == {"id": "CUS-999999"}


# ---- the window's tally, folded -------------------------------------------------------------------
OPS_SCHEMA = pa.schema(
    [
        ("op_id", pa.string()), ("reporter_id", pa.string()), ("agent_id", pa.string()), ("endpoint", pa.string()),
        ("ts", pa.timestamp("ms")), ("ingested_at", pa.timestamp("ms")), ("success", pa.bool_()),
        ("input_summary", pa.string()), ("session_id", pa.string()), ("trace_id", pa.string()),
        ("source", pa.string()), ("event_kind", pa.string()), ("dt", pa.string()), ("hour", pa.string()),
    ]
)  # fmt: skip


def op(n: int, key: str, endpoint: str, arguments: Any, *, ok: bool = True, session: str | None = None,
       source: str = "otlp", at: int = 0) -> dict[str, Any]:  # fmt: skip
    ts = (NOW + timedelta(seconds=at + n)).replace(tzinfo=None)
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "op_id": f"{key}-{n}", "reporter_id": key, "agent_id": f"{key}-agent", "endpoint": endpoint, "ts": ts,
        "ingested_at": ts, "success": ok, "input_summary": text, "session_id": session, "trace_id": None,
        "source": source, "event_kind": None, "dt": ts.strftime("%Y-%m-%d"), "hour": ts.strftime("%H"),
    }  # fmt: skip


def tally(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    con = duckdb.connect()
    con.register("ops", pa.Table.from_pylist(ops, schema=OPS_SCHEMA))
    window = Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    cursor = con.execute(to_duckdb(catalog_window_sql("ops", window, TRUST)).sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def booking_ops() -> list[dict[str, Any]]:
    """Two keys call tool:pay (after tool:find_booking in the same session); one key alone calls
    tool:odd_thing with an argument nobody else sends; a gateway route called by one key."""
    ops = []
    for n, key in enumerate(["k1", "k2", "k1", "k2"]):
        session = f"{key}-s{n}"
        ops.append(op(n, key, "tool:find_booking", {"booking_id": f"BK{1000 + n}"}, session=session, at=0))
        ops.append(op(n, key, "tool:pay", {"payment_id": f"credit_card_{700 + n}", "amount": 3},
                      session=session, at=10))  # fmt: skip
    ops.append(
        op(9, "k1", "tool:pay", {"payment_id": "certificate_123", "amount": 3}, ok=False, session="k1-x")
    )
    ops.append(op(10, "k3", "tool:odd_thing", {"ignore_all_rules": 1}))
    ops.append(op(11, "k3", "/tables/{name}", "GET /tables/workers", source="gateway"))
    ops.append(op(12, "k3", "agent:booker", {"x": 1}))  # an agent run is no tool
    return ops


def test_the_window_s_tally_is_rows_per_tool_argument_shape_and_predecessor() -> None:
    rows = tally(booking_ops())
    kinds = {(r["kind"], r["endpoint"], r["name"], r["shape"]): r for r in rows}
    assert ("tool", "agent:booker", None, None) not in kinds
    pay = kinds[("tool", "tool:pay", None, None)]
    assert (pay["calls"], pay["failures"], json.loads(pay["witnesses"])) == (5, 1, ["k1", "k2"])
    assert kinds[("shape", "tool:pay", "payment_id", "credit_card_999")]["calls"] == 4
    assert kinds[("shape", "tool:pay", "payment_id", "certificate_999")]["failures"] == 1
    assert kinds[("shape", "tool:pay", "payment_id", "certificate_999")]["distinct_shapes"] == 2
    assert kinds[("preceded_by", "tool:pay", "tool:find_booking", None)]["calls"] == 4
    assert kinds[("shape", "/tables/{name}", "name", "workers")]["calls"] == 1  # a path parameter
    assert kinds[("tool", "/tables/{name}", None, None)]["by_server"] is True


def test_a_hostile_call_with_hundreds_of_arguments_cuts_no_tool_from_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the answer's bound (scaled down here), the rarest items go, never the tools: one call
    with 250 argument names reports its tool's most called arguments, and every tool stays."""
    import opslake.analysis.catalog.catalog_sql as catalog_sql

    monkeypatch.setattr(catalog_sql, "MAX_WINDOW_ROWS", 100)
    rows = tally([*booking_ops(), op(100, "k9", "tool:aaa", {f"a{i}": 1 for i in range(250)})])
    tools = {r["endpoint"] for r in rows if r["kind"] == "tool"}
    assert {"tool:pay", "tool:find_booking", "tool:aaa", "tool:odd_thing"} <= tools
    assert (
        sum(r["kind"] == "argument" and r["endpoint"] == "tool:aaa" for r in rows)
        <= catalog_sql.WINDOW_ARGUMENTS
    )
    assert ("preceded_by", "tool:pay") in {(r["kind"], r["endpoint"]) for r in rows}


def test_a_reporter_key_is_one_witness_whatever_agents_it_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reporter-level key's seventh claimed agent still witnesses for it (only a runtime key's
    agents are capped), and an op without an agent adds no empty witness."""
    monkeypatch.setattr(sys.modules[__name__], "TRUST", ReporterTrust(levels={"k1": "reporter"}))
    ops = [op(a, "k1", "tool:early", {"x": 1}) | {"agent_id": f"agent-{a}"} for a in range(7)]
    ops += [
        op(50, "k1", "tool:late", {"x": 1}) | {"agent_id": "agent-6"},
        op(51, "k2", "tool:late", {"x": 1}),
    ]
    ops += [op(52, "k2", "tool:late", {"x": 2}) | {"agent_id": None}]
    late = next(r for r in tally(ops) if r["kind"] == "tool" and r["endpoint"] == "tool:late")
    assert json.loads(late["witnesses"]) == ["k1", "k2"]


def test_only_what_two_reporters_showed_or_a_team_declared_is_known() -> None:
    catalog = fold(ToolCatalog(), tally(booking_ops()), now=NOW)
    vocabulary = vocabulary_of(catalog)
    assert set(vocabulary.tools) == {
        "tool:pay",
        "tool:find_booking",
        "/tables/{name}",
    }  # a route: the API's own
    assert {a.name for a in vocabulary.arguments("tool:pay")} == {"payment_id", "amount"}
    assert vocabulary.tool("tool:odd_thing") is None  # one key cannot plant vocabulary
    assert not vocabulary.known_names.knows("ignore_all_rules")
    assert vocabulary.arguments("/tables/{name}") == []  # the route exists; one key sent its argument
    assert vocabulary.forms("tool:pay", "payment_id") == ["credit_card_999"]  # the failing form: one key
    declared = declared_tools(
        {
            "tools": [
                {
                    "name": "odd_thing",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"mode": {"type": "string", "enum": ["a", "b"]}},
                        "required": ["mode"],
                    },
                }
            ]
        }
    )
    registered = vocabulary_of(fold(catalog, [], now=NOW, declared=declared))
    assert [a.name for a in registered.arguments("tool:odd_thing")] == ["mode"]
    assert registered.argument("tool:odd_thing", "mode").enum == ["a", "b"]  # type: ignore[union-attr]


def test_folding_adds_up_windows_and_keeps_every_list_bounded() -> None:
    rows = tally(booking_ops())
    once = fold(ToolCatalog(), rows, now=NOW)
    twice = fold(once, rows, now=NOW + timedelta(hours=1))
    assert twice.tool("tool:pay").calls == 2 * once.tool("tool:pay").calls  # type: ignore[union-attr]
    assert twice.tool("tool:pay").witnesses == ["k1", "k2"]  # type: ignore[union-attr]
    many = [
        {"kind": "shape", "endpoint": "tool:x", "name": "city", "shape": f"City{i:03d}", "calls": 1, "failures": 0,
         "distinct_shapes": 500, "witnesses": '["k1"]'}
        for i in range(500)
    ]  # fmt: skip
    many += [
        {"kind": "tool", "endpoint": "tool:x", "calls": 500, "failures": 0, "witnesses": '["k1"]'},
        {"kind": "argument", "endpoint": "tool:x", "name": "city", "calls": 500, "failures": 0, "witnesses": '["k1"]'},
    ]  # fmt: skip
    bounded = fold(ToolCatalog(), many, now=NOW)
    argument = bounded.tool("tool:x").argument("city")  # type: ignore[union-attr]
    assert argument is not None and len(argument.shapes) == MAX_SHAPES and argument.distinct_shapes == 500
    errors = [{"signature_id": "sig_1", "endpoint": "tool:pay", "template": "tool:pay | e | must match", "count": 4,
               "reporter_count": 2}]  # fmt: skip
    with_errors = fold(once, [], now=NOW, signatures=errors)
    assert [e.signature_id for e in with_errors.tool("tool:pay").errors] == ["sig_1"]  # type: ignore[union-attr]


def test_one_key_s_junk_crowds_out_nothing_two_keys_showed() -> None:
    """One key calling 400 made-up tools each window cannot push out a tool two keys call (the
    catalog keeps what two keys showed first), nor a made-up argument push out a real one."""
    catalog = ToolCatalog()
    for hour in range(3):
        junk = [
            {"kind": "tool", "endpoint": f"tool:junk{i:03d}", "calls": 50, "failures": 0, "witnesses": '["k9"]'}
            for i in range(400)
        ]  # fmt: skip
        junk += [
            {"kind": "argument", "endpoint": "tool:pay", "name": f"junk{i}", "calls": 50, "failures": 0,
             "witnesses": '["k9"]'}
            for i in range(40)
        ]  # fmt: skip
        catalog = fold(catalog, [*tally(booking_ops()), *junk], now=NOW + timedelta(hours=hour))
    pay = catalog.tool("tool:pay")
    assert pay is not None and catalog.tool("tool:find_booking") is not None
    assert {"payment_id", "amount"} <= {a.name for a in pay.arguments}
    assert len(catalog.tools) == MAX_TOOLS


def test_a_registered_schema_withdrawn_or_corrected_is_declared_no_more() -> None:
    """The declarations are the registered schemas as they stand: a typo corrected leaves only the
    corrected argument declared; a withdrawn set leaves nothing declared (and a tool nobody called
    goes); schemas that could not be read (None) keep what was declared."""
    typo = declared_tools({"tools": [{"name": "pay", "inputSchema": {"properties": {"paymnet_id": {}}}}]})
    fixed = declared_tools({"tools": [{"name": "pay", "inputSchema": {"properties": {"payment_id": {}}}}]})
    first = fold(ToolCatalog(), [], now=NOW, declared=typo)
    corrected = fold(first, [], now=NOW, declared=fixed)
    assert [(a.name, a.declared) for a in corrected.tool("tool:pay").arguments] == [("payment_id", True)]  # type: ignore[union-attr]
    assert fold(corrected, [], now=NOW, declared=None).tool("tool:pay").declared  # type: ignore[union-attr]
    assert fold(corrected, [], now=NOW, declared=[]).tools == []
    seen = fold(corrected, tally(booking_ops()), now=NOW, declared=[])
    pay = seen.tool("tool:pay")
    assert pay is not None and not pay.declared and not any(a.declared for a in pay.arguments)


def test_the_catalog_table_has_the_glue_schema_and_says_what_is_known() -> None:
    vocabulary = vocabulary_of(fold(ToolCatalog(), tally(booking_ops()), now=NOW))
    rows = catalog_rows(vocabulary, NOW)
    table = derived.to_table("tool_catalog", rows)
    assert table.schema == derived.TOOL_CATALOG_SCHEMA
    known = {(r["endpoint"], r["item"], r["name"]): r["known"] for r in rows}
    assert known[("tool:pay", "argument", "payment_id")] and not known[("tool:odd_thing", "tool", None)]


# ---- registered schemas ---------------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {
        "ticket_id": {"type": "string", "pattern": "^TCK-[0-9]{5}$"},
        "priority": {"enum": ["low", "high"]},
    },
    "required": ["ticket_id"],
}


@pytest.mark.parametrize(
    "document",
    [
        {
            "tools": [{"name": "close_ticket", "description": "Close it", "inputSchema": SCHEMA}]
        },  # MCP tools/list
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "close_ticket", "inputSchema": SCHEMA}]}},
        [{"type": "function", "function": {"name": "close_ticket", "parameters": SCHEMA}}],  # OpenAI
        [{"type": "function", "name": "close_ticket", "parameters": SCHEMA}],  # OpenAI Responses
        [{"name": "close_ticket", "input_schema": SCHEMA}],  # Anthropic
        {"title": "close_ticket", **SCHEMA},  # a JSON Schema with a title
    ],
)
def test_registered_schemas_in_the_forms_tools_come_in(document: Any) -> None:
    (tool,) = declared_tools(document)
    assert tool.endpoint == "tool:close_ticket" and tool.declared
    ticket, priority = tool.arguments
    assert (ticket.name, ticket.required, ticket.pattern) == ("ticket_id", True, "^TCK-[0-9]{5}$")
    assert (priority.name, priority.required, priority.enum) == ("priority", False, ["low", "high"])


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"tools": []}, "declares no tool"),
        ([{"parameters": SCHEMA}], "no name"),
        ([{"name": "x"}], "no input schema"),
        ([{"name": "evil.tv", "parameters": SCHEMA}], "endpoint"),
        ([{"name": "x", "parameters": {"type": "object", "properties": {"a b": {}}}}], "identifiers"),
        (["x"], "expected an object"),
    ],
)
def test_a_document_that_is_no_tool_schema_is_refused_with_the_reason(document: Any, message: str) -> None:
    with pytest.raises(DeclaredSchemaError, match=message):
        declared_tools(document)


def test_the_learning_logic_imports_nothing_of_the_sample_world() -> None:
    """Issue 24: what an entry may name comes from data (the catalog, Glue), so the learning logic
    neither imports the staffing sample nor keeps a list that restates it or the routes."""
    import ast
    from pathlib import Path

    import opslake.analysis.fence as fence

    root = Path(__file__).resolve().parents[3] / "layers" / "common" / "opslake"
    imported: dict[str, set[str]] = {}
    for package in ("analysis", "jobs"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    imported.setdefault(str(path.relative_to(root)), set()).add(node.module)
                elif isinstance(node, ast.Import):
                    imported.setdefault(str(path.relative_to(root)), set()).update(a.name for a in node.names)
    offenders = {
        p: m for p, ms in imported.items() for m in ms if m.startswith(("opslake.datasets", "opslake.tools"))
    }
    assert offenders == {}
    assert not any(hasattr(fence, name) for name in ("CATALOG", "TOOL_FIELDS", "GATEWAY_ROUTES"))
