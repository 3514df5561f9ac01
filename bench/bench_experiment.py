"""The holdout experiment at volume: its one query over a planted day, and the judgement of its rows.

Plants a day of ``--ops`` ops (default 1,000,000) from ``--keys`` API keys (default 500) in 24 hour
partitions, written with the lake's schema (``OPS_SCHEMA``) and read by the embedded engine (moto's
Glue in process, Parquet files on the local filesystem, as ``bench_embedded.py``'s ``local``
backend). ``--entries`` active entries (default 50) are spread over 10 targets (endpoint, task
class); each key works on 3 targets (plus untargeted ops), busier keys doing more, each with its
own failure propensity (so ops of one key are correlated, as the design effect assumes). Before
its first op on a target, and every 4 hours after, a key reads ``GET /playbooks`` for that target:
a gateway record (5 % MCP) with ``entry_ids`` (served), ``withheld_ids`` and ``holdout = "1"``,
the arms split by :func:`opslake.models.playbooks.arm_of` as serving does. The first
``--effects`` entries (default 10, one per target) truly help: a treated key's ops fail
``--effect-pp`` (default 8) points less often in the entry's own signature; every other entry does
nothing. 3 % of a treated key's target ops are preceded by a ``playbook:followed`` op for one of
its served entries (0.2 % of a held-out key's: contamination).

Then, as the consolidator's experiment step: :func:`experiment_queries` (:func:`experiment_sql`
split under Athena's query size limit) over the lake's lookback
(``efficacy_lookback_h`` back from the day's end), rows → :class:`ArmRow`, and
:func:`apply_experiment` with the ``playbook_*`` settings. Prints the query's wall time, rows,
bytes scanned, this process's peak RSS during the query (VmHWM, reset just before; the plant is
written by a child process), the judgement's time, and the verdicts: planted-effect entries judged
helpful (power) against no-effect entries judged helpful or harmful (false positives), with the
mean estimated effect of each group. The files are cached under ``/tmp/opslake-bench/``. Never
asserts.

``OPSLAKE_BENCH_ROOT=/path/to/other/checkout`` runs that checkout's code with this script.

    .venv/bin/python bench/bench_experiment.py [--ops 1000000] [--keys 500] [--entries 50] [--effects 10]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("OPSLAKE_BENCH_ROOT") or Path(__file__).resolve().parents[1])
for extra in (ROOT / "layers" / "common", ROOT / "local", Path(__file__).resolve().parent, ROOT):
    sys.path.insert(0, str(extra))

from bench_consolidator import reset_peak_rss, rss_mb  # noqa: E402

from opslake.analysis.masking import signature_id, template_of  # noqa: E402
from opslake.analysis.playbooks.experiment import (  # noqa: E402
    ArmRow,
    Rules,
    apply_experiment,
    experiment_sql,
)
from opslake.analysis.reporters import ReporterTrust  # noqa: E402
from opslake.config import load_settings  # noqa: E402
from opslake.models.playbooks import PlaybookEntry, arm_of  # noqa: E402
from opslake.models.window import Window  # noqa: E402

START = datetime(2025, 6, 1, tzinfo=UTC)
DAY_END = START + timedelta(hours=24)
CACHE = Path("/tmp/opslake-bench")
DATABASE, TABLE = "bench", "ops"
TARGETS_PER_KEY = 3
READ_EVERY_H = 4
FOLLOW_TREATED, FOLLOW_HELD_OUT = 0.03, 0.002
MCP_SHARE = 0.05
UNTARGETED_SHARE = 0.25  # of a key's ops: endpoints no entry targets
#: (endpoint, task class, (error type, error text) of the entries' own signature, of another failure)
TARGETS: tuple[tuple[str, str, tuple[str, str], tuple[str, str]], ...] = (
    ("/sql", "sql_question", ("sql_column_not_found", "Column 'salry' cannot be resolved at line 1:{n}"),
     ("sql_timeout", "query did not finish within {n} s")),
    ("/sql", "sql_report", ("sql_table_not_found", "Table 'workerz' does not exist (line 1:{n})"),
     ("sql_syntax_error", "mismatched input 'FROM' at line 1:{n}")),
    ("/match", "staff_job", ("validation_error", "field 'city' is required ({n} candidates)"),
     ("upstream_timeout", "matcher timed out after {n} ms")),
    ("/match", "rank_candidates", ("validation_error", "limit must be at most 100, got {n}"),
     ("upstream_timeout", "ranker timed out after {n} ms")),
    ("/worker/{id}", "lookup_worker", ("not_found", "Worker 'W{n}' does not exist"),
     ("rate_limited", "retry after {n} s")),
    ("/tables/{name}", "browse_schema", ("not_found", "table 'placement' not found ({n})"),
     ("rate_limited", "retry after {n} s")),
    ("tool:http_get", "fetch_external", ("http_404", "GET /v1/jobs/{n} returned 404"),
     ("http_503", "upstream unavailable, attempt {n}")),
    ("tool:http_get", "post_webhook", ("http_400", "payload missing 'job_id' ({n} bytes)"),
     ("http_503", "upstream unavailable, attempt {n}")),
    ("runtime:llm", "summarize", ("context_length_exceeded", "prompt of {n} tokens exceeds the context"),
     ("throttled", "model throttled, retry in {n} ms")),
    ("runtime:llm", "draft_letter", ("invalid_request", "max_tokens {n} above the model's limit"),
     ("throttled", "model throttled, retry in {n} ms")),
)  # fmt: skip
UNTARGETED = ("/tables", "tool:search", "/events")
BASE_SIG, BASE_OTHER = 0.16, 0.05  # failure rates of a target op (times the key's propensity)


def entry_id(i: int) -> str:
    return f"pb_{i:016x}"  # 19 characters, as merging.entry_id_for


def planted_entries(n: int) -> list[PlaybookEntry]:
    """``n`` active entries, round-robin over the targets, each about its target's own signature,
    their experiments started at the day's start (holdout share of a new entry)."""
    out = []
    for i in range(n):
        endpoint, task_class, (error_type, error), _ = TARGETS[i % len(TARGETS)]
        out.append(
            PlaybookEntry(
                entry_id=entry_id(i),
                trigger=f"when calling {endpoint} for {task_class} (variant {i})",
                action=f"do the specific fix number {i} for {error_type}",
                kind="avoid",
                confidence=0.6,
                domain="bench",
                endpoint=endpoint,
                task_class=task_class,
                signature_id=signature_id(template_of(endpoint, error_type, error.format(n=7))),
                status="active",
                created_at=START,
                published_at=START,
                experiment_started_at=START,
            )
        )
    return out


def plant(
    n_ops: int, n_keys: int, entries: list[PlaybookEntry], effects: int, effect: float
) -> dict[str, Any]:
    """The day's columns (OPS_SCHEMA names) and what was planted."""
    rng = random.Random(16)
    by_target: dict[int, list[PlaybookEntry]] = {}
    for i, e in enumerate(entries):
        by_target.setdefault(i % len(TARGETS), []).append(e)
    helping = {e.entry_id for e in entries[:effects]}
    keys = [f"key-{k:04d}" for k in range(n_keys)]
    weights = [min(rng.paretovariate(1.5), 20.0) for _ in keys]
    total = sum(weights)
    cols: dict[str, list[Any]] = {
        c: []
        for c in (
            "op_id", "ts", "endpoint", "source", "event_kind", "reporter_id", "success", "task_class",
            "input_summary", "error", "error_type", "attributes",
        )
    }  # fmt: skip
    seq = 0

    def add(ts: float, endpoint: str, key: str, **fields: Any) -> None:
        nonlocal seq
        seq += 1
        cols["op_id"].append(f"op-{seq:09d}")
        cols["ts"].append(int(ts))
        cols["endpoint"].append(endpoint)
        cols["reporter_id"].append(key)
        cols["source"].append(fields.get("source", "event"))
        cols["event_kind"].append(fields.get("event_kind"))
        cols["success"].append(fields.get("success", True))
        cols["task_class"].append(fields.get("task_class"))
        cols["input_summary"].append(fields.get("input_summary"))
        cols["error"].append(fields.get("error"))
        cols["error_type"].append(fields.get("error_type"))
        cols["attributes"].append(fields.get("attributes"))

    start_ms, day_ms = int(START.timestamp() * 1000), 24 * 3_600_000
    reads = follows = 0
    for key, weight in zip(keys, weights, strict=True):
        n = max(1, round(n_ops * weight / total))
        propensity = rng.uniform(0.6, 1.4)
        targets = rng.sample(range(len(TARGETS)), TARGETS_PER_KEY)
        begin = start_ms + rng.randrange(day_ms // 2)
        times = sorted(rng.randrange(begin, start_ms + day_ms) for _ in range(n))
        arms = {e.entry_id: arm_of(key, e) for t in targets for e in by_target.get(t, [])}
        next_read: dict[int, float] = {}
        for ts in times:
            if rng.random() < UNTARGETED_SHARE:
                add(ts, rng.choice(UNTARGETED), key, success=rng.random() > 0.03, task_class="browse")
                continue
            t = rng.choice(targets)
            endpoint, task_class, (sig_type, sig_error), (other_type, other_error) = TARGETS[t]
            served = [e.entry_id for e in by_target.get(t, []) if arms[e.entry_id] == "treatment"]
            if ts >= next_read.get(t, 0):  # read the target's playbook first (and every few hours)
                withheld = [e.entry_id for e in by_target.get(t, []) if arms[e.entry_id] == "holdout"]
                attributes = [("entry_ids", ",".join(served)), ("withheld_ids", ",".join(withheld))]
                attributes += [("holdout", "1"), ("format", "json")]
                source = "mcp" if rng.random() < MCP_SHARE else "gateway"
                add(ts - 1000, "/playbooks", key, source=source, attributes=attributes, task_class=None)
                next_read[t] = ts + READ_EVERY_H * 3_600_000
                reads += 1
            followed = served if rng.random() < FOLLOW_TREATED else []
            if not followed and rng.random() < FOLLOW_HELD_OUT:
                followed = [e.entry_id for e in by_target.get(t, []) if arms[e.entry_id] == "holdout"]
            if followed:
                attributes = [("entry_ids", rng.choice(followed))]
                add(ts - 10, "playbook:followed", key, event_kind="playbook_followed", attributes=attributes)
                follows += 1
            helped = sum(1 for e in served if e in helping)
            p_sig = max(0.0, BASE_SIG * propensity - effect * helped)
            draw = rng.random()
            if draw < p_sig:
                kind, text = sig_type, sig_error
            elif draw < p_sig + BASE_OTHER * propensity:
                kind, text = other_type, other_error
            else:
                add(ts, endpoint, key, task_class=task_class, input_summary=f"{task_class} #{seq}")
                continue
            add(
                ts, endpoint, key, success=False, task_class=task_class, error_type=kind,
                error=text.format(n=rng.randrange(1, 90_000)), input_summary=f"{task_class} #{seq}",
            )  # fmt: skip
    return {"columns": cols, "reads": reads, "follows": follows, "helping": sorted(helping)}


def write_lake(folder: Path, n_ops: int, n_keys: int, n_entries: int, effects: int, effect: float) -> None:
    """The child process: plant the day and write one Parquet file per hour (the lake's layout)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from opslake.lake.parquet import to_parquet_bytes
    from opslake.lake.schema import OPS_SCHEMA

    started = time.perf_counter()
    planted = plant(n_ops, n_keys, planted_entries(n_entries), effects, effect)
    c = planted["columns"]
    n = len(c["op_id"])
    ts = pa.array(c["ts"], pa.int64())
    given = {
        **{k: v for k, v in c.items() if k not in ("ts", "attributes")},
        "ts": ts.cast(OPS_SCHEMA.field("ts").type),
        "ingested_at": pc.add(ts, 200).cast(OPS_SCHEMA.field("ingested_at").type),
        "agent_id": c["reporter_id"],
        "duration_ms": [12.5] * n,
        "attributes": pa.array(c["attributes"], OPS_SCHEMA.field("attributes").type),
        "truncated": [False] * n,
    }
    table = pa.table(
        {
            f.name: pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
            for f in OPS_SCHEMA
        },
        schema=OPS_SCHEMA,
    )
    table = table.sort_by("ingested_at")
    hours = pc.cast(pc.divide(pc.cast(table["ingested_at"], pa.int64()), 3_600_000), pa.int64())
    for hour in sorted(set(hours.to_pylist())):
        at = datetime.fromtimestamp(hour * 3600, UTC)
        path = folder / "ops" / f"dt={at:%Y-%m-%d}" / f"hour={at:%H}" / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(to_parquet_bytes(table.filter(pc.equal(hours, hour))))
    kinds = Counter(c["endpoint"])
    (folder / "done").write_text(
        f"{n} rows ({n - planted['reads'] - planted['follows']:,} work ops, {planted['reads']:,} /playbooks reads, "
        f"{planted['follows']:,} follows, {n - sum(c['success']):,} failures; "
        f"{kinds['/playbooks']:,} /playbooks records) planted and written in {time.perf_counter() - started:.1f} s"
    )


def cached_lake(n_ops: int, n_keys: int, n_entries: int, effects: int, effect: float) -> Path:
    folder = CACHE / f"experiment-{n_ops}-{n_keys}-{n_entries}-{effects}-{effect:g}"
    if not (folder / "done").exists():
        child = multiprocessing.get_context("spawn").Process(
            target=write_lake, args=(folder, n_ops, n_keys, n_entries, effects, effect)
        )
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"planting failed (exit code {child.exitcode})")
    return folder


def engine_over(folder: Path, settings: Any) -> Any:
    """The embedded engine over the files: moto's Glue in process, the local filesystem."""
    import boto3
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from moto import mock_aws

    from opslake.lake.schema import glue_columns
    from opslake.query.embedded import EmbeddedEngine

    mock_aws().start()
    glue: Any = boto3.client("glue", region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": DATABASE})
    glue.create_table(
        DatabaseName=DATABASE,
        TableInput={
            "Name": TABLE,
            "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
            "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{folder}/ops/"},
        },
    )
    partitions = [
        {
            "Values": [path.parent.parent.name[3:], path.parent.name[5:]],
            "StorageDescriptor": {"Columns": glue_columns(), "Location": f"{path.parent}/"},
        }
        for path in sorted(folder.glob("ops/dt=*/hour=*/part-0.parquet"))
    ]
    for i in range(0, len(partitions), 100):
        glue.batch_create_partition(
            DatabaseName=DATABASE, TableName=TABLE, PartitionInputList=partitions[i : i + 100]
        )
    # the analyzer's word-variant merges, which a failure's signature is looked up in: none here
    merges = folder / "signature_merges"
    merges.mkdir(exist_ok=True)
    names = ("raw_signature_id", "signature_id", "template", "raw_template")
    pq.write_table(pa.table({n: pa.array([], pa.string()) for n in names}), merges / "merges.parquet")
    glue.create_table(
        DatabaseName=DATABASE,
        TableInput={
            "Name": "signature_merges",
            "StorageDescriptor": {
                "Columns": [{"Name": n, "Type": "string"} for n in names],
                "Location": f"{merges}/",
            },
        },
    )
    return EmbeddedEngine(
        glue,
        pafs.LocalFileSystem(),
        database=DATABASE,
        memory_limit_mb=settings.embedded_memory_limit_mb,
        threads=settings.embedded_threads,
    )


def queries_of(lookback: Window, entries: list[PlaybookEntry], trust: ReporterTrust) -> list[str]:
    """The experiment's queries as the consolidator runs them (split under Athena's query size
    limit), or the one query of a checkout without the split (``OPSLAKE_BENCH_ROOT``)."""
    try:
        from opslake.analysis.playbooks.experiment import experiment_queries
    except ImportError:
        sql = experiment_sql(TABLE, lookback, entries, trust)
        return [sql] if sql else []
    return list(experiment_queries(TABLE, lookback, entries, trust))


def _mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):+.4f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--entries", type=int, default=50)
    parser.add_argument("--effects", type=int, default=10, help="entries that truly help (the first ones)")
    parser.add_argument(
        "--effect-pp", type=float, default=8.0, help="percentage points a helping entry saves"
    )
    parser.add_argument("--runs", type=int, default=2, help="times the query runs (the first reads footers)")
    args = parser.parse_args()
    if args.entries > 50 * len(TARGETS):
        raise SystemExit(f"at most {50 * len(TARGETS)} entries: a read serves at most 50 (one target's)")
    from opslake.observability import logger

    logger.setLevel("WARNING")
    print(f"code: {ROOT}")
    effect = args.effect_pp / 100
    folder = cached_lake(args.ops, args.keys, args.entries, args.effects, effect)
    print(f"lake {folder}: {(folder / 'done').read_text()}")

    settings = load_settings()
    engine = engine_over(folder, settings)
    entries = planted_entries(args.entries)
    end = DAY_END + timedelta(seconds=1)  # the last ops are ingested 200 ms after their ts
    lookback = Window(end - timedelta(hours=settings.efficacy_lookback_h), end)
    trust = ReporterTrust.from_settings(settings)
    queries = queries_of(lookback, entries, trust)
    label = "query" if len(queries) == 1 else "queries"
    print(f"{len(queries)} {label}: {sum(len(q) for q in queries):,} characters for {len(entries)} entries")
    records: list[dict[str, Any]] = []
    for run in range(1, args.runs + 1):
        gc.collect()
        rss_before = rss_mb("VmRSS")
        can_reset = reset_peak_rss()
        started = time.perf_counter()
        results = [engine.run(sql, timeout_s=900.0) for sql in queries]
        wall = time.perf_counter() - started
        peak = rss_mb("VmHWM")
        records = [record for result in results for record in result.records()]
        print(
            f"query run {run}: {wall:.2f} s wall; {len(records):,} rows; bytes scanned "
            f"{sum(r.bytes_scanned or 0 for r in results) / 1e6:.1f} MB in "
            f"{sum(len(r.files_read or []) for r in results)} files"
            + (
                f"; RSS {rss_before:.0f} MB before, peak {peak:.0f} MB (+{peak - rss_before:.0f} MB)"
                if can_reset
                else ""
            )
        )

    rules = Rules.from_settings(settings)
    now = DAY_END + timedelta(minutes=30)
    started = time.perf_counter()
    rows = [ArmRow.from_row(r) for r in records]
    judged = apply_experiment(entries, rows, rules=rules, now=now, lookback=lookback)
    judge_s = time.perf_counter() - started
    arms = Counter(r.arm for r in rows)
    print(
        f"judgement (rows → ArmRow → apply_experiment): {judge_s * 1000:.0f} ms; rows by arm "
        + ", ".join(f"{a} {n:,}" for a, n in sorted(arms.items()))
        + f"; crossed units {judged.crossed}"
    )

    helping = {e.entry_id for e in entries[: args.effects]}
    groups: dict[str, Counter[str]] = {"planted effect": Counter(), "no effect": Counter()}
    effects: dict[str, list[float]] = {"planted effect": [], "no effect": []}
    deffs, units, ops = [], [], []
    for e in judged.entries:
        group = "planted effect" if e.entry_id in helping else "no effect"
        groups[group][judged.verdicts.get(e.entry_id, "-")] += 1
        if e.effect is not None:
            effects[group].append(e.effect)
        deffs.append(e.design_effect or 1.0)
        units.append(min(e.treatment_units or 0, e.holdout_units or 0))
        ops.append(min(e.treatment_ops or 0, e.holdout_ops or 0))
    for group, verdicts in groups.items():
        truth = f"{-args.effect_pp:g} pp" if group == "planted effect" else "0 pp"
        print(
            f"{group} ({sum(verdicts.values())} entries, true Δ {truth}): "
            + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))
            + f"; mean estimated effect (holdout − treatment) {_mean(effects[group])}"
        )
    wrong = groups["no effect"]["helpful"] + groups["no effect"]["harmful"]
    missed = groups["planted effect"]["helpful"]
    print(
        f"power: {missed}/{sum(groups['planted effect'].values())} planted-effect entries judged helpful; "
        f"false positives: {wrong}/{sum(groups['no effect'].values())} no-effect entries judged helpful or harmful; "
        f"retired {len(judged.retired)}"
    )
    print(
        f"per entry: design effect median {statistics.median(deffs):.2f} (max {max(deffs):.2f}); "
        f"keys in the smaller arm median {statistics.median(units):.0f}; ops in the smaller arm median "
        f"{statistics.median(ops):,.0f}"
    )
    followed = [(e.followed_treatment, e.followed_holdout) for e in judged.entries]
    print(
        f"follows counted: treatment {sum(t for t, _ in followed):,}, holdout {sum(h for _, h in followed):,}"
    )


if __name__ == "__main__":
    main()
