"""The consolidator's evidence tallied by the engine (issue 13): the Athena SQL of
:mod:`opslake.analysis.playbooks.evidence_sql`, run on DuckDB through the dialect layer, gives the
same tallies (and so the same candidate groups) as the in-memory reference over the same rows, in
rows bounded by groups, not by ops."""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from opslake.analysis.playbooks import (
    LogRow,
    SuccessRow,
    groups_from_tallies,
    log_tallies_sql,
    success_tallies_sql,
    success_template,
    success_template_sql,
    tallies_from_rows,
    tally_logs,
    tally_successes,
)
from opslake.analysis.reporters import ReporterTrust, cap_witnesses
from opslake.models.playbooks import MAX_EVIDENCE, MAX_TRACKED_AGENTS
from opslake.models.window import Window
from opslake.query.dialect import to_duckdb

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(hours=1))
SCHEMA = pa.schema(
    [
        ("op_id", pa.string()), ("ts", pa.timestamp("ms")), ("ingested_at", pa.timestamp("ms")),
        ("agent_id", pa.string()), ("reporter_id", pa.string()), ("endpoint", pa.string()),
        ("task_class", pa.string()), ("input_summary", pa.string()), ("output_summary", pa.string()),
        ("success", pa.bool_()), ("event_kind", pa.string()), ("attributes", pa.map_(pa.string(), pa.string())),
        ("dt", pa.string()), ("hour", pa.string()),
    ]
)  # fmt: skip
RUNTIME = ReporterTrust(levels={"rt": "runtime", "rt/x%": "runtime", "evil": "untrusted"})


def run(sql: str, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Athena SQL run by DuckDB over ``rows`` as the ``ops`` table."""
    full = [
        {"output_summary": None, "event_kind": None, "attributes": [], **r, "ingested_at": r["ts"],
         "dt": "2026-11-20", "hour": "10"}
        for r in rows
    ]  # fmt: skip
    con = duckdb.connect()
    con.register("ops", pa.Table.from_pylist(full, schema=SCHEMA))
    cursor = con.execute(to_duckdb(sql).sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


SHAPES = [
    """POST /sql {{"sql": "SELECT name FROM workers WHERE city = 'Austin' LIMIT {n}"}}""",
    'POST /match {{"role":"nurse","count":{n},"note":"say \\"hi\\" {n}"}}',
    "GET /tables/workers?limit={n}&q=x&a=1&q=2",
    "GET /worker/W{n:05d}",
    "GET  /x?{n}",
    "DELETE /x?=1&&b={n} trailing",
    "summarize {n} profiles for job {n}",
    '[{{"id": {n}}}, "x"]',
    "GET /a\t{n}",
    "",
]


def success_ops(n: int, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        text = rng.choice([*SHAPES, None])
        rows.append(
            {
                "op_id": f"op{i % (n * 2 // 3)}",  # op ids repeat across keys
                "ts": T0 + timedelta(seconds=rng.randrange(600)),
                "agent_id": f"a{rng.randrange(30)}",
                "reporter_id": rng.choice(["k1", "k2", "rt", "rt/x%", "evil", "opslake-analyzer", None]),
                "endpoint": rng.choice(["/sql", "/match", "/log", "/playbooks"]),
                "task_class": rng.choice(["t1", None, "t2"]),
                "input_summary": text.format(n=rng.randrange(100)) if text else text,
                "success": rng.random() < 0.9,
                "event_kind": rng.choice([None, None, None, "log"]),
            }
        )
    return rows


def log_ops(n: int, seed: int = 5) -> list[dict[str, Any]]:
    """``/log`` records as the lake holds them, in the current format and packed the old way."""
    rng = random.Random(seed)
    # ends in tabs/newlines/NBSP (the engines' one-argument trim strip different sets), non-ASCII
    # capitals (Python lowers 'İ' to two code points, DuckDB to 'i')
    operations = [
        "fill a shift",
        "Fill a  shift",
        "find rate 12",
        "",
        "a: b",
        "İSTANBUL Shift",
        "istanbul shift",
    ]
    approaches = ["match on city", "Match on city.", "match on role", "", " spaced ", "x: y", "\tmatch on city",
                  "match on city\n", "match on city\xa0", "\r\n match on role \x0b\x0c"]  # fmt: skip
    rows = []
    for i in range(n):
        operation, approach = rng.choice(operations), rng.choice(approaches)
        result = rng.choice(
            ["success", "lesson", "failure", "", None, " Failure ", "failure\n", "\tLesson", "FAİLURE"]
        )
        context = rng.choice([None, "no rows", "", "\tno rows\n", "\n"])
        packed = rng.random() < 0.4
        attributes = {"operation": operation} if operation or not packed or rng.random() < 0.5 else {}
        if packed:
            summary = f"{operation}: {approach}" if rng.random() < 0.8 else approach
            output: str | None = (result or "") + (f": {context}" if context else "")
            if result and rng.random() < 0.5:
                attributes["result"] = result
        else:
            summary, output = approach, context
            attributes["log_format"] = "2"
            if result is not None:
                attributes["result"] = result
        rows.append(
            {
                "op_id": f"l{i % (n * 3 // 4)}", "ts": T0 + timedelta(seconds=rng.randrange(600)),
                "agent_id": f"a{rng.randrange(20)}", "reporter_id": rng.choice(["k1", "k2", "rt", "evil", None]),
                "endpoint": rng.choice(["/match", "/log"]), "task_class": rng.choice(["t1", None]),
                "input_summary": summary, "output_summary": output, "success": rng.random() < 0.8,
                "event_kind": "log", "attributes": list(attributes.items()),
            }
        )  # fmt: skip
    return rows


def as_log_row(row: dict[str, Any]) -> LogRow:
    """A lake row as the consolidator's ``logs_sql`` reads it."""
    attributes = dict(row["attributes"])
    return LogRow.model_validate(
        {**row, **{name: attributes.get(name) for name in ("operation", "result")},
         "log_format": attributes.get("log_format")}
    )  # fmt: skip


def test_the_engine_computes_the_call_shape_python_computes() -> None:
    texts = [s.format(n=n) for s in SHAPES for n in (1, 42)] + [
        "POST /sql {\"sql\": \"SELECT 1\"}", "PUT /x?b&a=1&b=2 {}", "GET /x? body", "GETX /y", "GET",
        '{"a": "b\\"c", "d": [1, 2, "<x>"]}', "x" * 2500, '{"q": "' + "y" * 1500 + '"}', "POST /⁗ ⁗",
    ]  # fmt: skip
    rows = [{"op_id": f"o{i}", "ts": T0, "agent_id": "a", "input_summary": t, "success": True}
            for i, t in enumerate(texts)]  # fmt: skip
    sql = f"SELECT op_id, shape FROM ({success_template_sql('SELECT * FROM ops')}) t ORDER BY op_id"
    engine = {r["op_id"]: r["shape"] for r in run(sql, rows)}
    assert [engine[f"o{i}"] for i in range(len(texts))] == [success_template(t) for t in texts]
    assert (
        success_template(texts[0])
        == 'POST {"sql": "SELECT name FROM workers WHERE city = <str> LIMIT <num>"}'
    )
    assert success_template("GET /tables/workers?limit=3&q=x") == "GET ?limit&q"


TRUST_LEVELS = [
    ReporterTrust(),
    RUNTIME,
    ReporterTrust(default="untrusted", levels={"k1": "reporter", "rt": "runtime"}),
    ReporterTrust(default="runtime", levels={"k2": "reporter"}),
]


def tallies(sql: str, rows: list[dict[str, Any]]) -> list[Any]:
    return tallies_from_rows(run(sql, rows), "successes")


@pytest.mark.parametrize("trust", TRUST_LEVELS)
def test_success_tallies_in_the_engine_equal_the_reference(trust: ReporterTrust) -> None:
    rows = success_ops(3_000)
    sql = success_tallies_sql("ops", WINDOW, trust, min_successes=1, min_agents=1)
    engine = tallies_from_rows(run(sql, rows), "successes")
    reference = tally_successes([SuccessRow.model_validate(r) for r in rows if r["success"]], trust)
    assert engine == sorted(reference, key=lambda t: t.group_key)
    assert len(engine) > 10
    assert groups_from_tallies(engine, trust=trust) == groups_from_tallies(reference, trust=trust)


@pytest.mark.parametrize("trust", [ReporterTrust(), RUNTIME])
def test_log_tallies_in_the_engine_equal_the_reference_in_either_format(trust: ReporterTrust) -> None:
    rows = log_ops(2_000)
    engine = tallies_from_rows(
        run(log_tallies_sql("ops", WINDOW, trust, min_records=1, min_agents=1), rows), "log"
    )
    reference = tally_logs([as_log_row(r) for r in rows], trust)
    assert engine == sorted(reference, key=lambda t: t.group_key)
    assert any(t.approach_witnesses and len(t.approach_witnesses) > 2 for t in engine)
    assert groups_from_tallies(engine, trust=trust) == groups_from_tallies(reference, trust=trust)


def test_log_parts_lose_the_same_whitespace_and_case_in_the_engine() -> None:
    # DuckDB's trim(x) strips only " ", str.strip() every whitespace: "match on city\n" was a second
    # approach in the engine, and result "failure\n" (not "failure") a success ("do")
    parts = [("match on city", "failure"), ("match on city\n", "failure"), ("\tmatch on city", "failure\n"),
             ("match on city", "Failure\r\n")]  # fmt: skip
    rows = [
        {"op_id": f"l{i}", "ts": T0 + timedelta(seconds=i), "agent_id": f"a{i}", "reporter_id": f"k{i}",
         "endpoint": "/log", "task_class": "t1", "input_summary": approach, "success": True, "event_kind": "log",
         "attributes": [("operation", "İ fill a shift"), ("result", result), ("log_format", "2")]}
        for i, (approach, result) in enumerate(parts)
    ]  # fmt: skip
    engine = tallies_from_rows(
        run(log_tallies_sql("ops", WINDOW, RUNTIME, min_records=1, min_agents=1), rows), "log"
    )
    reference = tally_logs([as_log_row(r) for r in rows], RUNTIME)
    assert engine == reference
    assert [(t.kind, t.count, dict(t.approach_witnesses or {})) for t in engine] == [
        ("avoid", 4, {"match on city": ("k0", "k1", "k2", "k3")})
    ]


def test_thresholds_leave_small_groups_in_the_engine() -> None:
    rows = success_ops(3_000)
    small = tallies(success_tallies_sql("ops", WINDOW, RUNTIME, min_successes=1, min_agents=1), rows)
    big = tallies(success_tallies_sql("ops", WINDOW, RUNTIME, min_successes=20, min_agents=15), rows)
    assert big == [t for t in small if t.count >= 20 and t.agent_count >= 15] and 0 < len(big) < len(small)


def test_a_big_group_comes_back_in_rows_bounded_by_its_lists_not_its_ops() -> None:
    """5,000 ops of one shape from 200 agents: 150 of them with a key each, 50 on one runtime key.
    The answer is one row per list element (at most 200), the witnesses capped per key first."""
    rows: list[dict[str, Any]] = [
        {"op_id": f"o{i}", "ts": T0 + timedelta(milliseconds=i // 3), "agent_id": f"agent-{i % 200:03d}",
         "reporter_id": f"key-{i % 200:03d}" if i % 200 < 150 else "rt", "endpoint": "/match",
         "task_class": "fill", "input_summary": f"match nurse in city {i}", "success": True}
        for i in range(5_000)
    ]  # fmt: skip
    answer = run(success_tallies_sql("ops", WINDOW, RUNTIME, min_successes=3, min_agents=2), rows)
    assert len(answer) == MAX_TRACKED_AGENTS
    [tally] = tallies_from_rows(answer, "successes")
    assert (tally.count, tally.agent_count, len(tally.agents)) == (5_000, 200, MAX_TRACKED_AGENTS)
    every = [RUNTIME.witness(r["reporter_id"], r["agent_id"]) or "" for r in rows]
    assert list(tally.witnesses) == cap_witnesses(every)
    # a runtime key counts at most 5 of its 50 agents (and keeps as many witnesses)
    assert [w for w in tally.witnesses if w.startswith("rt/")] == [f"rt/agent-{i}" for i in range(150, 155)]
    ordered = sorted(rows, key=lambda r: (r["ts"], r["op_id"]))
    assert list(tally.op_ids) == [r["op_id"] for r in ordered[-MAX_EVIDENCE:]]
    [group] = groups_from_tallies([tally], trust=RUNTIME)
    assert group.excerpts == tuple(r["input_summary"] for r in ordered[:3])
    assert group.reporter_count == RUNTIME.count(every)


def test_the_engine_never_counts_untrusted_keys_or_opslakes_own() -> None:
    rows = [
        {"op_id": f"o{i}", "ts": T0, "agent_id": f"a{i}", "reporter_id": key, "endpoint": "/match",
         "task_class": "fill", "input_summary": "match nurse", "success": True}
        for i, key in enumerate(["evil", "evil", "evil", "opslake-consolidator", "opslake-analyzer", None])
    ]  # fmt: skip
    assert run(success_tallies_sql("ops", WINDOW, RUNTIME, min_successes=1, min_agents=1), rows) == []
