"""Masking in SQL: the Athena SQL of opslake.analysis.masking, transpiled by the dialect layer and run
on DuckDB, gives exactly what the Python mirror gives, on texts this module did not write.

There is no Trino here: the patterns keep to the regex subset joni and RE2 agree on (see the
module docstring of opslake.analysis.masking); what is checked is Python == DuckDB-after-transpiling,
and that the SQL text reaching DuckDB carries RE2's replacement syntax and the 'g' option.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opslake.analysis import masking
from opslake.analysis.masking import (
    MASKING_RULES,
    input_template,
    normalize,
    normalize_endpoint,
    normalize_sql,
    signature_id,
    signature_id_sql,
    template_of,
    template_sql,
    variant_of,
    variant_sql,
)
from opslake.models.analysis import MAX_TEMPLATE_CHARS
from opslake.models.ops import MAX_ID_CHARS
from opslake.query.dialect import to_duckdb

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[3]


@functools.cache
def engine_sql() -> str:
    template = template_sql("endpoint", "error_type", "error")
    athena = f"""SELECT {template} AS template, {signature_id_sql(template)} AS sid, {variant_sql("input")} AS v,
       {normalize_sql("error")} AS norm, {masking.normalize_endpoint_sql("endpoint")} AS ep
FROM failures_t"""
    return to_duckdb(athena).sql.replace("FROM failures_t", "FROM failures_t ORDER BY i")


def engine_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """(template, signature id, variant, normalized error, normalized endpoint) per (endpoint,
    error_type, error, input) row, computed by DuckDB from the Athena SQL."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE failures_t (i INTEGER, endpoint VARCHAR, error_type VARCHAR, error VARCHAR, input VARCHAR)"
    )
    con.executemany(
        "INSERT INTO failures_t VALUES (?, ?, ?, ?, ?)", [(i, *row) for i, row in enumerate(rows)]
    )
    return con.sql(engine_sql()).fetchall()


def python_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out = []
    for endpoint, error_type, error, input_summary in rows:
        template = template_of(endpoint, error_type, error)
        out.append(
            (
                template,
                signature_id(template),
                variant_of(input_summary),
                None if error is None else normalize(error),
                normalize_endpoint(endpoint),
            )
        )
    return out


def assert_same(rows: list[tuple[Any, ...]]) -> None:
    engine, python = engine_rows(rows), python_rows(rows)
    for row, got, want in zip(rows, engine, python, strict=True):
        assert got == want, row


def planted_rows(n_ops: int = 30_000) -> list[tuple[Any, ...]]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from planted import generate
    finally:
        sys.path.remove(str(ROOT / "bench"))
    data = generate(n_ops=n_ops, seed=11)
    c = data.columns
    return [
        (c["endpoint"][i], c["error_type"][i], c["error"][i], c["input_summary"][i])
        for i in data.failure_indexes()
    ]


def test_the_planted_failures_get_the_same_templates_ids_and_variants_in_duckdb() -> None:
    rows = planted_rows()
    assert len(rows) > 200
    assert_same(rows)


def _test_texts() -> list[str]:
    """Error texts written by other tests (their string literals that read like messages)."""
    texts: set[str] = set()
    literal = re.compile(r"\"([^\"\\\n]{12,300})\"|'([^'\\\n]{12,300})'")
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        for match in literal.finditer(path.read_text(encoding="utf-8")):
            text = match.group(1) or match.group(2)
            if " " in text:
                texts.add(text)
    return sorted(texts)


def test_the_texts_of_other_tests_get_the_same_normalization_in_duckdb() -> None:
    texts = _test_texts()
    assert len(texts) > 500
    assert_same([("/tool/x1", "err", text, text) for text in texts])


@pytest.mark.parametrize(
    "endpoint",
    [
        "/worker/W00042",
        "/worker/{id}",
        "/sql",
        "tool:query_db",
        "/a/123/b/456/c",
        "/a/12/34",
        "/orders/3f2a9b1c-1234-4abc-8def-0123456789ab/items/7",
        "/v2/x",
        "/abc1/de2/f3g4/",
        "//9",
        "/é1/ünï9ab",
        "runtime:llm",
        "/1" * 100,  # masks to 500 characters: cut to 200
        "/a " + "/1" * 97 + "/x",
        "/ab/" + "x" * 190 + "/12",
        "/" + "1/" * 99 + "é",
    ],
)
def test_endpoints_get_the_same_masking_in_duckdb(endpoint: str) -> None:
    assert_same([(endpoint, None, None, None), (endpoint, "", "", "")])


_ALPHABET = st.sampled_from(
    [
        *"0123456789abcdefxyzABCDEFXYZ _-./:;,'\"`@<>()[]{}%+=~\\\n\t\r",
        *("µ", "é", "中", "٣", "\u2028", "…"),
        # what RE2 may fold onto ASCII unit letters (KELVIN SIGN ~ k, LONG S ~ s) or µ (after a digit: _TOKENS)
        *("\u212a", "\u017f", "\u03bc", "\u039c"),
    ]
)
_TOKENS = st.sampled_from(
    [
        "3f2a9b1c-1234-4abc-8def-0123456789AB",
        "01HZX3K9Q2W7V8B5N4M6T1R0YZ",
        "deadbeef12",
        "0x7ffe3a",
        "2025-06-01T12:00:00.123Z",
        "2025-06-01 12:00:00+02:00",
        "12:00:01.5",
        "30012 ms",
        "1.5GB",
        "12,345",
        "'salry'",
        '"x y"',
        "`z`",
        "/var/task/load.py",
        "C:\\Users\\bob\\x.txt",
        "reports/2025/raw_3.csv",
        "https://api.example.com/v2/orders/12?trace=ab",
        "bob.smith+x@example.co.uk",
        "W-004512",
        "worker_123",
        "10.0.3.17:5432",
        "arn:aws:iam::123456789012:role/agent-7",
        "[1, 2, 3, 4]",
        "1e-5",
        "٣٤",
        "Kelvin \u212a",
        "300\u212a",
        "5\u017f",
        "12\u212ab",
        "3m\u017f",
    ]
)
_TEXT = st.one_of(
    st.text(_ALPHABET, max_size=80),
    st.lists(st.one_of(_TOKENS, st.text(_ALPHABET, max_size=6)), max_size=12).map(" ".join),
    st.lists(st.one_of(_TOKENS, st.text(_ALPHABET, max_size=3)), max_size=8).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60),
    st.text(_ALPHABET, min_size=280, max_size=2_400),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(st.lists(st.tuples(_TEXT, _TEXT, st.booleans()), min_size=1, max_size=25))
def test_generated_texts_get_the_same_normalization_in_duckdb(cases: list[tuple[str, str, bool]]) -> None:
    rows = [
        ("/x/" + b[:10], a[:20] or None, a, ('{"q": "' + b + '"}') if json else b) for a, b, json in cases
    ]
    assert_same(rows)


@pytest.mark.parametrize(
    "text",
    [
        "sensor read 300\u212a over limit",  # KELVIN SIGN: not the unit k
        "waited 5\u017f then gave up",  # LONG S: not the unit s
        "took 3m\u017f",
        "got 12\u212ab and 4\u212aib",
        "size 5\u212a, 6\u017f, 7k, 8x, 9%",
        "took 30\u03bcs",  # GREEK SMALL MU is not MICRO SIGN (the unit µs)
    ],
)
def test_unicode_case_variants_of_unit_letters_are_not_units_in_duckdb(text: str) -> None:
    # RE2 folds a two-letter class [kK] taken into an alternation to Unicode case (adding U+212A);
    # Python's re.ASCII and joni without a case-insensitive flag do not
    assert normalize(text).count("\u212a") + normalize(text).count("\u017f") == text.count(
        "\u212a"
    ) + text.count("\u017f")
    assert_same([("/x", "E", text, text)])


def test_long_texts_are_cut_the_same_way_at_every_length() -> None:
    rows = []
    for n in range(290, 312):
        for tail in ("x", " <nu", "<num", " 12", "'a'", "  y"):
            rows.append(("/x", "t", "a" * (n - len(tail)) + tail, "z" * n))
            rows.append(("/x", "t", "a " * (n // 2) + tail, "[" + "1, " * n))
    assert_same(rows)


def test_the_sql_reaching_duckdb_uses_re2_replacements_and_replaces_every_match() -> None:
    duck = to_duckdb(f"SELECT {template_sql('endpoint', 'error_type', 'error')} FROM ops").sql
    replaces = re.findall(r"REGEXP_REPLACE\(", duck)
    assert len(replaces) >= len(MASKING_RULES)
    assert "$1" not in duck and "$2" not in duck
    assert "\\1<str>\\2" in duck
    # every call asks for every match: the 'g' option is its last argument
    assert duck.count(", 'g')") == len(replaces)


def test_a_masked_endpoint_is_at_most_an_id_long() -> None:
    assert masking.MAX_ENDPOINT_CHARS == MAX_ID_CHARS
    assert normalize_endpoint("/1" * 100) == "/{id}" * 39 + "/{i …"
    assert normalize_endpoint("/ab/" + "x" * 190 + "/12") == "/ab/" + "x" * 190 + "/{id}"  # 199: whole
    assert len(template_of("/1" * 100, "E" * 200, "x " * 2_000)) <= MAX_TEMPLATE_CHARS


def test_the_python_mirror_is_ascii_and_keeps_the_documented_examples() -> None:
    assert normalize("worker W00042 failed after 30 ms") == "worker <id> failed after <num> ms"
    assert normalize("Zähler ٣٤ überschritten") == "Zähler ٣٤ überschritten"  # non-ASCII digits stay
    assert (
        input_template('{"sql": "SELECT a FROM t WHERE id = \'W1\'"}')
        == "{sql: SELECT a FROM t WHERE id = <str>}"
    )
