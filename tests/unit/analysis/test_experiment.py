"""Holdout experiments (issue 16): the arms' SQL run on DuckDB through the dialect layer (arms
from the op records of GET /playbooks, intent-to-treat per key from its first read, untrusted keys
never counted, follows per arm), and the pure judgement (intervals, verdicts, the
leave-one-key-out guard, graduation and retirement; confidence never moves)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from opslake.analysis import masking
from opslake.analysis.intervals import design_effect, newcombe, wilson
from opslake.analysis.playbooks.experiment import (
    ATHENA_MAX_QUERY_BYTES,
    ArmRow,
    Cell,
    Rules,
    apply_experiment,
    cells,
    experiment_queries,
    experiment_sql,
    judge,
    sign_survives,
    start_experiments,
)
from opslake.analysis.reporters import ReporterTrust
from opslake.lake import derived
from opslake.models.playbooks import PlaybookEntry
from opslake.models.window import Window
from opslake.query.dialect import to_duckdb

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
LOOKBACK = Window(T0, T0 + timedelta(hours=2))
NOW = LOOKBACK.end + timedelta(minutes=2)
SCHEMA = pa.schema(
    [
        ("op_id", pa.string()), ("ts", pa.timestamp("ms")), ("ingested_at", pa.timestamp("ms")),
        ("agent_id", pa.string()), ("reporter_id", pa.string()), ("endpoint", pa.string()),
        ("task_class", pa.string()), ("success", pa.bool_()), ("source", pa.string()), ("event_kind", pa.string()),
        ("error_type", pa.string()), ("error", pa.string()),
        ("attributes", pa.map_(pa.string(), pa.string())), ("dt", pa.string()), ("hour", pa.string()),
    ]
)  # fmt: skip
ERROR = "COLUMN_NOT_FOUND: line 1:8: Column 'salary' cannot be resolved"
SIG = masking.signature_id(masking.template_of("/sql", "sql_failed", ERROR))
_ids = iter(range(1_000_000))


def entry(**fields: Any) -> PlaybookEntry:
    values: dict[str, Any] = {
        "entry_id": "pb_x", "trigger": "SQL question over workers", "action": "Use the column hourly_rate",
        "kind": "do", "confidence": 0.5, "domain": "sql", "endpoint": "/sql", "status": "active",
        "created_at": T0 - timedelta(days=1), "published_at": T0 - timedelta(days=1), **fields,
    }  # fmt: skip
    return PlaybookEntry(**values)


def op(
    key: str, minutes: float, *, ok: bool = True, task: str | None = "sql_question", **fields: Any
) -> dict:
    return {
        "op_id": f"op{next(_ids)}", "ts": T0 + timedelta(minutes=minutes), "agent_id": fields.pop("agent", key),
        "reporter_id": key, "endpoint": "/sql", "task_class": task, "success": ok,
        "error_type": None if ok else "sql_failed", "error": None if ok else ERROR, **fields,
    }  # fmt: skip


def read(key: str, minutes: float, *, served: str = "", withheld: str = "", holdout: bool = True) -> dict:
    attributes = {"entry_ids": served, "withheld_ids": withheld, **({"holdout": "1"} if holdout else {})}
    return op(key, minutes, endpoint="/playbooks", task=None, attributes=attributes)


def followed(key: str, minutes: float, ids: str) -> dict:
    return op(key, minutes, endpoint="playbook:followed", event_kind="playbook_followed", task="t",
              attributes={"entry_ids": ids})  # fmt: skip


def run(
    sql: str, rows: list[dict[str, Any]], merges: list[dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """The Athena SQL run by DuckDB over ``rows`` as the ``ops`` table."""
    full = [
        {"event_kind": None, "source": "gateway", "attributes": {}, **r, "ingested_at": r["ts"], "dt": f"{r['ts']:%Y-%m-%d}",
         "hour": f"{r['ts']:%H}"}
        for r in rows
    ]  # fmt: skip
    for r in full:
        r["attributes"] = list(r["attributes"].items())
    con = duckdb.connect()
    con.register("ops", pa.Table.from_pylist(full, schema=SCHEMA))
    con.register("signature_merges", derived.to_table("signature_merges", merges or []))  # word variants
    cursor = con.execute(to_duckdb(sql).sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def test_arms_come_from_the_read_records_intent_to_treat_per_key() -> None:
    x, y = entry(), entry(entry_id="pb_y", task_class="sql_question", signature_id=SIG)
    rows = [
        # alice is served both entries at minute 10: her later /sql ops count in treatment (earlier ones not)
        op("alice", 5, ok=False),
        read("alice", 10, served="pb_x,pb_y"),
        op("alice", 11),
        op("alice", 12, ok=False),
        op("alice", 13, task="other"),  # pb_y targets sql_question only; pb_x any task class
        # bob is withheld pb_x and served pb_y; he renames his agent: the key decides
        read("bob", 20, served="pb_y", withheld="pb_x"),
        op("bob", 21, ok=False, agent="alice"),
        op("bob", 22),
        # carol's read predates arms (no holdout="1"): ignored
        read("carol", 10, served="pb_x", holdout=False),
        op("carol", 30, ok=False),
        # dave was withheld pb_x, then served it (its share shrank at graduation): holdout until then
        read("dave", 10, withheld="pb_x"),
        op("dave", 15, ok=False),
        read("dave", 40, served="pb_x"),
        op("dave", 45),
        # erin was served first and withheld later: impossible under the rules, so crossed (dropped)
        read("erin", 10, served="pb_x"),
        read("erin", 20, withheld="pb_x"),
        op("erin", 25),
        # eve is untrusted: her arms are recorded, her ops never count
        read("eve", 10, withheld="pb_x"),
        op("eve", 15, ok=False),
        # a follow counts in the follower's arm
        followed("alice", 14, "pb_x"),
        followed("bob", 23, "pb_x,pb_y"),
    ]
    trust = ReporterTrust(levels={"eve": "untrusted"})
    sql = experiment_sql("ops", LOOKBACK, [x, y, entry(entry_id="pb_off", status="proposed")], trust)
    assert sql is not None and "pb_off" not in sql
    found = run(sql, rows)
    follows = {(r["entry_id"], r["reporter_id"], r["arm"]): r["followed"] for r in found if r["followed"]}
    assert follows == {("pb_x", "alice", "treatment"): 1, ("pb_x", "bob", "holdout"): 1,
                       ("pb_y", "bob", "treatment"): 1}  # fmt: skip
    counted = {(r["entry_id"], r["reporter_id"], r["arm"]): (r["ops"], r["failures"], r["sig_failures"])
               for r in found if r["ops"]}  # fmt: skip
    assert counted == {
        ("pb_x", "alice", "treatment"): (3, 1, 0),
        ("pb_y", "alice", "treatment"): (2, 1, 1),
        ("pb_x", "bob", "holdout"): (2, 1, 0),
        ("pb_y", "bob", "treatment"): (2, 1, 1),
        ("pb_x", "dave", "holdout"): (1, 1, 0),
        ("pb_x", "dave", "treatment"): (1, 0, 0),
        ("pb_x", "erin", "crossed"): (1, 0, 0),
    }
    by_entry, crossed = cells(ArmRow.from_row(r) for r in found)
    assert crossed == 1 and by_entry["pb_x"]["holdout"].keys == {"bob": (2, 1), "dave": (1, 1)}
    assert (by_entry["pb_x"]["treatment"].followed, by_entry["pb_x"]["holdout"].followed) == (1, 1)


def test_failures_and_targets_count_under_the_signature_word_variants_were_merged_into() -> None:
    """The analyzer merged two word variants (signature_merges: raw id → merged id): a failure of
    either counts against an entry that targets either raw signature or the merged one."""
    variant = masking.signature_id(
        masking.template_of("/sql", "sql_failed", ERROR.replace("resolved", "found"))
    )
    merged = "sig_merged00000000"
    merges = [
        {"raw_signature_id": raw, "signature_id": merged, "template": "t", "raw_template": "r"}
        for raw in (SIG, variant)
    ]
    rows = [read("alice", 10, withheld="pb_x"), op("alice", 11, ok=False), op("alice", 12, ok=False)]
    for target in (variant, merged, SIG):
        sql = experiment_sql("ops", LOOKBACK, [entry(signature_id=target)], ReporterTrust())
        assert sql is not None
        counted = [(r["failures"], r["sig_failures"]) for r in run(sql, rows, merges) if r["ops"]]
        assert counted == [(2, 2)], target
    assert [(r["failures"], r["sig_failures"]) for r in run(sql, rows) if r["ops"]] == [(2, 2)]  # raw SIG
    sql = experiment_sql("ops", LOOKBACK, [entry(signature_id=variant)], ReporterTrust())
    assert sql is not None
    assert [(r["failures"], r["sig_failures"]) for r in run(sql, rows) if r["ops"]] == [(2, 0)]  # not merged
    # another signature's merge changes nothing here (the lookup matches the failure's own raw id)
    elsewhere = [
        {
            "raw_signature_id": "sig_other",
            "signature_id": "sig_elsewhere",
            "template": "t",
            "raw_template": "r",
        }
    ]
    sql = experiment_sql("ops", LOOKBACK, [entry(signature_id=SIG)], ReporterTrust())
    assert sql is not None
    assert [(r["failures"], r["sig_failures"]) for r in run(sql, rows, elsewhere) if r["ops"]] == [(2, 2)]


def test_only_calls_count_in_an_arm_never_the_runtimes_reports_about_them() -> None:
    """An overseer's correction (a success record on the failed call's endpoint) and the runtime's
    rescue report (its retry is a call of its own) are no calls: counting them would add successes
    to an arm in proportion to its failures, pulling every effect toward zero."""
    rows = [
        read("alice", 10, withheld="pb_x"),
        op("alice", 11, ok=False),
        op("alice", 11.5, source="overseer_correction", event_kind="correction"),
        op("alice", 12, source="runtime", event_kind="rescue"),
        op("alice", 12.1),  # the retry itself
        op("alice", 13, ok=False, source="runtime", error_type="result_truncated"),  # a judged answer counts
    ]
    sql = experiment_sql("ops", LOOKBACK, [entry()], ReporterTrust())
    assert sql is not None
    assert [(r["arm"], r["ops"], r["failures"]) for r in run(sql, rows) if r["ops"]] == [("holdout", 3, 2)]


def test_an_entrys_period_starts_with_its_experiment() -> None:
    rows = [read("alice", 10, served="pb_x"), op("alice", 20, ok=False), op("alice", 70)]
    late = entry(experiment_started_at=T0 + timedelta(minutes=60))
    sql = experiment_sql("ops", LOOKBACK, [late], ReporterTrust())
    assert sql is not None
    assert [(r["arm"], r["ops"], r["failures"]) for r in run(sql, rows) if r["ops"]] == [("treatment", 1, 0)]


def test_nothing_to_measure_is_no_query() -> None:
    assert (
        experiment_sql("ops", LOOKBACK, [entry(endpoint=None), entry(status="retired")], ReporterTrust())
        is None
    )


# ---- judgement (pure) --------------------------------------------------------------------------
RULES = Rules(min_units=2, min_ops=20, min_effect=0.02, graduate_after=2, holdout_graduated=0.05)


def arm_cells(treatment: dict[str, tuple[int, int]], holdout: dict[str, tuple[int, int]]) -> dict[str, Cell]:
    return {"treatment": Cell(keys=dict(treatment)), "holdout": Cell(keys=dict(holdout))}


HELPS = arm_cells({"a": (50, 2), "b": (50, 3)}, {"c": (50, 20), "d": (50, 18)})
HARMS = arm_cells({"a": (50, 20), "b": (50, 18)}, {"c": (50, 2), "d": (50, 3)})


def test_a_helpful_entry_is_counted_and_graduates_on_the_second_helpful_verdict() -> None:
    first, verdict = judge(entry(), HELPS, rules=RULES, now=NOW)
    assert verdict == "helpful" and (first.helpful_count, first.helpful_streak) == (1, 1)
    assert first.experiment_stage == "new" and first.confidence == 0.5  # confidence never moves
    assert (first.treatment_ops, first.treatment_failures, first.holdout_ops, first.holdout_failures) == (
        100, 5, 100, 38,
    )  # fmt: skip
    deff = max(design_effect([(50, 2), (50, 3)]), design_effect([(50, 20), (50, 18)]))
    effect, low, high = newcombe(38 / deff, 100 / deff, 5 / deff, 100 / deff)
    assert first.design_effect == pytest.approx(deff, abs=1e-6)
    assert (first.effect, first.effect_low, first.effect_high) == pytest.approx((effect, low, high), abs=1e-6)
    assert (first.treatment_rate_low, first.treatment_rate_high) == pytest.approx(
        wilson(5 / deff, 100 / deff), abs=1e-6
    )
    assert first.holdout_rate == 0.38 and first.effect == pytest.approx(0.33)
    # not judged again until each arm has min_ops new ops
    same, verdict = judge(first, HELPS, rules=RULES, now=NOW)
    assert verdict == "insufficient" and same.helpful_count == 1
    more = arm_cells({"a": (70, 3), "b": (50, 3)}, {"c": (70, 28), "d": (50, 18)})
    second, verdict = judge(first, more, rules=RULES, now=NOW)
    assert verdict == "helpful" and second.helpful_streak == 2
    assert (second.experiment_stage, second.holdout_share, second.graduated_at) == ("graduated", 0.05, NOW)
    assert second.status == "active"


def test_a_harmful_entry_is_retired_even_when_approved() -> None:
    retired, verdict = judge(entry(approved_at=T0), HARMS, rules=RULES, now=NOW)
    assert verdict == "harmful" and retired.harmful_count == 1
    assert (retired.status, retired.retired_reason, retired.retired_at) == ("retired", "harmful", NOW)


def test_an_entry_that_does_not_matter_is_retired_as_no_effect() -> None:
    same = arm_cells({"a": (2000, 100), "b": (2000, 100)}, {"c": (2000, 100), "d": (2000, 100)})
    retired, verdict = judge(entry(), same, rules=RULES, now=NOW)
    assert verdict == "no_effect" and retired.neutral_count == 1
    assert (retired.status, retired.retired_reason) == ("retired", "no_effect")


def test_a_wide_interval_is_undecided_and_resets_the_streak() -> None:
    noisy = arm_cells({"a": (20, 3), "b": (20, 4)}, {"c": (20, 5), "d": (20, 4)})
    kept, verdict = judge(entry(helpful_streak=1), noisy, rules=RULES, now=NOW)
    assert verdict == "undecided" and kept.helpful_streak == 0 and kept.status == "active"


def test_too_few_keys_or_ops_per_arm_is_not_judged() -> None:
    one_key = arm_cells({"a": (100, 2)}, {"c": (50, 20), "d": (50, 18)})
    few_ops = arm_cells({"a": (5, 0), "b": (5, 0)}, {"c": (50, 20), "d": (50, 18)})
    for cellset in (one_key, few_ops, None):
        kept, verdict = judge(entry(), cellset, rules=RULES, now=NOW)
        assert verdict == "insufficient" and kept.last_verdict is None and kept.status == "active"
    assert judge(entry(), None, rules=RULES, now=NOW)[0].effect is None


def test_one_key_cannot_decide_a_verdict_alone() -> None:
    """The leave-one-key-out guard: the holdout fails more only because of one odd key."""
    skewed = arm_cells({"a": (200, 33), "b": (200, 16), "c": (50, 4)}, {"d": (10, 1), "e": (50, 46)})
    kept, verdict = judge(entry(), skewed, rules=RULES, now=NOW)
    assert kept.effect_low is not None and kept.effect_low > 0  # the interval alone says helpful
    assert not sign_survives(skewed["holdout"].keys, skewed["treatment"].keys, +1)  # without e it flips
    assert verdict == "undecided" and kept.helpful_count == 0 and kept.last_verdict == "undecided"


def test_judged_counts_follow_the_lookback_when_it_moves_past_them() -> None:
    judged = entry(judged_treatment_ops=500, judged_holdout_ops=500, last_verdict="undecided")
    kept, verdict = judge(judged, HELPS, rules=RULES, now=NOW)
    assert verdict == "insufficient" and (kept.judged_treatment_ops, kept.judged_holdout_ops) == (100, 100)


def test_an_entry_is_judged_again_once_the_lookback_has_moved_past_its_last_judgement() -> None:
    """Steady traffic fills a sliding lookback to the same count: once the last judgement lies before
    the period, every op counted is new, so the entry is judged again (it is never frozen)."""
    judged = entry(judged_treatment_ops=100, judged_holdout_ops=100, judged_at=T0 - timedelta(hours=1))
    kept, verdict = judge(judged, HELPS, rules=RULES, now=NOW)
    assert verdict == "insufficient"  # without the period: the same counts, nothing new
    kept, verdict = judge(judged, HELPS, rules=RULES, now=NOW, since=LOOKBACK.start)
    assert verdict == "helpful" and kept.judged_at == NOW
    recent = judged.model_copy(update={"judged_at": T0 + timedelta(minutes=30)})  # inside the period
    assert judge(recent, HELPS, rules=RULES, now=NOW, since=LOOKBACK.start)[1] == "insufficient"
    result = apply_experiment(
        [judged],
        [
            ArmRow("pb_x", k, arm, ops=n, failures=x)
            for arm, cell in HELPS.items()
            for k, (n, x) in cell.keys.items()
        ],
        rules=RULES,
        now=NOW,
        lookback=LOOKBACK,
    )
    assert result.verdicts == {"pb_x": "helpful"}


def test_experiments_start_when_entries_become_active_and_only_active_entries_are_judged() -> None:
    old = entry(entry_id="pb_old", holdout_share=0.3)
    waiting = entry(entry_id="pb_wait", status="proposed")
    started = start_experiments([old, waiting], rules=Rules(holdout_new=0.5), now=NOW)
    assert (started[0].experiment_started_at, started[0].holdout_share) == (NOW, 0.5)
    assert started[1] == waiting
    rows = [ArmRow("pb_old", k, arm, ops=n, failures=x) for k, arm, n, x in
            [("a", "treatment", 50, 2), ("b", "treatment", 50, 3), ("c", "holdout", 50, 20),
             ("d", "holdout", 50, 18), ("e", "crossed", 9, 9)]]  # fmt: skip
    result = apply_experiment(started, rows, rules=RULES, now=NOW)
    assert result.verdicts == {"pb_old": "helpful"} and result.crossed == 1
    assert result.entries[1] == waiting and result.graduated == [] and result.retired == []


def test_the_quality_gates_refusals_are_counted_by_rule() -> None:
    from opslake.jobs.consolidator import gate_refusals

    reasons = [
        "quality: restates the endpoint: the action only restates its endpoint (/sql)",
        "pb_1: quality: restates the endpoint: the action only names a call",
        "quality: tied to one instance: the trigger is tied to one instance (worker id 'W1')",
        "trigger: the text addresses its reader",  # the lesson fence's, not the gate's
    ]
    assert gate_refusals(reasons) == {"restates the endpoint": 2, "tied to one instance": 1}


def test_many_entries_are_measured_in_queries_athena_accepts_with_the_same_rows() -> None:
    """Athena refuses a query over 262,144 bytes, and the consolidator then measures nothing: 500
    active entries whose endpoints and task classes (agent-chosen names, up to 200 characters) are
    long made one query of ~360 KB. experiment_queries splits the entries; each entry's rows are its
    own, so the split changes no row."""
    many = [
        entry(entry_id=f"pb_{i:016x}", endpoint=f"tool:{'x' * 190}{i:05d}", task_class=f"{'t' * 195}{i:05d}")
        for i in range(500)
    ]
    queries = experiment_queries("ops", LOOKBACK, many, ReporterTrust())
    assert len(queries) > 1 and all(len(q.encode()) <= ATHENA_MAX_QUERY_BYTES for q in queries)
    assert sum(len(q.encode()) for q in queries) > ATHENA_MAX_QUERY_BYTES  # one query would not do
    for e in many:  # every entry is measured, once
        assert sum(f"'{e.entry_id}'" in q for q in queries) == 1
    x, y = entry(), entry(entry_id="pb_y", task_class="sql_question", signature_id=SIG)
    rows = [read("alice", 10, served="pb_x,pb_y"), op("alice", 11), op("alice", 12, ok=False),
            read("bob", 20, served="pb_y", withheld="pb_x"), op("bob", 21, ok=False)]  # fmt: skip
    whole = experiment_sql("ops", LOOKBACK, [x, y], ReporterTrust())
    assert whole is not None and experiment_queries("ops", LOOKBACK, [x, y], ReporterTrust()) == [whole]
    split = experiment_queries("ops", LOOKBACK, [x, y], ReporterTrust(), max_bytes=len(whole.encode()) - 1)
    assert len(split) == 2
    key = lambda r: (r["entry_id"], r["reporter_id"], r["arm"], r["ops"], r["followed"])  # noqa: E731
    assert sorted((r for q in split for r in run(q, rows)), key=key) == sorted(run(whole, rows), key=key)
    assert experiment_queries("ops", LOOKBACK, [entry(status="proposed")], ReporterTrust()) == []
