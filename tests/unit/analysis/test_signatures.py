"""Failure signatures: masking, templates, ids, the index's bookkeeping, and what to diagnose."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opslake.analysis.signatures import (
    MAX_NORMALIZED_CHARS,
    MAX_VARIANTS,
    MergedRaw,
    NewTemplate,
    SignatureIndex,
    apply_failures,
    fold_signature,
    input_template,
    mark_diagnosed,
    merge_variants,
    merged_id,
    needs_diagnosis,
    normalize,
    normalize_endpoint,
    select_for_diagnosis,
    signature_id,
    template_of,
    variant_of,
)
from opslake.models.analysis import MAX_SAMPLE_OP_IDS, MAX_TRACKED_AGENTS, FailureSample, Signature

pytestmark = pytest.mark.unit
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def failure(
    i: int,
    error: str | None = "COLUMN_NOT_FOUND: line 1:8: Column 'salry' cannot be resolved",
    *,
    endpoint: str = "/sql",
    error_type: str | None = "sql_column_not_found",
    agent: str = "agent-1",
    input_summary: str | None = '{"sql": "SELECT salry FROM workers"}',
    ts: datetime | None = None,
) -> FailureSample:
    moment = ts or T0 + timedelta(seconds=i)
    return FailureSample(
        op_id=f"op-{i:05d}",
        endpoint=endpoint,
        agent_id=agent,
        ts=moment,
        ingested_at=moment,
        error=error,
        error_type=error_type,
        input_summary=input_summary,
    )


# ---- normalize ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("request 3f2a9b1c-1234-4abc-8def-0123456789AB failed", "request <uuid> failed"),
        ("op 01HZX3K9Q2W7V8B5N4M6T1R0YZ was dropped", "op <ulid> was dropped"),
        ("hash deadbeef12 at 0x7ffe3a", "hash <hex> at <hex>"),
        ("at 2025-06-01T12:00:00.123Z", "at <ts>"),
        ("at 2025-06-01 12:00:00+02:00", "at <ts>"),
        ("on 2025-06-01 only", "on <date> only"),
        ("at 12:00:01.5 sharp", "at <time> sharp"),
        ("after 30012 ms", "after <num> ms"),
        (
            "after 120ms; retry in 30s with 5% done and 1.5GB used",
            "after <num>; retry in <num> with <num> done and <num> used",
        ),
        ("count 12,345 of 3.75", "count <num> of <num>"),
        ("Column 'salry' cannot be resolved", "Column <str> cannot be resolved"),
        ('column "x y" and `z`', "column <str> and <str>"),
        ("read /var/task/handlers/load.py and C:\\Users\\bob\\x.txt", "read <path> and <path>"),
        ("key reports/2025/raw_3.csv", "key <path>"),
        ("see https://api.example.com/v2/orders/12?trace=ab", "see <url>"),
        ("mail bob.smith+x@example.co.uk now", "mail <email> now"),
        ("worker W-004512 and worker_123 and W00042", "worker <id> and <id> and <id>"),
        ("host 10.0.3.17:5432 down", "host <ip> down"),
        ("role arn:aws:iam::123456789012:role/agent-7 denied", "role <arn> denied"),
        ("values [1, 2, 3, 4]", "values [<num>, ...]"),
    ],
)
def test_normalize_masks_each_kind(text: str, expected: str) -> None:
    assert normalize(text) == expected


def test_normalize_keeps_words_codes_and_apostrophes() -> None:
    text = "TABLE_NOT_FOUND: don't guess; it's the agent's table (dt/hour, TCP/IP)"
    assert normalize(text) == text


def test_normalize_collapses_whitespace_and_caps_length() -> None:
    assert normalize("  a \n\t b  ") == "a b"
    long = "word " * 500
    out = normalize(long)
    assert len(out) <= MAX_NORMALIZED_CHARS
    assert out.endswith("…")
    assert not normalize("x " * 148 + "12345678 " * 10).rstrip(" …").endswith("<")  # no cut placeholder


@pytest.mark.parametrize(
    "template_pair",
    [
        (
            "COLUMN_NOT_FOUND: line 1:8: Column 'salry' cannot be resolved",
            "COLUMN_NOT_FOUND: line 1:245: Column 'salary_3' cannot be resolved",
        ),
        ("worker W-004512 not found", "worker W-000001 not found"),
        (
            "timed out after 30012 ms (request 3f2a9b1c-1234-4abc-8def-0123456789ab)",
            "timed out after 12 ms (request 00000000-0000-4000-8000-000000000000)",
        ),
        ("no worker with id 'W99999'", "no worker with id 'W00001'"),
        (
            "Rate limit for org-abc123def0 at 2025-01-01T00:00:00Z",
            "Rate limit for org-1234567890 at 2026-12-31T23:59:59.999Z",
        ),
    ],
)
def test_same_problem_with_different_values_gives_one_template(template_pair: tuple[str, str]) -> None:
    first, second = template_pair
    assert normalize(first) == normalize(second)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600))
def test_normalize_never_raises_is_bounded_and_stable(text: str) -> None:
    out = normalize(text)
    assert len(out) <= MAX_NORMALIZED_CHARS
    assert normalize(text) == out  # deterministic
    assert normalize(out) == normalize(normalize(out))  # converges after one more pass


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**12), st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
def test_numbers_and_quoted_names_never_change_the_template(number: int, name: str) -> None:
    text = f"COLUMN_NOT_FOUND: line 1:{number}: Column '{name}' cannot be resolved after {number} ms"
    assert (
        normalize(text)
        == "COLUMN_NOT_FOUND: line <num>:<num>: Column <str> cannot be resolved after <num> ms"
    )


# ---- templates and ids --------------------------------------------------------------------------
def test_template_of_combines_endpoint_error_type_and_error() -> None:
    assert (
        template_of("/sql", "sql_failed", "COLUMN_NOT_FOUND: line 1:8: Column 'salry' cannot be resolved")
        == "/sql | sql_failed | COLUMN_NOT_FOUND: line <num>:<num>: Column <str> cannot be resolved"
    )
    assert template_of("/sql", "sql_failed", None) == "/sql | sql_failed"
    assert template_of("/sql", None, "") == "/sql | -"


def test_endpoints_with_ids_are_masked_routes_are_not() -> None:
    assert normalize_endpoint("/worker/W00042") == "/worker/{id}"
    assert normalize_endpoint("/worker/{id}") == "/worker/{id}"
    assert normalize_endpoint("/v2/orders/123") == "/v2/orders/{id}"
    assert normalize_endpoint("tool:query_db2") == "tool:query_db2"


def test_signature_ids_are_stable_and_distinguish_endpoint_and_error_type() -> None:
    error = "worker W-004512 not found"
    same = signature_id(template_of("/worker/{id}", "not_found", "worker W-000001 not found"))
    assert signature_id(template_of("/worker/{id}", "not_found", error)) == same
    assert same.startswith("sig_") and len(same) == 20
    assert signature_id(template_of("/match", "not_found", error)) != same
    assert signature_id(template_of("/worker/{id}", "bad_request", error)) != same
    # a known value: the id must never change between releases (stored signatures refer to it)
    assert signature_id("/sql | -") == signature_id("/sql | -")


def test_variants_hash_the_input_template() -> None:
    a = variant_of('{"sql": "SELECT salry FROM workers WHERE id = \'W00001\'", "limit": 10}')
    # key order counts since the engine computes variants (masking.input_template): by design
    b = variant_of('{"sql": "SELECT salry FROM workers WHERE id = \'W99999\'", "limit": 500}')
    c = variant_of('{"sql": "SELECT salry FROM placements", "limit": 10}')
    assert a == b != c
    assert len(a) == 12
    assert variant_of(None) == variant_of("")
    assert input_template("not json {") == "not json {"


# ---- the index ----------------------------------------------------------------------------------
def test_every_failure_gets_exactly_one_signature() -> None:
    failures = [
        failure(1),
        failure(2, "COLUMN_NOT_FOUND: line 1:99: Column 'ratng' cannot be resolved"),
        failure(3, "no worker with id 'W12345'", endpoint="/worker/{id}", error_type="not_found"),
        failure(4, None, error_type="sql_failed"),
    ]
    index = SignatureIndex()
    rows = index.apply(failures)
    assert [r.op_id for r in rows] == [f.op_id for f in failures]
    assert rows[0].signature_id == rows[1].signature_id
    assert len({r.signature_id for r in rows}) == 3
    assert set(index.signatures) == {r.signature_id for r in rows}
    assert rows[2].endpoint == "/worker/{id}" and rows[2].error_type == "not_found"
    sig = index.signatures[rows[0].signature_id]
    assert sig.count == 2 and sig.template.endswith("Column <str> cannot be resolved")


def test_counts_agents_variants_samples_and_times() -> None:
    sigs: dict[str, Signature] = {}
    failures = [
        failure(10, agent="a", input_summary="SELECT salry FROM workers", ts=T0 + timedelta(minutes=5)),
        failure(11, agent="b", input_summary="SELECT salry FROM placements", ts=T0),
        failure(12, agent="a", input_summary="SELECT salry FROM workers", ts=T0 + timedelta(minutes=9)),
    ]
    rows = apply_failures(sigs, failures)
    sig = sigs[rows[0].signature_id]
    assert sig.count == 3
    assert sig.agents == ["a", "b"] and sig.agent_count == 2
    assert len(sig.variants) == 2
    assert sig.first_seen == T0 and sig.last_seen == T0 + timedelta(minutes=9)
    assert sig.sample_op_ids == ["op-00010", "op-00011", "op-00012"]
    # a second run on the same state dict keeps counting
    apply_failures(sigs, [failure(13, agent="c")])
    assert sig.count == 4 and sig.agent_count == 3


def letters(i: int) -> str:
    """A distinct word without digits (digits would be masked out of the input's template)."""
    return "".join("abcdefghijklmnopqrstuvwxyz"[int(d)] for d in str(i)) + "_col"


def test_caps_on_agents_variants_and_samples() -> None:
    index = SignatureIndex()
    n = MAX_TRACKED_AGENTS + 50
    rows = index.apply(
        failure(i, agent=f"agent-{i}", input_summary=f"SELECT {letters(i)} FROM t") for i in range(n)
    )
    sig = index.signatures[rows[0].signature_id]
    assert sig.count == n
    assert len(sig.agents) == MAX_TRACKED_AGENTS
    assert sig.agent_count == MAX_TRACKED_AGENTS  # saturates: an untracked agent may be a known one
    assert len(sig.variants) == MAX_VARIANTS
    assert sig.sample_op_ids == [f"op-{i:05d}" for i in range(MAX_SAMPLE_OP_IDS)]
    # a fresh index over the stored signature keeps the caps and does not double-count agents
    again = SignatureIndex(index.signatures)
    again.apply([failure(0, agent="agent-0")])
    assert sig.agent_count == MAX_TRACKED_AGENTS and len(sig.agents) == MAX_TRACKED_AGENTS


def test_assign_only_and_count_only_some() -> None:
    sigs: dict[str, Signature] = {}
    first = [failure(1), failure(2)]
    apply_failures(sigs, first)
    (sig,) = sigs.values()
    rows = apply_failures(sigs, first, count=False)  # re-assigned, already counted
    assert sig.count == 2 and [r.signature_id for r in rows] == [sig.signature_id] * 2
    apply_failures(sigs, [failure(1), failure(3, agent="z")], count={(None, "op-00003")})
    assert sig.count == 3 and sig.agents == ["agent-1", "z"]


def test_assign_only_creates_an_empty_signature_that_is_not_diagnosed() -> None:
    sigs: dict[str, Signature] = {}
    rows = apply_failures(sigs, [failure(1)], count=False)
    sig = sigs[rows[0].signature_id]
    assert sig.count == 0 and sig.agents == [] and sig.first_seen == failure(1).ts
    assert needs_diagnosis(sig) is None
    apply_failures(sigs, [failure(2)])
    assert sig.count == 1 and sig.first_seen == failure(2).ts


# ---- what to diagnose ---------------------------------------------------------------------------
def make_sig(
    sig_id: str, count: int, *, diagnosed: int | None = None, variants: int = 1, then: int = 1
) -> Signature:
    sig = Signature(
        signature_id=sig_id,
        endpoint="/sql",
        template=f"/sql | x | {sig_id}",
        count=count,
        variants=[f"v{i}" for i in range(variants)],
        first_seen=T0,
        last_seen=T0,
    )
    if diagnosed is not None:
        sig.count = diagnosed
        sig.variants = [f"v{i}" for i in range(then)]
        mark_diagnosed(sig, diagnosis_id="d1", at=T0)
        sig.count = count
        sig.variants = [f"v{i}" for i in range(variants)]
    return sig


def test_needs_diagnosis_reasons() -> None:
    assert needs_diagnosis(make_sig("s", 1)) == "new"
    assert needs_diagnosis(make_sig("s", 0)) is None
    assert needs_diagnosis(make_sig("s", 20, diagnosed=10)) == "grown"
    assert needs_diagnosis(make_sig("s", 19, diagnosed=10)) is None  # not doubled
    assert needs_diagnosis(make_sig("s", 8, diagnosed=4)) is None  # doubled but fewer than 10 more
    assert needs_diagnosis(make_sig("s", 8, diagnosed=4), min_growth=4) == "grown"
    assert needs_diagnosis(make_sig("s", 12, diagnosed=10, variants=3, then=1)) == "new_variants"
    assert needs_diagnosis(make_sig("s", 12, diagnosed=10, variants=2, then=1)) is None
    assert needs_diagnosis(make_sig("s", 10, diagnosed=10, variants=5, then=1)) is None  # no new failures


def test_mark_diagnosed_records_the_state() -> None:
    sig = make_sig("s", 7, variants=3)
    mark_diagnosed(sig, diagnosis_id="diag-1", at=T0)
    assert (sig.diagnosed_count, sig.diagnosed_variants, sig.diagnoses) == (7, 3, 1)
    assert sig.last_diagnosis_id == "diag-1" and sig.last_diagnosed_at == T0
    assert needs_diagnosis(sig) is None


def test_select_for_diagnosis_most_frequent_first_within_budget() -> None:
    sigs = {
        s.signature_id: s
        for s in (
            make_sig("sig_b", 50),
            make_sig("sig_a", 50),
            make_sig("sig_c", 500, diagnosed=400),  # not grown enough: skipped
            make_sig("sig_d", 5),
            make_sig("sig_e", 90, diagnosed=30),
        )
    }
    chosen = select_for_diagnosis(sigs, 3)
    assert [(s.signature_id, r) for s, r in chosen] == [
        ("sig_e", "grown"),
        ("sig_a", "new"),
        ("sig_b", "new"),
    ]
    assert [s.signature_id for s, _ in select_for_diagnosis(list(sigs.values()), 10)] == [
        "sig_e",
        "sig_a",
        "sig_b",
        "sig_d",
    ]
    assert select_for_diagnosis(sigs, 0) == []


# ---- word variants merged into one signature ----------------------------------------------------
def stock_sig(city: str, count: int, *, at: datetime = T0, agent: str = "agent-1") -> Signature:
    template = template_of("tool:stock", "OutOfStock", f"no stock of blue sneakers in {city}")
    return Signature(
        signature_id=signature_id(template),
        endpoint="tool:stock",
        error_type="OutOfStock",
        template=template,
        count=count,
        agents=[agent],
        agent_count=1,
        reporters=[agent],
        reporter_count=1,
        variants=[f"v-{city}"],
        first_seen=at,
        last_seen=at + timedelta(minutes=count),
        sample_op_ids=[f"op-{city}"],
    )


def new_template(city: str, at: datetime) -> NewTemplate:
    template = template_of("tool:stock", "OutOfStock", f"no stock of blue sneakers in {city}")
    return NewTemplate(signature_id(template), "tool:stock", "OutOfStock", template, at)


def test_merge_variants_folds_known_signatures_into_the_diagnosed_one() -> None:
    lyon, paris = stock_sig("Lyon", 4, at=T0 + timedelta(hours=1)), stock_sig("Paris", 3, agent="agent-2")
    mark_diagnosed(lyon, diagnosis_id="dg_1", at=T0)  # diagnosed: keeps its id though Paris is older
    signatures = {lyon.signature_id: lyon, paris.signature_id: paris}
    merged: dict[str, MergedRaw] = {}
    nice = new_template("Nice", T0 + timedelta(hours=2))
    outcome = merge_variants(signatures, merged, [nice])
    assert list(signatures) == [lyon.signature_id]
    assert outcome.absorbed == {paris.signature_id: lyon.signature_id}
    assert outcome.changed == [lyon.signature_id]
    assert lyon.template == "tool:stock | OutOfStock | no stock of blue sneakers in <*>"
    assert (lyon.count, lyon.first_seen, lyon.agents, lyon.reporter_count) == (
        7,
        T0,
        ["agent-1", "agent-2"],
        2,
    )
    assert set(merged) == {lyon.signature_id, paris.signature_id, nice.signature_id}
    assert {found.signature_id for found in merged.values()} == {lyon.signature_id}
    assert merged_id(merged, nice.signature_id) == lyon.signature_id
    assert merged_id(merged, "sig_unknown") == "sig_unknown"
    # the merged template is a material change: diagnosed again, once
    assert needs_diagnosis(lyon) == "merged"
    mark_diagnosed(lyon, diagnosis_id="dg_2", at=T0)
    assert needs_diagnosis(lyon) is None


def test_a_variant_joining_later_changes_no_id_and_no_template() -> None:
    signatures: dict[str, Signature] = {}
    merged: dict[str, MergedRaw] = {}
    first = [new_template(c, T0 + timedelta(minutes=i)) for i, c in enumerate(("Lyon", "Paris", "Nice"))]
    created = merge_variants(signatures, merged, first)
    (survivor,) = signatures
    assert survivor == first[0].signature_id and created.changed == []  # new: created merged
    assert signatures[survivor].count == 0  # the caller counts the window's failures
    mark_diagnosed(signatures[survivor], diagnosis_id="dg", at=T0)
    later = merge_variants(signatures, merged, [new_template("Lille", T0 - timedelta(days=1))])
    assert list(signatures) == [survivor] and later.changed == [] and later.absorbed == {}
    assert merged_id(merged, new_template("Lille", T0).signature_id) == survivor
    assert needs_diagnosis(signatures[survivor]) is None  # nothing counted yet, nothing changed
    again = merge_variants(signatures, merged, [])  # a run with nothing new: stable
    assert (again.changed, again.absorbed, list(signatures)) == ([], {}, [survivor])


def test_merge_variants_leaves_different_problems_alone() -> None:
    column = {
        s.signature_id: s
        for s in (
            Signature(
                signature_id=signature_id(t),
                endpoint="/sql",
                error_type="sql_error",
                template=t,
                count=1,
                first_seen=T0,
                last_seen=T0,
            )
            for t in (
                template_of("/sql", "sql_error", f"{kind} {name} does not exist")
                for kind, names in (("column", "abc"), ("table", "xyz"))
                for name in names
            )
        )
    }
    merged: dict[str, MergedRaw] = {}
    merge_variants(column, merged, [])
    assert sorted(s.template for s in column.values()) == [
        "/sql | sql_error | column <*> does not exist",
        "/sql | sql_error | table <*> does not exist",
    ]
    assert len(merged) == 6


def test_fold_signature_adds_counts_within_the_caps() -> None:
    into, other = stock_sig("Lyon", 2, at=T0 + timedelta(hours=1)), stock_sig("Paris", 5)
    other.agents = [f"agent-{i}" for i in range(MAX_TRACKED_AGENTS)]
    other.agent_count = MAX_TRACKED_AGENTS + 50
    fold_signature(into, other)
    assert into.count == 7 and into.first_seen == T0 and into.last_seen == T0 + timedelta(hours=1, minutes=2)
    assert len(into.agents) == MAX_TRACKED_AGENTS and into.agent_count == MAX_TRACKED_AGENTS + 50
    assert into.sample_op_ids == ["op-Lyon", "op-Paris"] and into.variants == ["v-Lyon", "v-Paris"]
    empty = stock_sig("Nice", 0, at=T0 - timedelta(days=3))
    fold_signature(into, empty)
    assert into.first_seen == T0  # a signature with no failures brings no times


# ---- the planted benchmark, as a quality check (no timings) -------------------------------------
def _bench_module(name: str):
    path = Path(__file__).resolve().parents[3] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _planted():
    return _bench_module("planted")


def merged_signatures(data) -> tuple[dict[str, set[str]], dict[str, Counter[str]]]:
    """(signatures per planted mode, modes per signature) after masking and merging word variants."""
    c = data.columns
    raw: dict[int, str] = {}
    new: dict[str, NewTemplate] = {}
    for i in data.failure_indexes():
        template = template_of(c["endpoint"][i], c["error_type"][i], c["error"][i])
        raw[i] = signature_id(template)
        new.setdefault(
            raw[i],
            NewTemplate(raw[i], normalize_endpoint(c["endpoint"][i]), c["error_type"][i], template, T0),
        )
    signatures: dict[str, Signature] = {}
    merged: dict[str, MergedRaw] = {}
    merge_variants(signatures, merged, new.values())
    by_mode: dict[str, set[str]] = defaultdict(set)
    by_sig: dict[str, Counter[str]] = defaultdict(Counter)
    for i, sid in raw.items():
        by_mode[c["mode"][i]].add(merged_id(merged, sid))
        by_sig[merged_id(merged, sid)][c["mode"][i]] += 1
    return by_mode, by_sig


def test_planted_modes_stay_one_signature_each_after_merging() -> None:
    by_mode, by_sig = merged_signatures(_planted().generate(n_ops=20_000, failure_rate=0.1, seed=11))
    assert len(by_mode) == 40 and all(len(s) == 1 for s in by_mode.values())
    assert all(len(counter) == 1 for counter in by_sig.values())


def test_planted_word_modes_merge_into_one_signature_each_without_mixing() -> None:
    """bench/planted_words.py: twelve modes naming cities, products, users, services; masking alone
    splits them into dozens of signatures. Merged: one per mode, purity 1.0, except the mode whose
    role may be two words ("forklift operator": another token count, a known limit)."""
    planted = _planted()
    words = _bench_module("planted_words")
    data = planted.generate(n_ops=3_000, failure_rate=1.0, catalog=words.MODES, seed=5)
    by_mode, by_sig = merged_signatures(data)
    assert all(len(counter) == 1 for counter in by_sig.values())  # purity 1.0
    split = {mode: len(s) for mode, s in by_mode.items() if len(s) > 1}
    assert set(split) == {"shift_conflict"}
    assert len(by_sig) < 20


def test_planted_modes_each_give_one_signature() -> None:
    planted = _planted()
    data = planted.generate(n_ops=40_000, failure_rate=0.1, modes=40, seed=11)
    c = data.columns
    index = SignatureIndex()
    by_mode: dict[str, set[str]] = defaultdict(set)
    by_sig: dict[str, Counter[str]] = defaultdict(Counter)
    for i in data.failure_indexes():
        sig_id, _ = index.signature_of(c["endpoint"][i], c["error_type"][i], c["error"][i])
        by_mode[c["mode"][i]].add(sig_id)
        by_sig[sig_id][c["mode"][i]] += 1
    assert len(by_mode) == 40
    assert {mode: len(s) for mode, s in by_mode.items() if len(s) != 1} == {}
    assert all(len(counter) == 1 for counter in by_sig.values())  # purity 1.0
