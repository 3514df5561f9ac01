"""Property-based fuzz of every API route in template.yaml: whatever a client sends, the answer is
never a 5xx, and every 4xx is a JSON object whose ``message`` says what was wrong.

The routes come from template.yaml (the local stack's reading of it), so a new route is fuzzed
without anyone listing it here; a first test checks that list is the whole HTTP surface (every
handler under functions/gateway and functions/observer is a route's, or a queue's or schedule's).

Two levels, one local stack (moto server provisioned from the template, embedded engine, sample
dataset, a few ops in the lake and a playbook snapshot so the routes reach their deep paths):

- in-process: hypothesis builds the REST (v1) proxy event itself (the shape the local API Gateway
  builds, then every client-controlled field replaced: body bytes or text, ``isBase64Encoded``
  either way, Content-Type and Content-Encoding, path parameters, repeated and empty query keys,
  the optional headers) and invokes the real handler, many examples per route;
- over HTTP: fewer examples through the local API Gateway and a real socket, so what a client can
  actually put on the wire (percent-encoded paths, raw bytes, repeated keys) is covered too.

Each example fuzzes one part of the request (body, path, query or headers) and leaves the rest
well-formed, or fuzzes all of them, so hostile input reaches the code behind the other checks. Every
input that was once a 5xx is also sent to every route as a plain table (``KNOWN``).

The CI profile is derandomized (same examples every run, no example database). ``FUZZ_PROFILE=heavy``
runs 25 times as many random examples and keeps hypothesis's database, for local bug hunting;
``FUZZ_REPORT=path.json`` writes the answers' status counts per route.

In-process, a second property holds: every tool call leaves its op record (the observation
middleware never reports ``ObservationsLost``), whatever text the request carries.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from opslake_local.drain import Drainer
from opslake_local.http import HttpRequest, build_event
from opslake_local.invoke import FunctionError
from opslake_local.stack import LocalStack
from opslake_local.template import ApiRoute, Template
from tests.fake_llm import FakeLlm
from tests.integration.conftest import local_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Template(ROOT / "template.yaml")
ROUTES: list[ApiRoute] = TEMPLATE.api_routes()
ROUTE_IDS = [f"{r.method} {r.path}" for r in ROUTES]

# ---- profiles ----------------------------------------------------------------------------------
# "fuzz" (CI): the same examples on every run, no example database. "fuzz-heavy" (FUZZ_PROFILE=heavy):
# 25 times as many random examples, failures kept in hypothesis's database and tried first next time.
_COMMON: dict[str, Any] = {
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
}
settings.register_profile("fuzz", derandomize=True, database=None, **_COMMON)
settings.register_profile("fuzz-heavy", derandomize=False, **_COMMON)
HEAVY = os.environ.get("FUZZ_PROFILE", "ci") == "heavy"
PROFILE = settings.get_profile("fuzz-heavy" if HEAVY else "fuzz")
SCALE = 25 if HEAVY else 1
# Examples per route in-process, and over HTTP. Routes that run a query on the embedded engine
# for a well-formed request cost ~50-100 ms an example; the others ~1-10 ms.
IN_PROCESS_EXAMPLES = 120
HTTP_EXAMPLES = 15
_SLOW_FUNCTIONS = {
    "WorkerFunction", "ProfileFunction", "SqlFunction", "MatchFunction", "SearchFunction", "StatsFunction",
    "McpFunction",
}  # fmt: skip


def _settings(examples: int) -> settings:
    return settings(PROFILE, max_examples=examples * SCALE)


def _examples(route: ApiRoute, base: int) -> int:
    return base // 2 if route.function in _SLOW_FUNCTIONS else base


# ---- what a well-formed request to each route looks like (the fuzzer mutates it) -----------------
AGENT = "fuzz-agent"
GOOD_PATH_VALUES = {"agent_id": AGENT, "name": "workers", "id": "W00001"}
GOOD_QUERIES: dict[str, list[tuple[str, str]]] = {
    "/stats": [("hours", "24")],
    "/profile/{agent_id}": [("hours", "168")],
    "/playbooks": [("endpoint", "/sql"), ("q", "filter"), ("limit", "5")],
}


# fmt: off
def _op(op_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "op_id": op_id, "agent_id": AGENT, "endpoint": "/sql", "success": False, "duration_ms": 12.5,
        "ts": (datetime.now(UTC) - timedelta(minutes=5)).isoformat(), "error_type": "UnknownColumn",
        "error": "column wrokers not found", "task_class": "staffing_fill", "attributes": {"rows": 3},
        **extra,
    }


def _otlp_json_export() -> dict[str, Any]:
    """One failed tool span as OTLP/JSON (hex ids, enums as integers, nanoseconds as strings)."""
    start = int((datetime.now(UTC) - timedelta(minutes=5)).timestamp() * 1e9)

    def attribute(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"stringValue": value}}

    span = {
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "execute_tool query_db",
        "kind": 1, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 12_500_000),
        "attributes": [
            attribute(gen_ai.GEN_AI_OPERATION_NAME, gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value),
            attribute(gen_ai.GEN_AI_TOOL_NAME, "query_db"), attribute(gen_ai.GEN_AI_AGENT_NAME, AGENT),
        ],
        "status": {"code": 2, "message": "column wrokers not found"},
    }
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "fuzz"}, "spans": [span]}]}]}


GOOD_BODIES: dict[str, dict[str, Any]] = {
    "/events": _op("fuzz-op-1"),
    "/sql": {"sql": "SELECT role, count(*) AS n FROM workers WHERE state = 'MI' GROUP BY role", "limit": 10},
    "/log": {
        "operation": "query workers", "approach": "filter on state first", "result": "lesson",
        "context": "the state column holds two-letter codes", "task_class": "staffing_fill", "endpoint": "/sql",
    },
    "/match": {"role": "welder", "city": "Detroit", "state": "MI", "need": "mig welding", "count": 3},
    "/search": {"q": "tig welder detroit", "limit": 5, "sources": ["workers", "playbooks"]},
    # MCP: a tools/call of the sql tool (JSON-RPC; its fields are fuzzed like any other body's)
    "/mcp": {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sql", "arguments": {"sql": "SELECT role, count(*) AS n FROM workers GROUP BY role"}},
    },
    "/ask": {"question": "how many welders are in Detroit?", "tables": ["workers"]},
    "/v1/traces": _otlp_json_export(),
}
SNAPSHOT = {
    "generated_at": "2026-11-21T10:00:00Z",
    "entries": [
        {
            "entry_id": f"fuzz-{i}", "trigger": f"before querying {table}", "action": "filter on dt first",
            "kind": "do", "confidence": 0.5 + i / 10, "domain": "sql", "scope": "project", "status": "active",
            "endpoint": "/sql", "task_class": "staffing_fill", "evidence_op_ids": [f"op-{j}" for j in range(8)],
            "evidence_excerpts": [], "created_at": "2026-11-20T10:00:00Z",
        }
        for i, table in enumerate(("workers", "placements", "ops"))
    ],
}

# ---- strategies --------------------------------------------------------------------------------
#: Any text, lone surrogates included (JSON can carry them as "\ud800" escapes).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
NASTY_STRINGS = st.sampled_from([
    "", " ", "\x00", "a\x00b", "\n", "\r\n", "\ud800", "\udfff", "\ufeff", "\u202e", "\u0130", "ß", "🙂",
    "Ω" * 300, "%", "%00", "%0A", "%E2%80", "%ZZ", "..", "../..", "/", "\\", "'", '"', "`", ";", "--", "/*",
    "$(id)", "{{7*7}}", "${x}", "*", "?", "#", "&", "=", "+", "null", "NaN", "-1", "0", "1e309", "9" * 400,
    "x" * 5000, "W00001\n", "W00001 ", "W00001%0A", "W00001/x", "ops\x00", "WORKERS", "a" * 129, "É",
])
TEXT = st.one_of(ANY_TEXT, NASTY_STRINGS)
#: Numbers JSON can write that Python or pydantic may choke on.
NUMBER_LITERALS = st.sampled_from([
    "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E-400", "-0", "0.0", "1" + "0" * 5000,
    "-" + "9" * 4400, "1.0" + "0" * 5000, "123456789012345678901234567890", "1e9999999999", "0x10", "01",
    "1.", ".5", "+1", "1_000",
])
# SQL pieces: valid-ish queries over the sample tables and the lake, with the values, casts,
# functions and limits an engine or the guard's rewriting may trip on.
SQL_TABLES = st.sampled_from([
    "workers", "placements", "ops", "opslake_dev.workers", "awsdatacatalog.opslake_dev.ops", "WORKERS",
    '"workers"', "information_schema.tables", "secret", "unnest(array[1])", "(SELECT 1 AS x)",
    "workers w JOIN placements p ON w.worker_id = p.worker_id", "workers, workers AS w2",
])
SQL_EXPRESSIONS = st.sampled_from([
    "*", "count(*)", "worker_id", "role", "rating / 0", "1 / 0", "cast(rating AS integer)",
    "cast('x' AS integer)", "sum(hourly_rate)", "avg(rating)", "'\ud800'", "'\x00'", "1e400", "9" * 40,
    "sequence(1, 5)", "array[1, 2]", "map(array['a'], array[1])", "map(array[1], array['a'])", "row(1, 'a')",
    "DATE '2026-13-45'", "TIMESTAMP '2026-01-01 00:00:00'", "INTERVAL '1' DAY", "from_unixtime(1e12)",
    "regexp_like(name, '(')", "json_parse('{')", "X'ff'", "approx_percentile(rating, 2)", "nan()",
    "infinity()", "-infinity()", "cast(1 AS decimal(38, 10))", "to_hex(cast('a' AS varbinary))",
    "current_setting('memory_limit')", "unknown_function(1)", "nosuchcolumn", "agent_id", "dt",
    "cast(NULL AS json)", "uuid()", "ARRAY[]", "cast(2e9 AS integer)", "power(10, 400)", "'a' || 1",
    "try_cast('1' AS bigint)", "element_at(array[1], 5)", "split('a,b', ',')", "repeat('x', 3)",
])
SQL_LIMITS = st.sampled_from([
    "", "LIMIT 1", "LIMIT 0", "LIMIT -1", "LIMIT 1.5", "LIMIT 1e3", "LIMIT 99999999999999999999", "LIMIT '5'",
    "LIMIT ALL", "LIMIT NULL", "LIMIT (SELECT 1)", "OFFSET 5", "FETCH FIRST 2 ROWS ONLY",
    "FETCH FIRST 1.5 ROWS ONLY", "LIMIT 2 OFFSET -1",
])
SQL_TOKENS = st.sampled_from([
    "SELECT", "*", "FROM", "WHERE", "(", ")", "1", "'x'", "--", "/*", "*/", ";", "UNION", "ALL", "WITH",
    "AS", "t", "JOIN", "ON", "=", "ORDER BY", "GROUP BY", '"', "`", "$1", "?", "::", "INSTALL httpfs",
    "ATTACH 'x'", "PRAGMA", "COPY", "SET", "CALL", "LOAD", "SHOW TABLES", "EXPLAIN", "VALUES (1)", ",",
])
# fmt: on


@st.composite
def sql_text(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return " ".join(draw(st.lists(SQL_TOKENS | SQL_TABLES | SQL_EXPRESSIONS, max_size=12)))
    if kind == 1:
        depth = draw(st.integers(1, 200))
        return "SELECT " + "(" * depth + "1" + ")" * depth
    expressions = ", ".join(draw(st.lists(SQL_EXPRESSIONS, min_size=1, max_size=3)))
    where = draw(
        st.sampled_from(["", "WHERE 1 = 1", "WHERE state = 'MI'", "WHERE rating > 'x'", "WHERE dt = 1"])
    )
    group = draw(
        st.sampled_from(["", "GROUP BY 1", "GROUP BY role", "ORDER BY 1 DESC", "HAVING count(*) > 1"])
    )
    limit = draw(SQL_LIMITS)
    query = f"SELECT {expressions} FROM {draw(SQL_TABLES)} {where} {group} {limit}"
    if kind == 3:
        query = f"WITH t AS ({query}) SELECT * FROM t " + draw(SQL_LIMITS)
    return query


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=8,
)
#: Values of one field of a route's body that are nearly right.
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "sql": sql_text(),
    "limit": st.integers(-5, 20_000) | st.sampled_from(["10", "1e3", 1.5, 10**20]),
    "count": st.integers(-5, 100) | st.sampled_from(["3", 2.5]),
    "ts": st.sampled_from(
        [
            "2026-11-22T10:00:00Z",
            "2026-11-22",
            "2126-01-01T00:00:00Z",
            "1970-01-01T00:00:00Z",
            "0001-01-01",
            "9999-12-31T23:59:59Z",
            "2026-02-30T00:00:00Z",
            "yesterday",
            1763800000,
            1763800000000,
            -1,
            1e20,
        ]
    ),
    "duration_ms": st.floats(allow_nan=True, allow_infinity=True) | st.integers(),
    "attributes": st.dictionaries(TEXT, SCALARS | JSON_VALUES, max_size=40),
    "state": st.sampled_from(["MI", "mi", "M1", "ZZ", "", "MIC"]),
    "result": st.sampled_from(["success", "failure", "lesson", "SUCCESS", ""]),
    "min_rating": st.floats(allow_nan=True, allow_infinity=True),
    "q": st.sampled_from(["", " ", "the of", "a" * 201, "%_\\'", "100% o'brien", "ß É 🙂", "x " * 150])
    | TEXT,
    "sources": st.lists(
        st.sampled_from(["workers", "placements", "playbooks", "ops", "", "WORKERS"]), max_size=4
    ),
}


@st.composite
def shaped_json(draw: st.DrawFn, good: dict[str, Any]) -> Any:
    """A route's well-formed body with up to three fields dropped, made nearly right, retyped or
    turned to text, and sometimes fields added; now and then a list, a batch or a bare value."""
    body = dict(good)
    for key in draw(st.lists(st.sampled_from(list(good)), max_size=3, unique=True)) if good else []:
        how = draw(st.sampled_from(["near", "near", "drop", "any", "text"]))
        if how == "drop":
            del body[key]
        else:
            body[key] = draw({"near": FIELD_VALUES.get(key, TEXT), "any": JSON_VALUES, "text": TEXT}[how])
    if draw(st.integers(0, 3)) == 3:
        extra = st.sampled_from(["sql", "ops", "role", "op_id", "reporter_id", "__proto__"]) | TEXT
        body.update(draw(st.dictionaries(extra, JSON_VALUES, max_size=2)))
    wrap = draw(st.sampled_from(["object"] * 6 + ["list", "ops", "scalar"]))
    if wrap == "list":
        return [body]
    if wrap == "ops":
        return {"ops": draw(st.lists(st.just(body) | JSON_VALUES, max_size=3))}
    if wrap == "scalar":
        return draw(SCALARS)
    return body


@st.composite
def json_text(draw: st.DrawFn, good: dict[str, Any]) -> str:
    """JSON text of a shaped body, sometimes with what ``json.dumps`` never writes: duplicate keys,
    NaN/Infinity and huge number literals, raw NUL or lone surrogates, a BOM, trailing garbage."""
    value = draw(shaped_json(good))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), allow_nan=True)
    twist = draw(st.sampled_from(["none"] * 4 + ["dup", "number", "raw", "bom", "trail", "cut"]))
    if twist == "dup" and text.startswith("{") and len(text) > 2:
        key = json.dumps(draw(st.sampled_from([*good, "ops"]) if good else TEXT))
        text = "{" + f"{key}: {json.dumps(draw(SCALARS), allow_nan=True)}, " + text[1:]
    elif twist == "number" and text.startswith("{") and good:
        text = "{" + f"{json.dumps(draw(st.sampled_from(list(good))))}: {draw(NUMBER_LITERALS)}, " + text[1:]
    elif twist == "raw":
        text = text.replace("e", draw(st.sampled_from(["\x00", "\ud800", "\udc00", "\x1f", "\u2028"])))
    elif twist == "bom":
        text = "\ufeff" + text
    elif twist == "trail":
        text += draw(st.sampled_from(["]", "}", ",", " x", "\x00", "{}", "\n\n"]))
    elif twist == "cut" and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    return text


@st.composite
def deep_json(draw: st.DrawFn) -> str:
    """Nesting up to 5,000 levels, of arrays, objects or both, closed or not."""
    depth = draw(st.integers(1, 5000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('{"ops":[', "]}"), ("[{", "}]")]))
    leaf = draw(st.sampled_from(["1", "null", '"x"', "", "{}"]))
    closed = draw(st.booleans())
    return opener * depth + leaf + (closer * depth if closed else "")


@st.composite
def encoded_body(draw: st.DrawFn, good: dict[str, Any]) -> bytes:
    """Well-formed JSON in bytes opslake does not read: other encodings, compressed, a BOM."""
    text = json.dumps(good or {"a": 1})
    how = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32", "latin-1", "gzip", "deflate", "bom"]))
    if how == "gzip":
        return gzip.compress(text.encode())
    if how == "deflate":
        return zlib.compress(text.encode())
    if how == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    return (text + "É").encode(how)


@st.composite
def near_body(draw: st.DrawFn, good: dict[str, Any]) -> str:
    """The well-formed body with one field nearly right: a query the guard or the engine may trip
    on, a limit out of range, a timestamp in year 9999, …"""
    body = dict(good)
    key = draw(st.sampled_from(sorted(good, key=lambda k: k not in FIELD_VALUES)))  # known fields first
    body[key] = draw(FIELD_VALUES.get(key, TEXT))
    return json.dumps(body, allow_nan=True)


def bodies(route: ApiRoute) -> st.SearchStrategy[bytes | str | None]:
    good = GOOD_BODIES.get(route.path, {})
    well_formed = json_text(good)
    nearly_right = near_body(good) if good else well_formed
    return st.one_of(
        nearly_right,
        nearly_right,
        nearly_right,
        well_formed,
        well_formed,
        st.none(),
        st.sampled_from(["", "{}", "[]", "null", "0", '""', "{", "\x00", "{}" * 1000, " " * 100]),
        deep_json(),
        encoded_body(good),
        st.binary(max_size=300),
        TEXT,
    )


# fmt: off
JSON_TYPES = st.sampled_from([
    "application/json", "application/json; charset=utf-8", "application/json;charset=UTF-8",
    "APPLICATION/JSON", "application/vnd.api+json",
])
OTHER_TYPES = st.sampled_from([
    "application/json; charset=utf-16", "application/problem+json", "text/plain", "text/html",
    "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/octet-stream",
    "application/gzip", "*/*", "application/", "json", ";", "", " ", "application/json\x00", "application/jsonp",
    "application/x-json", "application/json, text/plain", "application/json; charset=\ud800",
])
CONTENT_ENCODINGS = st.sampled_from(
    ["gzip", "GZIP", " gzip ", "deflate", "br", "identity", "IDENTITY", "gzip, identity", "x-unknown", "", " "]
)
# fmt: on


@st.composite
def header_sets(draw: st.DrawFn, value_text: st.SearchStrategy[str]) -> dict[str, str]:
    """A JSON Content-Type mostly (else none or anything), now and then a Content-Encoding,
    opslake's optional headers and If-None-Match."""
    headers: dict[str, str] = {}
    content_type = draw(st.sampled_from(["json"] * 7 + ["none"] * 2 + ["other", "text"]))
    name = draw(st.sampled_from(["Content-Type", "content-type", "CONTENT-TYPE"]))
    if content_type == "json":
        headers[name] = draw(JSON_TYPES)
    elif content_type == "other":
        headers[name] = draw(OTHER_TYPES)
    elif content_type == "text":
        headers[name] = draw(value_text)
    if draw(st.integers(0, 11)) == 11:  # rarely (and shrinking drops it)
        headers[draw(st.sampled_from(["Content-Encoding", "content-encoding"]))] = draw(
            CONTENT_ENCODINGS | value_text
        )
    optional = ["x-opslake-session-id", "x-opslake-trace-id", "x-opslake-task-class", "If-None-Match"]
    for name in draw(st.lists(st.sampled_from(optional), max_size=4, unique=True)):
        headers[name] = draw(value_text | st.sampled_from(["*", '"x"', 'W/"x"', "s-1", "a" * 300]))
    return headers


QUERY_KEYS = st.sampled_from(["hours", "limit", "q", "endpoint", "task_class", "agent_id", "x", ""])
QUERY_VALUES = st.one_of(
    st.sampled_from(
        ["", "1", "0", "-1", "24", "168", "100000", "1.5", "1e9", "nan", "inf", "true", "9" * 50]
    ),
    TEXT,
)


@st.composite
def query_pairs(draw: st.DrawFn, route: ApiRoute, keys: st.SearchStrategy[str]) -> list[tuple[str, str]]:
    """The route's good query, mutated: keys repeated, values empty or hostile, unknown keys added."""
    pairs = [
        (key, draw(st.just(value) | QUERY_VALUES))
        for key, value in GOOD_QUERIES.get(route.path, [])
        if draw(st.booleans())
    ]
    pairs += draw(st.lists(st.tuples(keys, QUERY_VALUES), max_size=4))
    return draw(st.permutations(pairs)) if pairs else pairs


@st.composite
def path_values(draw: st.DrawFn, name: str) -> str:
    good = GOOD_PATH_VALUES.get(name, "x")
    return draw(
        st.one_of(
            st.just(good),
            TEXT.filter(bool),
            st.tuples(st.just(good), NASTY_STRINGS).map("".join),
            st.integers(1, 3000).map(lambda n: good[0] * n),
        )
    )


@dataclass
class Fuzzed:
    """One client request: what goes into the proxy event (in-process) or onto the wire (HTTP)."""

    method: str
    path_parameters: dict[str, str]
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes | str | None
    base64: bool = False
    #: in-process only: base64-flagged text that is not base64 at all
    bad_base64: bool = False
    raw_path: str = field(default="")

    def summary(self) -> str:
        body = self.body if self.body is None or len(self.body) < 300 else self.body[:300]
        return (
            f"{self.method} {self.raw_path} params={self.path_parameters!r} query={self.query!r} "
            f"headers={self.headers!r} base64={self.base64} bad_base64={self.bad_base64} body={body!r}"
        )


def _render_path(route: ApiRoute, values: dict[str, str], encode: bool) -> str:
    path = route.path
    for name, value in values.items():
        path = path.replace(
            "{" + name + "}", quote(value, safe="", errors="surrogatepass") if encode else value
        )
    return path


#: What one request fuzzes; the rest of it is the route's well-formed request, so that a hostile
#: part reaches the code behind the checks of the other parts.
FOCUS = st.sampled_from(["body", "body", "body", "path", "query", "headers", "everything"])


@st.composite
def requests(draw: st.DrawFn, route: ApiRoute, *, wire: bool = False) -> Fuzzed:
    """A request to ``route`` with one part fuzzed (or all of them); ``wire`` keeps to what HTTP
    can carry (ASCII header values, no lone surrogates, an encoded path)."""
    focus = draw(FOCUS)
    fuzz_all = focus == "everything"
    names = [segment[1:-1] for segment in route.path.split("/") if segment.startswith("{")]
    params = {
        name: draw(path_values(name)) if focus == "path" or fuzz_all else GOOD_PATH_VALUES[name]
        for name in names
    }
    header_text = (
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40) if wire else TEXT
    )
    headers = {"Content-Type": "application/json"}
    if focus == "headers" or fuzz_all:
        headers = draw(header_sets(header_text))
    good = GOOD_BODIES.get(route.path)
    body: bytes | str | None = json.dumps(good) if good is not None else None
    if focus == "body" or fuzz_all:
        body = draw(bodies(route))
    if wire and isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")  # the wire carries bytes, lone surrogates as WTF-8
    query = list(GOOD_QUERIES.get(route.path, []))
    if focus == "query" or fuzz_all:
        query = draw(query_pairs(route, QUERY_KEYS | (st.text(max_size=10) if wire else TEXT)))
    fuzzed = Fuzzed(method=route.method, path_parameters=params, query=query, headers=headers, body=body)
    if wire:  # HTTP header values are printable ASCII without surrounding blanks (h11 refuses others)
        fuzzed.headers = {
            k: "".join(c for c in v if " " <= c <= "~").strip() for k, v in fuzzed.headers.items()
        }
    encode = wire or draw(st.integers(0, 3)) > 0  # in-process, the raw path sometimes is not encoded
    fuzzed.raw_path = _render_path(route, params, encode)
    if not wire:
        fuzzed.base64 = draw(st.booleans()) or (isinstance(body, bytes) and draw(st.booleans()))
        fuzzed.bad_base64 = fuzzed.base64 and (focus == "body" or fuzz_all) and draw(st.integers(0, 7)) == 7
    return fuzzed


# ---- the property ------------------------------------------------------------------------------
#: status → count per (level, route), written to $FUZZ_REPORT (a JSON file) after the module.
TALLY: dict[str, Counter[str]] = defaultdict(Counter)


def assert_answer(status: int, body: bytes | str, request: Fuzzed, tally: Counter[str]) -> None:
    """No 5xx; a 4xx is a JSON object whose ``message`` says what was wrong (for POST /mcp, a
    JSON-RPC error whose ``error.message`` does); a 2xx is JSON, but for MCP's 202 with no body
    (a notification or a client's response accepted)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    error = ""
    if status >= 400:
        with contextlib.suppress(ValueError, AttributeError):
            error = " " + str(json.loads(text).get("error") or json.loads(text).get("message"))
    tally[f"{status}{error}"] += 1
    assert status < 500, f"{status} for {request.summary()}: {text[:500]}"
    if status == 304 or (status == 202 and not text):
        return
    try:
        answer = json.loads(text)
    except ValueError:
        pytest.fail(f"{status} with a body that is not JSON for {request.summary()}: {text[:300]!r}")
    if status >= 400:
        assert isinstance(answer, dict), f"{status} body is not an object: {text[:300]}"
        if answer.get("jsonrpc") == "2.0" and isinstance(answer.get("error"), dict):
            answer = answer["error"]  # MCP: the JSON-RPC error object carries the message
        message = answer.get("message")
        assert isinstance(message, str) and message.strip(), f"{status} without a message: {text[:300]}"


def proxy_event(stack: LocalStack, route: ApiRoute, request: Fuzzed) -> dict[str, Any]:
    """The proxy event API Gateway would send, with every client-controlled field the fuzzer's."""
    assert stack.api_key is not None
    event = build_event(
        HttpRequest(route.method, request.raw_path, [], b"", "127.0.0.1"),
        route,
        request.path_parameters,
        stage=TEMPLATE.api_stage(route.api_id),
        api_key=stack.api_key if route.api_key_required else None,
        account_id=TEMPLATE.account_id,
    )
    headers = {**request.headers}
    if route.api_key_required:
        headers["x-api-key"] = stack.api_key.value
    event["headers"] = headers or None
    event["multiValueHeaders"] = {k: [v] for k, v in headers.items()} or None
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for key, value in request.query:
        single[key] = value
        multi.setdefault(key, []).append(value)
    event["queryStringParameters"] = single or None
    event["multiValueQueryStringParameters"] = multi or None
    body = request.body
    if request.bad_base64:
        event["body"] = "not base64!" if body is None else str(body)[:100] + "*"
    elif request.base64 and body is not None:
        raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
        event["body"] = base64.b64encode(raw).decode("ascii")
    elif isinstance(body, bytes):
        event["body"] = body.decode("utf-8", "surrogateescape")  # non-UTF-8 bytes as lone surrogates
    else:
        event["body"] = body
    event["isBase64Encoded"] = request.base64
    return event


# ---- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local() -> Iterator[tuple[LocalStack, httpx.Client, Drainer]]:
    """conftest's local stack, with a model for POST /ask (without one /ask is a 503 by design): a
    fake that always answers that the question cannot be answered (one model call, no query)."""
    with FakeLlm() as llm:
        llm.default = FakeLlm.answer({"answerable": False, "sql": "", "reason": "the catalog cannot say"})
        with local_stack(OPSLAKE_LLM_BASE_URL=llm.base_url, OPSLAKE_LLM_MODEL=llm.model) as parts:
            yield parts


@dataclass
class Fuzz:
    stack: LocalStack
    client: httpx.Client
    drainer: Drainer
    #: names of the metrics the handlers emitted since the last invocation (``ObservationsLost``:
    #: a tool call left no op record)
    metrics: list[str] = field(default_factory=list)
    calls: int = 0

    @property
    def key(self) -> str:
        assert self.stack.api_key is not None
        return self.stack.api_key.value

    def invoke(self, route: ApiRoute, event: dict[str, Any]) -> dict[str, Any]:
        self.metrics.clear()
        self.calls += 1
        if self.calls % 500 == 0:  # moto's SQS slows down with every message its queue holds
            sqs = self.stack.client("sqs")
            sqs.purge_queue(QueueUrl=self.stack.environment["OPSLAKE_OPS_QUEUE_URL"])
        try:
            answer: dict[str, Any] = self.drainer.invoker.invoke(route.function, event)
        except FunctionError as exc:  # Lambda's "Unhandled": API Gateway answers 502
            cause = exc.__cause__
            return {"statusCode": 502, "body": json.dumps({"message": f"{type(cause).__name__}: {cause}"})}
        return answer


@pytest.fixture(scope="module")
def fuzz(local: tuple[LocalStack, httpx.Client, Drainer]) -> Iterator[Fuzz]:
    """The local stack with an agent's ops in the lake and a playbook snapshot, so that routes
    answer from data and not only from their empty-lake paths."""
    from opslake.observability import metrics

    stack, client, drainer = local
    target = Fuzz(stack, client, drainer)
    add_metric = metrics.add_metric

    def spy(name: str, *args: Any, **kwargs: Any) -> None:
        target.metrics.append(name)
        add_metric(name, *args, **kwargs)

    ops = [_op(f"fuzz-seed-{i}", success=i % 2 == 0) for i in range(6)]
    answer = client.post("/events", json={"ops": ops}, headers={"x-api-key": target.key})
    assert answer.status_code == 202, answer.text
    assert drainer.drain().failed == 0
    stack.client("s3").put_object(
        Bucket=stack.bucket, Key="playbooks/current.json", Body=json.dumps(SNAPSHOT).encode()
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "add_metric", spy)
        patch.setenv("MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR", "false")  # purge every 500 calls
        yield target
    if report := os.environ.get("FUZZ_REPORT"):
        Path(report).write_text(json.dumps({k: dict(v.most_common()) for k, v in TALLY.items()}, indent=1))


# ---- tests -------------------------------------------------------------------------------------
def test_the_fuzzed_routes_are_the_whole_http_surface() -> None:
    """Every handler file under functions/gateway and functions/observer serves a template route,
    unless its function is only invoked by a queue or a schedule; every route's method and path
    is fuzzed below (the parametrization is this very list)."""
    assert len(ROUTES) >= 12, ROUTE_IDS
    assert len(set(ROUTE_IDS)) == len(ROUTE_IDS)
    functions = TEMPLATE.functions()
    routed = {r.function for r in ROUTES}
    served_files = {functions[name].handler_file.resolve() for name in routed}
    other_files = {spec.handler_file.resolve() for name, spec in functions.items() if name not in routed}
    for handler_file in sorted((ROOT / "functions").glob("*/*.py")):
        if handler_file.parent.name in ("gateway", "observer"):
            assert handler_file.resolve() in served_files | other_files, f"{handler_file} is in no function"
    non_api = {source.function for source in TEMPLATE.sqs_sources()}
    for name, spec in functions.items():
        if spec.handler_file.parent.name in ("gateway", "observer") and name not in routed:
            assert name in non_api, f"{name} has no route and no queue: what invokes it?"


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_a_well_formed_request_reaches_each_route(fuzz: Fuzz, route: ApiRoute) -> None:
    """The fuzzer's starting point is answered by the route itself (not 'no such route'), with data."""
    path = _render_path(
        route, {n: v for n, v in GOOD_PATH_VALUES.items() if "{" + n + "}" in route.path}, True
    )
    body = GOOD_BODIES.get(route.path)
    answer = fuzz.client.request(
        route.method,
        path,
        params=GOOD_QUERIES.get(route.path),
        json=body,
        headers={"x-api-key": fuzz.key, "x-opslake-task-class": "staffing_fill"},
    )
    if route.path == "/mcp" and route.method != "POST":  # MCP is stateless: no SSE stream, no session
        assert (answer.status_code, answer.headers["allow"]) == (405, "POST"), answer.text
        return
    assert answer.status_code < 300, answer.text
    if route.path == "/mcp":
        assert answer.json()["result"]["isError"] is False, answer.text


JSON = {"Content-Type": "application/json"}
#: Inputs that were 5xx once (issue 12 and this fuzzer's finds), sent to every route: name →
#: (headers, body, isBase64Encoded, path value, query).
KNOWN: dict[str, tuple[dict[str, str], bytes | str | None, bool, str | None, list[tuple[str, str]]]] = {
    "JSON nested 1,000 levels": (JSON, "[" * 1000 + "]" * 1000, False, None, []),
    "JSON objects nested 5,000 levels, unclosed": (JSON, '{"a":' * 5000, False, None, []),
    "UTF-16 JSON": (JSON, json.dumps({"sql": "SELECT 1"}).encode("utf-16"), True, None, []),
    "invalid UTF-8": (JSON, b'{"sql": "SELECT \xff\xfe"}', True, None, []),
    "gzip body, Content-Encoding gzip": (
        {**JSON, "Content-Encoding": "gzip"}, gzip.compress(b'{"sql": "SELECT 1"}'), True, None, [],
    ),
    "gzip body, no Content-Encoding": ({}, gzip.compress(b'{"sql": "SELECT 1"}'), True, None, []),
    "text/plain": ({"Content-Type": "text/plain"}, '{"sql": "SELECT 1"}', False, None, []),
    "lone surrogate escape": (JSON, '{"sql": "\\ud800", "need": "\\udfff", "agent_id": "\\ud800"}', False, None, []),
    "raw lone surrogate": (JSON, '{"sql": "\ud800"}', False, None, []),
    "NUL": (JSON, '{"sql": "SELECT 1\\u0000", "role": "\x00"}', False, None, []),
    "NaN and Infinity literals": (JSON, '{"limit": NaN, "count": Infinity, "duration_ms": -Infinity}', False, None, []),
    "a 5,000-digit number": (JSON, '{"limit": 1' + "0" * 5000 + ', "count": 1' + "0" * 5000 + "}", False, None, []),
    "duplicate keys": (JSON, '{"sql": 1, "sql": "SELECT 1", "limit": 5, "limit": "x"}', False, None, []),
    "SQL nested 60 parentheses": (JSON, json.dumps({"sql": "SELECT " + "(" * 60 + "1" + ")" * 60}), False, None, []),
    "SQL LIMIT 1.5": (JSON, json.dumps({"sql": "SELECT 1 FROM workers LIMIT 1.5"}), False, None, []),
    "SQL LIMIT 1e3": (JSON, json.dumps({"sql": "SELECT 1 FROM workers LIMIT 1e3"}), False, None, []),
    "id with a trailing newline": ({}, None, False, "W00001\n", []),
    "id of 3,000 characters": ({}, None, False, "W" * 3000, []),
    "id with a lone surrogate": ({}, None, False, "W0000\ud800", []),
    "repeated and empty query keys": ({}, None, False, None, [("hours", "1"), ("hours", ""), ("", ""), ("limit", "x")]),
    "lone surrogates in the query and a header": (
        {**JSON, "x-opslake-task-class": "\udcff"}, None, False, None, [("q", "\ud800"), ("\udfff", "1")],
    ),
}  # fmt: skip


#: OTLP receivers ignore unknown fields: to POST /v1/traces these JSON objects (of other routes'
#: fields only) are empty exports, answered 200 with nothing stored.
OTLP_EMPTY_EXPORTS = {
    "gzip body, Content-Encoding gzip", "NaN and Infinity literals", "SQL nested 60 parentheses",
    "SQL LIMIT 1.5", "SQL LIMIT 1e3",
}  # fmt: skip


@pytest.mark.parametrize("case", list(KNOWN))
@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_known_bad_inputs_are_4xx_on_every_route(fuzz: Fuzz, route: ApiRoute, case: str) -> None:
    """The reproductions, each sent to every route: never a 5xx; where the route reads that part
    of the request (its body, its path), a 4xx that says why."""
    headers, body, is_base64, path_value, query = KNOWN[case]
    names = [segment[1:-1] for segment in route.path.split("/") if segment.startswith("{")]
    params = {name: path_value or GOOD_PATH_VALUES[name] for name in names}
    request = Fuzzed(route.method, params, query, headers, body, base64=is_base64)
    request.raw_path = _render_path(route, params, encode=True)
    answer = fuzz.invoke(route, proxy_event(fuzz.stack, route, request))
    assert_answer(answer["statusCode"], answer.get("body") or "", request, TALLY[f"known {case}"])
    assert "ObservationsLost" not in fuzz.metrics, f"the call left no op record: {request.summary()}"
    if route.path == "/v1/traces" and case in OTLP_EMPTY_EXPORTS:
        assert (answer["statusCode"], json.loads(answer["body"])) == (200, {}), answer
    elif route.method == "POST" and body is not None and case != "duplicate keys":
        assert 400 <= answer["statusCode"] < 500, answer
    if path_value is not None and names:
        assert 400 <= answer["statusCode"] < 500, answer


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_no_request_is_a_5xx_in_process(fuzz: Fuzz, route: ApiRoute) -> None:
    tally = TALLY[f"in-process {route.method} {route.path}"]

    @_settings(_examples(route, IN_PROCESS_EXAMPLES))
    @given(request=requests(route))
    def check(request: Fuzzed) -> None:
        note(request.summary())
        answer = fuzz.invoke(route, proxy_event(fuzz.stack, route, request))
        assert_answer(answer["statusCode"], answer.get("body") or "", request, tally)
        assert "ObservationsLost" not in fuzz.metrics, f"the call left no op record: {request.summary()}"

    check()


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_no_request_is_a_5xx_over_http(fuzz: Fuzz, route: ApiRoute) -> None:
    tally = TALLY[f"http {route.method} {route.path}"]

    @_settings(_examples(route, HTTP_EXAMPLES))
    @given(request=requests(route, wire=True))
    def check(request: Fuzzed) -> None:
        note(request.summary())
        url = request.raw_path + (
            "?" + urlencode(request.query, errors="surrogatepass") if request.query else ""
        )
        headers = {**request.headers, "x-api-key": fuzz.key}
        body = request.body if isinstance(request.body, bytes) else None
        answer = fuzz.client.request(route.method, url, headers=headers, content=body)
        assert_answer(answer.status_code, answer.content, request, tally)

    check()
