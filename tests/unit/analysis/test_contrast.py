"""Specific entries from contrasts (issue 16): the engine samples each repeated failure beside the
successes of the same endpoint and task class (:func:`contrast_samples_sql`, Athena SQL run on
DuckDB through the dialect layer), and :func:`contrast_groups` states what differs as when / do /
instead of, with concrete validated names. tests/data/contrast/demo_ops.jsonl holds the ops of one
``make demo`` run: each planted mistake of the simulator gives its specific entry."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from opslake.analysis.catalog.catalog_sql import catalog_window_sql
from opslake.analysis.catalog.fold import fold
from opslake.analysis.catalog.known import Vocabulary, vocabulary_of
from opslake.analysis.playbooks import (
    CandidateGroup,
    DistilledCandidate,
    contrast_samples_sql,
    parse_call,
    rejection_reason,
)
from opslake.analysis.playbooks import contrast_groups as _contrast_groups
from opslake.analysis.playbooks import distill as _distill
from opslake.analysis.playbooks import distill_groups as _distill_groups
from opslake.analysis.playbooks import heuristic_draft as _heuristic_draft
from opslake.analysis.playbooks import merge_candidates as _merge_candidates
from opslake.analysis.playbooks import quality_refusal as _quality_refusal
from opslake.analysis.playbooks.contrast_sql import (
    FAILURES_PER_GROUP,
    SUCCESSES_PER_CLASS,
    SUCCESSES_PER_REPORTER,
)
from opslake.analysis.reporters import ReporterTrust
from opslake.lake import derived
from opslake.models.analysis import Diagnosis
from opslake.models.catalog import ToolCatalog
from opslake.models.playbooks import MAX_ACTION_CHARS, MAX_FIX_NAMES
from opslake.models.window import Window
from opslake.query.dialect import to_duckdb
from tests.vocabulary import gateway_routes, staffing_tables, staffing_vocabulary, with_tools

pytestmark = pytest.mark.unit

DEMO_OPS = Path(__file__).parents[2] / "data" / "contrast" / "demo_ops.jsonl"
SCHEMA = pa.schema(
    [
        ("op_id", pa.string()), ("ts", pa.timestamp("ms")), ("ingested_at", pa.timestamp("ms")),
        ("agent_id", pa.string()), ("reporter_id", pa.string()), ("session_id", pa.string()),
        ("endpoint", pa.string()), ("task_class", pa.string()), ("success", pa.bool_()), ("source", pa.string()),
        ("trace_id", pa.string()),
        ("event_kind", pa.string()), ("error_type", pa.string()), ("error", pa.string()),
        ("input_summary", pa.string()), ("output_summary", pa.string()),
        ("attributes", pa.map_(pa.string(), pa.string())), ("dt", pa.string()), ("hour", pa.string()),
    ]
)  # fmt: skip
TRUST = ReporterTrust()
NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def demo_ops() -> list[dict[str, Any]]:
    lines = DEMO_OPS.read_text("utf-8").splitlines()[1:]  # the first line says what the file is
    return [json.loads(line) for line in lines]


def table(ops: Iterable[Mapping[str, Any]]) -> pa.Table:
    rows = []
    for op in ops:
        ts = datetime.fromisoformat(op["ts"]) if isinstance(op["ts"], str) else op["ts"]
        tokens = op.get("input_tokens")
        rows.append(
            {**{k: op.get(k) for k in SCHEMA.names}, "ts": ts, "ingested_at": ts,
             "attributes": [("gen_ai.usage.input_tokens", tokens)] if tokens else [],
             "dt": ts.strftime("%Y-%m-%d"), "hour": ts.strftime("%H")}
        )  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def window_of(ops: list[dict[str, Any]]) -> Window:
    times = [datetime.fromisoformat(o["ts"]).replace(tzinfo=UTC) for o in ops]
    return Window(min(times) - timedelta(minutes=1), max(times) + timedelta(minutes=1))


def run(sql: str, ops: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Athena SQL run by DuckDB over ``ops`` as the ``ops`` table."""
    con = duckdb.connect()
    con.register("ops", table(ops))
    con.register("signature_merges", derived.to_table("signature_merges", []))  # no word variants merged
    cursor = con.execute(to_duckdb(sql).sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def samples(ops: list[dict[str, Any]], *, min_failures: int = 3, min_agents: int = 2) -> list[dict[str, Any]]:
    sql = contrast_samples_sql("ops", window_of(ops), TRUST, min_failures=min_failures, min_agents=min_agents)
    return run(sql, ops)


def learned(ops: list[dict[str, Any]]) -> Vocabulary:
    """The vocabulary a consolidator run reads after these ops: the tool catalog the engine tallies
    from them (the real query, on DuckDB), and the staffing tables and routes (Glue, template.yaml)."""
    rows = run(catalog_window_sql("ops", window_of(ops), TRUST), ops)
    catalog = fold(ToolCatalog(), rows, now=NOW)
    return vocabulary_of(catalog, staffing_tables(), routes=gateway_routes())


#: What the demo's own traffic taught the catalog (its tests); the others use the staffing world's
#: vocabulary (the gateway tools as tools/list declares them, the sample's tables).
VOCABULARY = learned(demo_ops())
STAFFING = staffing_vocabulary()


def contrast_groups(
    rows: Any, *, trust: ReporterTrust, vocabulary: Vocabulary | None = None
) -> list[CandidateGroup]:
    return _contrast_groups(rows, trust=trust, vocabulary=vocabulary or STAFFING)


def distill(
    group: CandidateGroup, ask: Any = None, *, vocabulary: Vocabulary | None = None, **options: Any
) -> Any:
    return _distill(group, ask, vocabulary=vocabulary or STAFFING, **options)


def distill_groups(
    groups: Any, ask: Any = None, *, vocabulary: Vocabulary | None = None, **options: Any
) -> Any:
    return _distill_groups(groups, ask, vocabulary=vocabulary or STAFFING, **options)


def heuristic_draft(group: CandidateGroup, vocabulary: Vocabulary | None = None) -> Any:
    return _heuristic_draft(group, vocabulary or STAFFING)


def merge_candidates(*args: Any, vocabulary: Vocabulary | None = None, **options: Any) -> Any:
    return _merge_candidates(*args, vocabulary=vocabulary or STAFFING, **options)


def quality_refusal(*args: Any, vocabulary: Vocabulary | None = None, **options: Any) -> Any:
    return _quality_refusal(*args, vocabulary=vocabulary or STAFFING, **options)


# (endpoint, task class, kind, names, when, do, instead of): what the demo's ops teach, with the
# names the catalog learned from the same ops (no city was ever sent to /match in this run: the fix
# names what the traffic knows, role and state)
DEMO_FIXES = {
    ("/match", "staff_job", "missing_argument", ("role", "state"), "Building a POST /match body",
     "Send role and state in the POST /match body", "a body with only need and count"),
    ("/sql", "sql_question", "aggregate", ("count(*)", "avg()"),
     "Answering a count, average or top-N question with POST /sql",
     "Aggregate in SQL (count(*), avg()) instead of listing rows: /sql cuts answers at its row limit",
     "rows listed and then counted outside SQL"),
    ("/sql", "sql_question", "column", ("workers", "availability"), "SQL over workers",
     "Use the column availability of workers", "availability_status"),
    ("/sql", "sql_question", "column", ("workers", "hourly_rate"), "SQL over workers",
     "Use the column hourly_rate of workers", "pay_rate, salary"),
    ("/sql", "sql_question", "column", ("placements", "status"), "SQL over placements",
     "Use the column status of placements", "a column name guessed from the question"),
    ("/sql", "sql_question", "column", ("workers", "rating"), "SQL over workers",
     "Use the column rating of workers", "a column name guessed from the question"),
    ("/sql", "sql_question", "json_body", ("json.dumps",), "Sending a JSON body to POST /sql",
     "Build the POST /sql body with a JSON encoder (json.dumps), never by hand",
     "a body written by hand that is not valid JSON"),
    ("/worker/{id}", "staff_job", "value_shape", ("id", "^W[0-9]{5}$"), "Calling GET /worker/{id}",
     "Use worker ids of the form W + 5 digits (W[0-9]{5})", "worker ids like w-9999 or 9999"),
    ("/worker/{id}", "worker_lookup", "value_shape", ("id", "^W[0-9]{5}$"), "Calling GET /worker/{id}",
     "Use worker ids of the form W + 5 digits (W[0-9]{5})", "worker ids like 9999"),
    ("/worker/{id}", "worker_lookup", "preceding_call", ("/sql",), "Calling GET /worker/{id}",
     "Take worker ids from a POST /sql answer; never guess them", "worker ids written from memory"),
    ("runtime:model_call", "sql_question", "prompt_bound", ("12000",), "Calling the model (runtime:model_call)",
     "Keep model prompts under 12000 input tokens", "prompts of 48000 input tokens or more"),
}  # fmt: skip


def fixes(groups: Iterable[CandidateGroup]) -> set[tuple[Any, ...]]:
    return {
        (g.endpoint, g.task_class, g.fix_kind, g.fix_names, g.fix_when, g.fix_action, g.instead_of)
        for g in groups
    }


# ---- the demo's ops ------------------------------------------------------------------------------
def test_each_planted_mistake_of_the_demo_gives_its_specific_entry() -> None:
    """Guessed columns, /match bodies without role and state, malformed and unknown worker ids,
    listings cut at the row limit, hand-cut JSON bodies and model calls that time out: each gives
    the fix a reader can act on, with the real names."""
    groups = contrast_groups(samples(demo_ops()), trust=TRUST, vocabulary=VOCABULARY)
    assert fixes(groups) == DEMO_FIXES
    for group in groups:
        assert group.source == "contrast" and group.kind == "do" and group.signature_id
        # the key names the fix; the fixes the rules before the catalog found keep their keys (issue 24:
        # an upgrade goes on with their entries and experiments)
        legacy = {"missing_argument": "fields", "value_shape": "id_format", "preceding_call": "id_source"}
        kind = (
            legacy.get(group.fix_kind or "", group.fix_kind) if group.endpoint != "/sql" else group.fix_kind
        )
        names = group.fix_names[1:] if kind == "id_format" else group.fix_names
        assert group.group_key == "|".join(
            ["contrast", group.endpoint, group.task_class or "-", kind or "", ",".join(sorted(names))]
        )
        assert group.agent_count >= 2  # agents of both sides
        # reporters are the failing ops' witnesses: one key alone made the rating mistake in this run
        # (the entry waits, proposed, for a second key); each other fix has two keys behind it
        solo = group.fix_names == ("workers", "rating")
        assert group.reporter_count == 1 if solo else group.reporter_count >= 2


def test_the_demo_s_contrast_entries_pass_the_fence_and_the_gate_and_name_no_instance() -> None:
    groups = contrast_groups(samples(demo_ops()), trust=TRUST, vocabulary=VOCABULARY)
    drafts = [(g, distill(g, vocabulary=VOCABULARY)) for g in groups]
    result = merge_candidates(
        [],
        [DistilledCandidate(g, d, by) for g, (d, by) in drafts if d is not None],
        now=NOW,
        vocabulary=VOCABULARY,
    )
    assert not result.rejected
    assert len(result.created) == len(DEMO_FIXES)
    for entry in result.entries:
        solo = entry.fix_names == ["workers", "rating"]  # one key's failures: proposed, not served
        assert entry.status == ("proposed" if solo else "active") and entry.source == "contrast"
        assert entry.fix_kind is not None and entry.fix_names and entry.instead_of
        text = f"{entry.trigger} {entry.action} {entry.instead_of}"
        for instance in ("W90519", "w-8013", "1062", "Tucson", "warehouse associate", "'CA'"):
            assert instance not in text


def test_the_runtime_s_truncated_answers_are_linked_to_the_call_it_judged() -> None:
    rows = samples(demo_ops())
    cut = [r for r in rows if r["side"] == "failure" and r["error_type"] == "result_truncated"]
    assert cut and all(r["input_summary"] and not r["input_summary"].startswith("POST") for r in cut)
    for row in cut:  # the question is the input; the listing SQL of the same key and session is linked
        assert row["linked_input"].startswith('POST /sql {"sql":"SELECT ')
        assert "count(" not in row["linked_input"] and row["linked_op_id"]
    gateway = [r for r in rows if r["side"] == "failure" and r["source"] == "gateway"]
    assert gateway and all(r["linked_input"] is None for r in gateway)


def test_the_samples_are_bounded_by_groups() -> None:
    """At most 20 failures per group and 50 successes per (endpoint, task class), newest first;
    cut answers ("… (truncated)") are no successes, nor are /log records, retries or corrections."""
    ops = demo_ops()
    many = [
        {
            **op,
            "op_id": f"{op['op_id']}-{i}",
            "ts": (datetime.fromisoformat(op["ts"]) + timedelta(seconds=i)).isoformat(),
        }
        for i in range(4)
        for op in ops
    ]
    rows = samples(many)
    failures = [r for r in rows if r["side"] == "failure"]
    groups = {(r["endpoint"], r["task_class"], r["signature_id"]) for r in failures}
    classes = {(r["endpoint"], r["task_class"]) for r in failures}
    assert len(failures) <= FAILURES_PER_GROUP * len(groups)
    assert len(rows) - len(failures) <= SUCCESSES_PER_CLASS * len(classes)
    assert (
        max(
            sum(1 for r in failures if (r["endpoint"], r["task_class"], r["signature_id"]) == g)
            for g in groups
        )
        == 20
    )
    by_id = {op["op_id"]: op for op in many}
    for row in rows:
        op = by_id[row["op_id"]]
        assert "(truncated)" not in (op.get("output_summary") or "")
        assert op.get("event_kind") not in ("log", "correction") and op.get("source") != "overseer_correction"
        if row["side"] == "failure":
            assert op.get("event_kind") != "rescue"
    # more of the same teaches the same fixes (and, with more successes, the staff_job prompt bound)
    found = {f[:4] for f in fixes(contrast_groups(rows, trust=TRUST, vocabulary=VOCABULARY))}
    assert {f[:4] for f in DEMO_FIXES} <= found


def test_the_sql_is_athena_sql() -> None:
    sql = contrast_samples_sql("ops", window_of(demo_ops()), TRUST, min_failures=3, min_agents=2)
    for dialect in ("athena", "trino"):
        (tree,) = sqlglot.parse(sql, read=dialect)
        assert tree is not None


def test_untrusted_keys_and_too_few_agents_make_no_contrast() -> None:
    ops = demo_ops()
    untrusted = ReporterTrust(levels={r: "untrusted" for r in {o["reporter_id"] for o in ops}})
    sql = contrast_samples_sql("ops", window_of(ops), untrusted, min_failures=3, min_agents=2)
    assert run(sql, ops) == []
    assert contrast_groups(samples(ops), trust=untrusted) == []
    assert samples(ops, min_agents=50) == []


# ---- the rules, one by one -----------------------------------------------------------------------
def row(
    side: str, input_summary: str | None, *, n: int, reporter: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "side": side, "endpoint": "/sql", "task_class": "q", "signature_id": "sig_1" if side == "failure" else None,
        "op_id": f"{side}{n}", "agent_id": f"a{n}", "reporter_id": reporter or f"k{n}", "session_id": f"s{n}",
        "error_type": None, "error": None, "input_summary": input_summary, "linked_input": None,
        "earlier_ok": "", "input_tokens": None, **extra,
    }  # fmt: skip


def sql_call(sql: str) -> str:
    return "POST /sql " + json.dumps({"sql": sql, "limit": 100}, separators=(",", ":"))


def test_parse_call_reads_what_the_gateway_records() -> None:
    call = parse_call('POST /match?b=1&a=2 {"role":"welder","count":2}')
    assert (call.method, call.segments, call.query_keys, call.parsed) == (
        "POST",
        ("match",),
        ("a", "b"),
        True,
    )
    assert call.body == {"role": "welder", "count": 2} and call.sql is None
    assert parse_call(sql_call("SELECT 1")).sql == "SELECT 1"
    cut = parse_call('POST /sql {"sql": "SELECT a FROM workers WHERE role = \'we')
    assert not cut.parsed and cut.body is None and cut.sql is None
    assert parse_call("GET /worker/W00042").segments == ("worker", "W00042")
    assert parse_call("how many welders").method is None
    assert parse_call(None).segments == ()


def test_column_needs_a_success_that_differs_only_in_the_guessed_name() -> None:
    err = "COLUMN_NOT_FOUND: Column 'wage' cannot be resolved"
    rows = [
        row("failure", sql_call("SELECT avg(wage) FROM workers WHERE role = 'nurse'"), n=1, error=err),
        row("failure", sql_call("SELECT avg(wage) FROM workers WHERE role = 'welder'"), n=2, error=err),
        row("success", sql_call("SELECT avg(hourly_rate) FROM workers WHERE role = 'cook'"), n=3),
        row("success", sql_call("SELECT avg(hourly_rate) FROM workers WHERE role = 'driver'"), n=4),
        # same shape, a filler that is no column of workers: no evidence
        row("success", sql_call("SELECT avg(nonsense) FROM workers WHERE role = 'x'"), n=5),
        # another shape entirely
        row("success", sql_call("SELECT name FROM workers WHERE rating > 4"), n=6),
    ]
    (group,) = contrast_groups(rows, trust=TRUST)
    assert (group.fix_kind, group.fix_names) == ("column", ("workers", "hourly_rate"))
    assert group.fix_action == "Use the column hourly_rate of workers"
    assert group.instead_of == "wage"  # written by two reporters
    assert set(group.op_ids) == {"failure1", "failure2", "success3", "success4"}
    # one reporter's wrong name is not quoted; nor a name that is no plain identifier
    one = [r for r in rows if r["op_id"] != "failure2"]
    assert contrast_groups(one, trust=TRUST)[0].instead_of == "a column name guessed from the question"


def test_column_of_a_table_the_catalog_does_not_know_is_no_fix() -> None:
    err = "COLUMN_NOT_FOUND: Column 'x' cannot be resolved"
    rows = [
        row("failure", sql_call("SELECT x FROM secrets"), n=1, error=err),
        row("success", sql_call("SELECT y FROM secrets"), n=2),
        row("success", sql_call("SELECT y FROM secrets"), n=3),
    ]
    assert contrast_groups(rows, trust=TRUST) == []


def test_fields_from_the_error_keep_their_alternatives() -> None:
    err = "missing required filter(s): role, city or state; a match needs a role"
    body = '{"need":"welding","count":2}'
    rows = [
        row("failure", f"POST /match {body}", n=i, error=err, endpoint="/match", error_type="bad_request")
        for i in (1, 2)
    ] + [
        row("success", f'POST /match {{"role":"welder","state":"TX","need":"welding","count":{i}}}', n=i,
            endpoint="/match")
        for i in (3, 4, 5)
    ]  # fmt: skip
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_names == ("role", "city|state")
    assert group.fix_action == "Send role and a city or state in the POST /match body"
    assert group.instead_of == "a body with only need and count"


def test_fields_without_an_error_list_come_from_the_bodies() -> None:
    rows = [
        row("failure", 'POST /match {"need":"x","count":2}', n=i, error="no match", endpoint="/match") for i in (1, 2)
    ] + [
        row("success", f'POST /match {{"role":"cook","need":"x","count":{i},"evil":1}}', n=i, endpoint="/match")
        for i in (3, 4, 5)
    ]  # fmt: skip
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_names == ("role",)  # "evil" is no tool field: never named
    assert group.fix_action == "Send role in the POST /match body"


def many_fields_rows(fields: list[str]) -> list[dict[str, Any]]:
    """Failing /match calls whose error lists ``fields`` as missing, beside successes sending them all."""
    err = f"missing required field(s): {', '.join(fields)}"
    full = {f: 1 for f in fields}
    return [
        row("failure", 'POST /match {"need":"x"}', n=i, error=err, endpoint="/match", error_type="bad_request")
        for i in (1, 2, 3)
    ] + [
        row("success", "POST /match " + json.dumps({**full, "need": "x", "count": i}), n=i, endpoint="/match")
        for i in (4, 5, 6)
    ]  # fmt: skip


def test_a_fields_fix_with_more_names_than_an_entry_holds_is_not_stated_and_the_run_goes_on() -> None:
    """An entry holds at most MAX_FIX_NAMES names: a fix needing more (or whose action would be cut
    short, leaving fields out) is no fix; it used to reach the merge and fail the entry's validation."""
    many = [
        "role",
        "state",
        "city",
        "skills",
        "certifications",
        "availability",
        "min_rating",
        "max_rate",
        "hours",
    ]
    assert len(many) > MAX_FIX_NAMES
    wide = with_tools({"/match": [*many, "need", "count"]})  # a tool that takes them all
    groups = contrast_groups(many_fields_rows(many), trust=TRUST, vocabulary=wide)
    assert [g for g in groups if g.fix_kind == "missing_argument"] == []
    result = merge_candidates(
        [], distill_groups(groups, vocabulary=wide).candidates, now=NOW, vocabulary=wide
    )
    assert all(len(e.fix_names) <= MAX_FIX_NAMES for e in result.entries)  # no ValidationError either
    # within the limit the fix is stated whole, and the merge makes a valid entry of it
    few = many[:4]
    (group,) = contrast_groups(many_fields_rows(few), trust=TRUST, vocabulary=wide)
    assert sorted(group.fix_names) == sorted(few) and group.fix_action is not None
    assert all(name in group.fix_action for name in few) and len(group.fix_action) <= MAX_ACTION_CHARS
    (entry,) = merge_candidates(
        [], distill_groups([group], vocabulary=wide).candidates, now=NOW, vocabulary=wide
    ).entries
    assert sorted(entry.fix_names) == sorted(few) and entry.action == group.fix_action


def test_id_format_shows_shapes_never_instances() -> None:
    err = "worker id must be W followed by five digits, e.g. W00042 (got 'w-8013')"
    rows = [
        row("failure", f"GET /worker/{v}", n=i, error=err, endpoint="/worker/{id}", error_type="bad_request")
        for i, v in enumerate(["w-8013", "1062", "w-4821"])
    ] + [row("success", f"GET /worker/W0004{i}", n=10 + i, endpoint="/worker/{id}") for i in range(3)]
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_kind == "value_shape" and group.fix_names == ("id", "^W[0-9]{5}$")
    assert group.fix_action == "Use worker ids of the form W + 5 digits (W[0-9]{5})"
    assert group.instead_of == "worker ids like w-9999 or 9999"
    assert (
        quality_refusal(group.fix_when or "", group.fix_action, group.instead_of, "/worker/{id}", None)
        is None
    )


def test_id_source_names_the_calls_that_answered_before_the_successes() -> None:
    err = "no worker with id 'W90519'"
    rows = [
        row("failure", f"GET /worker/W9051{i}", n=i, error=err, endpoint="/worker/{id}", error_type="not_found")
        for i in range(3)
    ] + [
        row("success", f"GET /worker/W0004{i}", n=10 + i, endpoint="/worker/{id}", earlier_ok="GET /tables,POST /sql")
        for i in range(3)
    ]  # fmt: skip
    # the failing sessions listed tables too: only /sql tells the successes apart
    rows = [{**r, "earlier_ok": "GET /tables"} if r["side"] == "failure" else r for r in rows]
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_kind == "preceding_call" and group.fix_names == ("/sql",)
    assert group.fix_action == "Take worker ids from a POST /sql answer; never guess them"


def test_aggregate_needs_listing_sql_behind_truncated_answers() -> None:
    listing = sql_call("SELECT worker_id FROM workers WHERE role = 'cook'")
    rows = [
        row("failure", "how many cooks", n=i, error="answer incomplete: truncated", error_type="result_truncated",
            linked_input=listing, source="runtime")
        for i in (1, 2)
    ] + [
        row("success", sql_call("SELECT count(*) FROM workers WHERE role = 'cook'"), n=3),
        row("success", sql_call("SELECT name, rating FROM workers ORDER BY rating DESC LIMIT 5"), n=4),
    ]  # fmt: skip
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_kind == "aggregate" and "row limit" in (group.fix_action or "")
    # the runtime linked no call: nothing to compare
    unlinked = [{**r, "linked_input": None} for r in rows]
    assert contrast_groups(unlinked, trust=TRUST) == []


def test_json_body_and_prompt_bound() -> None:
    rows = [
        row("failure", 'POST /sql {"sql": "SELECT 1 FROM wor', n=i, error="Invalid JSON: EOF") for i in (1, 2)
    ] + [row("success", sql_call(f"SELECT {i}"), n=i) for i in (3, 4)]
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_kind == "json_body" and group.fix_names == ("json.dumps",)
    model = [
        row(
            "failure",
            None,
            n=i,
            endpoint="runtime:model_call",
            error="timed out",
            input_tokens=str(30_000 + i),
        )
        for i in (1, 2)
    ] + [row("success", None, n=i, endpoint="runtime:model_call", input_tokens="9000") for i in (3, 4)]
    (group,) = contrast_groups(model, trust=TRUST)
    assert group.fix_action == "Keep model prompts under 9000 input tokens"
    overlap = [{**r, "input_tokens": "40000"} if r["side"] == "success" else r for r in model]
    assert contrast_groups(overlap, trust=TRUST) == []


# ---- drafting and merging ------------------------------------------------------------------------
def demo_groups() -> list[CandidateGroup]:
    return contrast_groups(samples(demo_ops()), trust=TRUST, vocabulary=VOCABULARY)


def test_the_heuristic_draft_of_a_contrast_is_when_do_instead_of() -> None:
    group = next(g for g in demo_groups() if g.fix_kind == "column" and "hourly_rate" in g.fix_names)
    draft = heuristic_draft(group)
    assert draft is not None
    assert (draft.trigger, draft.action, draft.instead_of, draft.kind) == (
        "SQL over workers", "Use the column hourly_rate of workers", "pay_rate, salary", "do",
    )  # fmt: skip


def test_a_model_draft_of_a_contrast_must_name_every_fix_name() -> None:
    group = next(g for g in demo_groups() if g.fix_kind == "missing_argument")
    answer = {"trigger": "Staffing a job with POST /match", "kind": "do", "confidence": 0.8, "domain": "staffing",
              "scope": "project", "evidence_excerpts": ["missing required filter(s)"]}  # fmt: skip
    vague = {**answer, "action": "Send every required field in the POST /match body"}
    draft, by = distill(group, lambda prompt, schema: vague, model="m")
    assert by == "heuristic" and draft is not None and draft.action == group.fix_action
    specific = {**answer, "action": "Always include role plus a state (or a city) in the /match body"}
    draft, by = distill(group, lambda prompt, schema: specific, model="m")
    assert by == "m" and draft is not None and draft.action == specific["action"]
    assert draft.instead_of == group.instead_of  # the model gave none: the contrast's


def test_distinct_fixes_that_read_alike_stay_distinct_entries() -> None:
    groups = [g for g in demo_groups() if g.fix_kind == "column"]
    candidates = [DistilledCandidate(g, d, by) for g in groups for d, by in [distill(g)] if d is not None]
    result = merge_candidates([], candidates, now=NOW)
    assert len(result.created) == 4  # hourly_rate, availability, rating, status: not merged by wording
    again = merge_candidates(result.entries, candidates, now=NOW + timedelta(hours=1))
    assert not again.created and len(again.updated) == 4
    assert {tuple(e.fix_names) for e in again.entries} == {g.fix_names for g in groups}


def diagnosis(signature_id: str) -> Diagnosis:
    return Diagnosis(
        diagnosis_id=f"d_{signature_id}", signature_id=signature_id, created_at=NOW, endpoint="/worker/{id}",
        template="/worker/{id} | not_found | no worker with id <str>", category="not_found",
        cause="guessed ids", agent_adjustment="Guessed worker ids do not exist: use worker ids returned by "
        "POST /match or POST /sql instead of guessing them", avoid=True, confidence=0.7, agent_count=3,
        failure_count=4, reporter_count=3, reporters=["k1", "k2", "k3"], diagnosed_by="heuristic",
        evidence_op_ids=["o1", "o2"],
    )  # fmt: skip


def test_a_diagnosis_whose_signature_got_a_contrast_fix_is_not_drafted() -> None:
    from opslake.analysis.playbooks.grouping import diagnosis_groups

    groups = demo_groups()
    fixed = next(g.signature_id for g in groups if g.fix_kind == "preceding_call")
    assert fixed is not None
    other = diagnosis_groups([diagnosis("sig_other")])
    superseded = diagnosis_groups([diagnosis(fixed)])
    drafts = distill_groups([*groups, *superseded, *other], vocabulary=VOCABULARY)
    assert drafts.superseded == [superseded[0].group_key]
    keys = [c.group.group_key for c in drafts.candidates]
    assert other[0].group_key in keys and superseded[0].group_key not in keys
    assert len(keys) == len(groups) + 1
    for candidate in drafts.candidates:
        assert rejection_reason(candidate, min_agents=2, vocabulary=VOCABULARY) is None, (
            candidate.group.group_key
        )


# ---- hostile keys --------------------------------------------------------------------------------
def test_one_key_s_failures_beside_other_keys_successes_are_one_reporter() -> None:
    """Reporters vouch that a mistake happens: the witnesses of the failing ops. One key that reports
    failing model calls (claiming several agents) beside the fleet's ordinary successes must not
    count as three reporters, else it alone publishes "Keep model prompts under 400 input tokens"."""
    evil = [
        row("failure", None, n=i, reporter="evil", endpoint="runtime:model_call", error="timed out",
            input_tokens="500")
        for i in (1, 2, 3)
    ]  # fmt: skip
    honest = [row("success", None, n=i, endpoint="runtime:model_call", input_tokens="400") for i in (4, 5)]
    (group,) = contrast_groups(evil + honest, trust=TRUST)
    assert group.fix_kind == "prompt_bound"
    assert group.reporters == ("evil",) and group.reporter_count == 1
    # and a fix found the same way from failures of two keys is vouched by both
    two = [{**r, "reporter_id": "k1"} if r["op_id"] == "failure1" else r for r in evil + honest]
    (group,) = contrast_groups(two, trust=TRUST)
    assert group.reporter_count == 2


def test_one_key_s_flood_of_successes_does_not_choose_the_real_column() -> None:
    """The real column is the filler most *reporters* wrote in the failing SQL's hole, and needs two:
    one key sending many successful queries over another column cannot steer the entry to it."""
    err = "COLUMN_NOT_FOUND: Column 'wage' cannot be resolved"
    rows = [
        row("failure", sql_call("SELECT avg(wage) FROM workers WHERE role = 'nurse'"), n=1, error=err),
        row("failure", sql_call("SELECT avg(wage) FROM workers WHERE role = 'welder'"), n=2, error=err),
        row("success", sql_call("SELECT avg(hourly_rate) FROM workers WHERE role = 'cook'"), n=3),
        row("success", sql_call("SELECT avg(hourly_rate) FROM workers WHERE role = 'driver'"), n=4),
    ] + [
        row("success", sql_call(f"SELECT avg(rating) FROM workers WHERE role = 'r{i}'"), n=i, reporter="evil")
        for i in range(5, 12)
    ]
    (group,) = contrast_groups(rows, trust=TRUST)
    assert group.fix_names == ("workers", "hourly_rate")
    assert not {f"success{i}" for i in range(5, 12)} & set(group.op_ids)
    # the flooding key alone gives no column at all
    alone = [r for r in rows if r["op_id"] not in ("success3", "success4")]
    assert contrast_groups(alone, trust=TRUST) == []


def test_one_key_cannot_crowd_the_other_keys_successes_out_of_the_sample() -> None:
    """The successes are sampled newest first per (endpoint, task class) with a cap per key: a key
    flooding the class with fresh successes leaves room for the fleet's own (else its calls alone
    would be what 'the successes do', e.g. a prompt bound of its choosing)."""
    ops = demo_ops()
    end = max(datetime.fromisoformat(o["ts"]) for o in ops)
    template = next(
        o
        for o in ops
        if (o["endpoint"], o.get("task_class"), o.get("source"), o["success"])
        == ("/sql", "sql_question", "gateway", True)
    )
    flood = [
        {**template, "op_id": f"flood{i}", "reporter_id": "flooder", "agent_id": f"f{i}", "session_id": f"fs{i}",
         "ts": (end - timedelta(seconds=i)).isoformat()}
        for i in range(SUCCESSES_PER_CLASS + 10)
    ]  # fmt: skip
    rows = samples(ops + flood)
    sql_successes = [
        r
        for r in rows
        if r["side"] == "success" and (r["endpoint"], r["task_class"]) == ("/sql", "sql_question")
    ]
    flooded = [r for r in sql_successes if r["reporter_id"] == "flooder"]
    assert 0 < len(flooded) <= SUCCESSES_PER_REPORTER
    assert len({r["reporter_id"] for r in sql_successes}) > 2


def test_a_model_cannot_rewrite_what_a_contrast_entry_says_instead_of() -> None:
    """A contrast's "instead of" is the failing form the contrast found (wrong names quoted from two
    reporters, shapes, never an instance). The model's wording of the action is accepted when it
    names the fix, but its own "instead of" (it reads agent-written excerpts) never replaces the
    contrast's: it could turn the fix against itself ("instead of role")."""
    group = next(g for g in demo_groups() if g.fix_kind == "missing_argument")
    answer = {"trigger": "Staffing a job with POST /match", "kind": "do", "confidence": 0.8, "domain": "staffing",
              "scope": "project", "evidence_excerpts": ["missing required filter(s)"],
              "action": "Always include role plus a state (or a city) in the /match body",
              "instead_of": "a body with role and state"}  # fmt: skip
    draft, by = distill(group, lambda prompt, schema: answer, model="m")
    assert by == "m" and draft is not None and draft.action == answer["action"]
    assert draft.instead_of == group.instead_of == "a body with only need and count"


def test_one_agent_name_under_two_keys_is_two_runs_of_it() -> None:
    """One agent deployed by two runtimes (two keys) claims one name: its failures are repeated
    across runs, as two names would be; one key alone claiming the name stays one."""
    base = datetime(2026, 11, 23, 2, 0, tzinfo=UTC)

    def op(n: int, key: str, success: bool) -> dict[str, Any]:
        return {
            "op_id": f"op-{n}", "ts": (base + timedelta(seconds=n)).isoformat(), "agent_id": "one-agent",
            "reporter_id": key, "session_id": f"s-{n}", "endpoint": "tool:save_note", "success": success,
            "source": "otlp", "error_type": None if success else "tool_error",
            "error": None if success else "note must have a title", "input_summary": '{"body": "x"}',
        }  # fmt: skip

    two_keys = [op(n, ("k1", "k2")[n % 2], False) for n in range(4)] + [
        op(10 + n, "k1", True) for n in range(2)
    ]
    assert {r["side"] for r in samples(two_keys)} == {"failure", "success"}
    one_key = [op(n, "k1", False) for n in range(4)] + [op(10 + n, "k1", True) for n in range(2)]
    assert samples(one_key) == []
