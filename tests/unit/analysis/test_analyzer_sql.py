"""The analyzer's SQL on DuckDB (through the dialect layer): the aggregates the engine returns, merged
into signatures, count exactly what the per-failure SignatureIndex counts, and the failures view gives
every failure the signature the Python mirror gives it."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from opslake.analysis.reporters import ReporterTrust
from opslake.analysis.signatures import SignatureIndex, merge_aggregate, signature_id, template_of
from opslake.jobs.analyzer import MAX_SAMPLES, aggregates_sql, failures_view_sql, merge_samples, samples_sql
from opslake.lake import derived
from opslake.models.analysis import MAX_TRACKED_AGENTS, FailureSample, Signature, SignatureAggregate
from opslake.models.window import Window
from opslake.query.dialect import to_duckdb
from opslake.query.viewsql import passthrough_columns

pytestmark = pytest.mark.unit
T0 = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(hours=2))
OPS = pa.schema(
    [
        *((name, pa.string()) for name in ("op_id", "endpoint", "agent_id", "reporter_id")),
        ("ts", pa.timestamp("ms")),
        ("ingested_at", pa.timestamp("ms")),
        ("success", pa.bool_()),
        *(
            (name, pa.string())
            for name in ("error", "error_type", "input_summary", "task_class", "dt", "hour")
        ),
    ]
)
ERRORS = [
    ("/sql", "sql_failed", "COLUMN_NOT_FOUND: line 1:{n}: Column 'salary_{n}' cannot be resolved"),
    ("/worker/W{n:05d}", "not_found", "worker W-{n:06d} not found"),
    ("tool:fetch", None, "request {n} timed out after {n}12 ms"),
    ("tool:fetch", "", "request {n} timed out after {n}12 ms"),
    ("tool:s3", "AccessDenied", None),
]


def ops_rows(
    n: int, *, seed: int = 3, agents: int = 7, keys: tuple[str, ...] = ("k1", "k2", "rt", "bad")
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        at = T0 + timedelta(seconds=rng.randrange(2 * 3600))
        endpoint, error_type, text = rng.choice(ERRORS)
        k = rng.randrange(50)
        key = rng.choice(keys)
        rows.append(
            {
                "op_id": f"op{i % (n - 3)}",  # a few op ids reused: by another key, or the same (a copy)
                "endpoint": endpoint.format(n=k),
                "agent_id": f"agent-{rng.randrange(agents)}",
                "reporter_id": key,
                "ts": at,
                "ingested_at": at,
                "success": rng.random() < 0.2,
                "error": None if text is None else text.format(n=k),
                "error_type": error_type,
                "input_summary": rng.choice([None, f'{{"sql": "SELECT {k} FROM t"}}', f"attempt {k}"]),
                "task_class": None,
                "dt": at.strftime("%Y-%m-%d"),
                "hour": at.strftime("%H"),
            }
        )
    rows.append({**rows[0], "reporter_id": "opslake-analyzer"})  # the model's own calls: never analyzed
    return rows


def run(
    rows: list[dict[str, Any]], athena_sql: str, merges: Sequence[Mapping[str, str]] = ()
) -> list[dict[str, Any]]:
    """The Athena SQL on DuckDB over ``rows`` as ``ops`` and ``merges`` as ``signature_merges``."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    table = pa.Table.from_pylist(rows, schema=OPS)
    con.register("ops_arrow", table)
    con.execute("CREATE TABLE ops AS SELECT * FROM ops_arrow")
    con.register("signature_merges", derived.to_table("signature_merges", list(merges)))
    relation = con.sql(to_duckdb(athena_sql).sql)
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


def python_signatures(rows: list[dict[str, Any]], trust: ReporterTrust) -> dict[str, Signature]:
    seen: set[tuple[str, str]] = set()
    failures = []
    for r in sorted(rows, key=lambda r: (r["ingested_at"], r["op_id"])):
        if r["success"] or r["reporter_id"].startswith("opslake-") or (r["reporter_id"], r["op_id"]) in seen:
            continue
        seen.add((r["reporter_id"], r["op_id"]))
        failures.append(FailureSample.model_validate(r))
    index = SignatureIndex(trust=trust)
    index.apply(failures)
    return index.signatures


def engine_signatures(rows: list[dict[str, Any]], trust: ReporterTrust) -> dict[str, Signature]:
    sql = aggregates_sql("ops", WINDOW, read_until=WINDOW.end, count_until=WINDOW.end, trust=trust)
    signatures: dict[str, Signature] = {}
    for row in run(rows, sql):
        merge_aggregate(signatures, SignatureAggregate.model_validate(row), trust=trust)
    return signatures


@pytest.mark.parametrize("agents", [7, MAX_TRACKED_AGENTS + 40])
def test_engine_aggregates_count_what_the_per_failure_index_counts(agents: int) -> None:
    trust = ReporterTrust(levels={"rt": "runtime", "bad": "untrusted"})
    rows = ops_rows(2_000, agents=agents)
    python, engine = python_signatures(rows, trust), engine_signatures(rows, trust)
    assert set(engine) == set(python) and len(engine) == 4  # '' and None error types share a template
    for sid, want in python.items():
        got = engine[sid]
        assert (got.template, got.endpoint, got.count) == (want.template, want.endpoint, want.count)
        assert (got.first_seen, got.last_seen) == (want.first_seen, want.last_seen)
        assert got.agent_count == want.agent_count and len(got.agents) == len(set(got.agents))
        if agents < MAX_TRACKED_AGENTS:
            assert set(got.agents) == set(want.agents)
        else:  # the cap keeps the alphabetically first agents: the same on every engine
            assert got.agents == sorted(got.agents) and len(got.agents) == want.agent_count
        # a runtime key's first witnesses are its alphabetically first agents (the index keeps the first arrived)
        assert got.reporter_count == want.reporter_count and len(got.reporters) == len(want.reporters)
        assert {w for w in got.reporters if "/" not in w} == {w for w in want.reporters if "/" not in w}
        assert set(got.variants) == set(want.variants)
        assert got.sample_op_ids == want.sample_op_ids  # the earliest five, in arrival order


def test_a_trust_default_of_untrusted_counts_only_named_keys_as_reporters() -> None:
    trust = ReporterTrust(levels={"k1": "reporter", "rt": "runtime"}, default="untrusted")
    rows = ops_rows(800, seed=5)
    python, engine = python_signatures(rows, trust), engine_signatures(rows, trust)

    def summary(sig: Signature) -> tuple[int, int, list[str]]:
        return sig.count, sig.reporter_count, sorted({w.partition("/")[0] for w in sig.reporters})

    assert {s: summary(g) for s, g in engine.items()} == {s: summary(w) for s, w in python.items()}
    assert all(summary(g)[2] == ["k1", "rt"] for g in engine.values())


def test_the_engine_returns_rows_per_template_not_per_op() -> None:
    trust = ReporterTrust()
    rows = ops_rows(2_500, seed=9)
    aggregates = run(
        rows, aggregates_sql("ops", WINDOW, read_until=WINDOW.end, count_until=WINDOW.end, trust=trust)
    )
    samples = run(rows, samples_sql("ops", WINDOW, read_until=WINDOW.end, trust=trust))
    assert len(aggregates) == 4 and sum(a["count"] for a in aggregates) > 1_500
    assert len(samples) <= 4 * MAX_SAMPLES


def test_samples_come_only_from_keys_that_count_distinct_errors_first() -> None:
    trust = ReporterTrust(levels={"bad": "untrusted"})
    rows = ops_rows(2_000, seed=4)
    samples = run(rows, samples_sql("ops", WINDOW, read_until=WINDOW.end, trust=trust))
    assert samples and {s["reporter_id"] for s in samples} <= {"k1", "k2", "rt"}
    by_sig: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_sig.setdefault(s["signature_id"], []).append(s)
    for sid, kept in by_sig.items():
        assert len(kept) == MAX_SAMPLES
        assert signature_id(template_of(kept[0]["endpoint"], kept[0]["error_type"], kept[0]["error"])) == sid
        errors = [s["error"] for s in kept]
        if len(set(errors)) > 1:
            assert len(set(errors)) == len(errors)  # 50 wordings per problem: five different ones


def test_merge_samples_keeps_new_distinct_errors_first_and_one_per_op() -> None:
    old = [{"op_id": f"o{i}", "reporter_id": "k", "error": "same"} for i in range(5)]
    new = [
        {"op_id": "n1", "reporter_id": "k", "error": "other"},
        {"op_id": "o1", "reporter_id": "k", "error": "same"},
    ]
    merged = merge_samples(new, old)
    assert [s["op_id"] for s in merged] == ["n1", "o1", "o0", "o2", "o3"]


def test_the_failures_view_has_one_row_per_failed_op_whatever_the_copies() -> None:
    """ops is at-least-once until compaction (a redelivered copy keeps its ingested_at, so its
    partition): the view, like the analyzer, counts an op once per (reporter_id, op_id); dt and
    hour stay plain group keys, so the embedded engine still prunes queries on the view."""
    rows = [
        r for r in ops_rows(300, seed=5) if not r["success"] and not r["reporter_id"].startswith("opslake-")
    ]
    once = run(rows, failures_view_sql("ops"))
    found = run([*rows, *rows[:40], *rows[:3]], failures_view_sql("ops"))  # redelivered copies
    assert sorted(found, key=str) == sorted(once, key=str)
    assert len(found) == len({(r["reporter_id"], r["op_id"], r["dt"], r["hour"]) for r in rows})
    assert len(run([rows[0], dict(rows[0])], failures_view_sql("ops"))) == 1
    assert passthrough_columns(failures_view_sql("ops")) == {"dt", "hour"}


def test_the_failures_view_gives_each_failure_the_python_signature() -> None:
    rows = ops_rows(1_500, seed=8)
    found = run(rows, failures_view_sql("ops"))
    failed = [r for r in rows if not r["success"] and not r["reporter_id"].startswith("opslake-")]
    # one row per (reporter_id, op_id, dt, hour) (ops_rows reuses a few op ids), its least signature
    want: dict[tuple[str, str, str, str], str] = {}
    for r in failed:
        key = (r["reporter_id"], r["op_id"], r["dt"], r["hour"])
        sid = signature_id(template_of(r["endpoint"], r["error_type"], r["error"]))
        want[key] = min(sid, want.get(key, sid))
    assert {(r["reporter_id"], r["op_id"], r["dt"], r["hour"]): r["signature_id"] for r in found} == want
    assert len(found) == len(want)
    assert set(found[0]) == {
        "op_id",
        "signature_id",
        "endpoint",
        "agent_id",
        "error_type",
        "ts",
        "ingested_at",
        "reporter_id",
        "dt",
        "hour",
    }


def test_an_endpoint_that_masking_lengthens_past_an_id_is_cut_and_counted() -> None:
    """A valid 200-character endpoint of numeric segments ("/1" * 100) masks to 500 characters,
    beyond SignatureAggregate.endpoint (an Id): that one op failed the whole analyzer run, so the
    watermark never advanced. The engine and the Python mirror cut it alike (198 and " …")."""
    trust = ReporterTrust()
    endpoints = ["/1" * 100, "/a " + "/1" * 97 + "/x", "/ab/" + "x" * 190 + "/12", "/" + "1/" * 99 + "é"]
    assert all(len(e) <= 200 for e in endpoints)
    rows = [
        {**r, "endpoint": endpoints[i % len(endpoints)], "success": False}
        for i, r in enumerate(ops_rows(40, seed=4))
        if not r["reporter_id"].startswith("opslake-")
    ]
    python, engine = python_signatures(rows, trust), engine_signatures(rows, trust)  # validates every row
    assert set(engine) == set(python)
    assert sum(s.count for s in engine.values()) == sum(s.count for s in python.values()) > 0
    for sid, want in python.items():
        assert (engine[sid].endpoint, engine[sid].template) == (want.endpoint, want.template)
        assert len(want.endpoint) <= 200
    cut = {s.endpoint for s in engine.values() if s.endpoint.endswith(" …")}
    assert "/{id}" * 39 + "/{i …" in cut and len(cut) >= 2
    found = run(rows, failures_view_sql("ops"))
    assert {r["signature_id"] for r in found} == set(python)


def test_the_view_and_signature_of_failure_count_a_word_variant_under_its_merged_signature() -> None:
    """Everything that computes a signature in SQL agrees with the analyzer's merge: the failures
    view (a LEFT JOIN) and signature_of_failure (a correlated lookup, used by the contrast, the
    experiment and the corrections) give a word variant its merged signature, any other failure
    its own, a success none; the view still prunes partitions (dt and hour come from ops)."""
    from opslake.analysis.playbooks.contrast_sql import signature_of_failure
    from opslake.analysis.signatures import MergedRaw, NewTemplate, merge_variants, merged_id
    from opslake.query.viewsql import joined_tables

    texts = [f"no stock of blue sneakers in {city}" for city in ("Lyon", "Paris", "Nice", "Lille")]
    texts += ["warehouse closed for inventory", "no stock of red boots in Lyon"]
    rows = []
    for i, text in enumerate(texts * 3):
        at = T0 + timedelta(minutes=i)
        rows.append(
            {"op_id": f"op{i}", "endpoint": "tool:stock", "agent_id": "a", "reporter_id": "k", "ts": at,
             "ingested_at": at, "success": i == 0, "error": text, "error_type": "OutOfStock",
             "input_summary": None, "task_class": None, "dt": f"{at:%Y-%m-%d}", "hour": f"{at:%H}"}
        )  # fmt: skip
    raw = {r["op_id"]: signature_id(template_of(r["endpoint"], r["error_type"], r["error"])) for r in rows}
    signatures: dict[str, Signature] = {}
    merged: dict[str, MergedRaw] = {}
    new = [NewTemplate(raw[r["op_id"]], r["endpoint"], r["error_type"], template_of(
        r["endpoint"], r["error_type"], r["error"]), r["ts"]) for r in rows]  # fmt: skip
    merge_variants(signatures, merged, new)
    assert len(merged) == 4  # the four cities; the red boots in Lyon stay apart (one value)
    table = [
        {"raw_signature_id": r, "signature_id": m.signature_id, "template": signatures[m.signature_id].template,
         "raw_template": m.template}
        for r, m in merged.items()
    ]  # fmt: skip
    want = {r["op_id"]: merged_id(merged, raw[r["op_id"]]) for r in rows if not r["success"]}
    assert len(set(want.values())) == 3

    view = run(rows, failures_view_sql("ops"), table)
    assert {r["op_id"]: r["signature_id"] for r in view} == want
    assert passthrough_columns(failures_view_sql("ops")) == {"dt", "hour"}
    assert joined_tables(failures_view_sql("ops")) == {("", "signature_merges")}

    found = run(rows, f"SELECT op_id, {signature_of_failure()} AS signature_id FROM ops", table)
    assert {r["op_id"]: r["signature_id"] for r in found if r["signature_id"] is not None} == want
    assert [r["signature_id"] for r in found if r["op_id"] == "op0"] == [None]  # a success
    aliased = run(rows, f"SELECT o.op_id, {signature_of_failure('o')} AS signature_id FROM ops o", table)
    assert sorted(aliased, key=str) == sorted(found, key=str)
    # before any merge (an empty table) every failure keeps its raw signature
    assert {r["op_id"]: r["signature_id"] for r in run(rows, failures_view_sql("ops"))} == {
        k: raw[k] for k in want
    }


def test_the_consolidators_corrections_count_failures_under_their_merged_signature() -> None:
    """corrections_sql computes the raw signature in a subquery and looks it up one level up (the
    masking once per op): a merged variant counts under its merged id, any other failure keeps its
    own, whatever else the table maps."""
    from opslake.jobs.consolidator import corrections_sql
    from opslake.lake.schema import OPS_SCHEMA

    texts = ["no stock of blue sneakers in Lyon", "no stock of blue sneakers in Paris", "warehouse closed"]
    rows = [
        {"op_id": f"c{i}", "ts": T0 + timedelta(minutes=i), "ingested_at": T0 + timedelta(minutes=i),
         "endpoint": "tool:stock", "source": "runtime", "agent_id": "a", "reporter_id": "k", "success": False,
         "duration_ms": 1.0, "error": text, "error_type": "OutOfStock", "dt": f"{T0:%Y-%m-%d}", "hour": f"{T0:%H}"}
        for i, text in enumerate(texts)
    ]  # fmt: skip
    raw = [signature_id(template_of("tool:stock", "OutOfStock", t)) for t in texts]
    merges = [
        {"raw_signature_id": r, "signature_id": "sig_merged", "template": "t", "raw_template": "r"}
        for r in raw[:2]
    ] + [
        {
            "raw_signature_id": "sig_other",
            "signature_id": "sig_elsewhere",
            "template": "t",
            "raw_template": "r",
        }
    ]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    schema = OPS_SCHEMA.append(pa.field("dt", pa.string())).append(pa.field("hour", pa.string()))
    con.register("ops", pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema))
    con.register("signature_merges", derived.to_table("signature_merges", merges))
    relation = con.sql(to_duckdb(corrections_sql("ops", WINDOW, ["tool:stock"])).sql)
    found = [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]
    counted: dict[str, int] = {}
    for r in found:  # one row per minute and signature
        counted[r["signature_id"]] = counted.get(r["signature_id"], 0) + r["count"]
    assert counted == {"sig_merged": 2, raw[2]: 1}
