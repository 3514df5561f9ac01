"""The consolidator over a day of 1,000,000 ops or more (the analyzer bench's planted day, with realistic successes).

Loads the planted ops of ``bench_analyzer.py`` into the local stack (moto server, 24 hour
partitions, embedded engine), after giving the successes realistic task classes and inputs: a
few SQL shapes, staffing matches, worker and table look-ups, HTTP tool calls and model prompts,
each with varying literals (cities, roles, ids, limits), spread over 500 agents, so that grouping
and merging do real work; 0.5% of them become ``/log`` records (lessons, successes, failures).
More than 1,000,000 ops (``--ops 10000000``) are that day repeated with Arrow compute (new op ids,
timestamps a few milliseconds apart). The lake's hourly Parquet objects are cached under
``/tmp/opslake-bench/`` (built once per size); one object per hour, or ``--rows-per-object`` at most.

A child process loads the lake and runs the Analyzer (heuristic diagnoser, no model) so that
"avoid" diagnoses exist; this process then times one Consolidator run (heuristic distiller, no
compaction) and prints rows read, candidates, entries (by source and kind), the holdout
experiment's rows, bytes scanned, queries and its peak RSS during the run (VmHWM, reset just before it; the
load and the analyzer ran elsewhere, so the figure is the consolidator's). ``--tracemalloc``
repeats the first run from a fresh state under tracemalloc for the peak of Python allocations
(slower: its wall time is not the figure). Then a second run 30 minutes later with no new ops.
``--entries FILE`` writes the entries of the first run as JSON (to compare runs). Never asserts.

``OPSLAKE_BENCH_ROOT=/path/to/other/checkout`` runs that checkout's code with this script (before
and after, side by side).

    .venv/bin/python bench/bench_consolidator.py [--ops 1000000] [--tracemalloc] [--profile] [--entries F]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import inspect
import io
import json
import multiprocessing
import os
import pstats
import random
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("OPSLAKE_BENCH_ROOT") or Path(__file__).resolve().parents[1])
for extra in (ROOT / "layers" / "common", ROOT / "local", Path(__file__).resolve().parent, ROOT):
    sys.path.insert(0, str(extra))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from planted import CITIES, ROLES, generate  # noqa: E402

from opslake.analysis.diagnoser import Diagnoser  # noqa: E402
from opslake.config import Settings, load_settings  # noqa: E402
from opslake.jobs.analyzer import Analyzer  # noqa: E402
from opslake.jobs.consolidator import Consolidator, ConsolidatorRun  # noqa: E402
from opslake.jobs.lease import StateStore  # noqa: E402
from opslake.lake.catalog import GlueCatalog  # noqa: E402
from opslake.lake.parquet import to_parquet_bytes  # noqa: E402
from opslake.lake.schema import OPS_SCHEMA  # noqa: E402
from opslake.lake.store import S3ObjectStore  # noqa: E402
from opslake.observability import logger  # noqa: E402
from opslake.query.embedded import EmbeddedEngine  # noqa: E402
from opslake_local.stack import QUIET_ENV, LocalStack  # noqa: E402

Clients = Callable[[str], Any]

START = datetime(2025, 6, 1, tzinfo=UTC)  # planted.generate's default start
ANALYZED_AT = START + timedelta(hours=24)
FIRST_RUN = ANALYZED_AT + timedelta(minutes=30)
SECOND_RUN = FIRST_RUN + timedelta(minutes=30)
LOG_SHARE = 0.005
BASE_OPS = 1_000_000  # a bigger day repeats this one
CACHE = Path("/tmp/opslake-bench")

SQL_SHAPES = (
    "SELECT name, hourly_rate FROM workers WHERE city = '{city}' LIMIT {n}",
    "SELECT role, avg(hourly_rate) FROM workers WHERE city = '{city}' GROUP BY role",
    "SELECT worker_id, rating FROM workers WHERE role = '{role}' ORDER BY rating DESC LIMIT {n}",
    "SELECT count(*) FROM placements WHERE start_date >= '2025-05-{day:02d}'",
    "SELECT w.name FROM workers w JOIN placements p ON p.worker_id = w.worker_id WHERE p.job_id = {n}",
    "SELECT endpoint, count(*) FROM ops WHERE success = false AND ts > now() - interval '{n}' hour",
)
LOG_OPERATIONS = {
    "staff a job": ("match by role first, then filter by city", "ask /match with a 25 mile radius"),
    "find a worker's rate": ("read /worker/{id} instead of guessing in SQL",),
    "write a report query": ("list /tables before writing SQL", "quote string literals"),
}


def realistic_successes(columns: dict[str, list[Any]], seed: int = 11) -> dict[str, list[Any]]:
    """Give the planted successes realistic task classes and inputs (and turn a few into /log
    records); failures are left as planted. Adds ``task_class``, ``source``, ``event_kind`` and
    ``output_summary`` columns."""
    rng = random.Random(seed)
    n = len(columns["op_id"])
    endpoint, summary, success = columns["endpoint"], columns["input_summary"], columns["success"]
    task_class: list[str | None] = [None] * n
    source = ["gateway"] * n
    event_kind: list[str | None] = [None] * n
    output: list[str | None] = [None] * n
    operations = list(LOG_OPERATIONS)
    for i in range(n):
        if not success[i]:
            task_class[i] = "sql_question" if endpoint[i] == "/sql" else None
            continue
        if rng.random() < LOG_SHARE:
            operation = rng.choice(operations)
            endpoint[i], source[i], event_kind[i] = "/log", "agent_log", "log"
            task_class[i] = "staff_job" if operation == "staff a job" else "sql_question"
            summary[i] = f"{operation}: {rng.choice(LOG_OPERATIONS[operation])}"
            output[i] = rng.choice(("lesson", "success", "success", "failure: no rows came back"))
            continue
        city, role, num = rng.choice(CITIES), rng.choice(ROLES), rng.randrange(1, 5000)
        ep = endpoint[i]
        if ep == "/sql":
            shape = rng.randrange(len(SQL_SHAPES))
            summary[i] = SQL_SHAPES[shape].format(city=city, role=role, n=num % 500 + 1, day=num % 28 + 1)
            task_class[i] = "sql_report" if shape >= 3 else "sql_question"
        elif ep == "/match":
            summary[i] = f"match {role} in {city} within {rng.choice((10, 25, 50))} miles"
            task_class[i] = "staff_job"
        elif ep == "/worker/{id}":
            summary[i], task_class[i] = f"GET /worker/W{num:05d}", "lookup_worker"
        elif ep == "/tables/{name}":
            table = rng.choice(("workers", "placements", "jobs", "ops"))
            summary[i], task_class[i] = f"GET /tables/{table}", "browse_schema"
        elif ep == "/tables":
            summary[i], task_class[i] = "GET /tables", "browse_schema"
        elif ep == "tool:http_get":
            summary[i] = f"https://api.example.com/v1/jobs/{num}?city={city}"
            task_class[i] = "fetch_external"
        else:  # runtime:llm
            if rng.random() < 0.5:
                summary[i] = f"summarize {num % 9 + 2} candidate profiles for job {num}"
            else:
                summary[i] = f"draft an offer letter for worker W{num:05d} as a {role}"
            task_class[i] = "summarize"
    return {
        **columns,
        "task_class": task_class,
        "source": source,
        "event_kind": event_kind,
        "output_summary": output,
    }


def day_table(n_ops: int) -> pa.Table:
    """The planted day with realistic successes as one Arrow table in ``OPS_SCHEMA``."""
    c = realistic_successes(generate(n_ops=n_ops).columns)
    n = len(c["op_id"])
    ts = pa.array(c["ts_ms"], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    given = {
        "op_id": c["op_id"],
        "ts": ts,
        "ingested_at": ts,
        "endpoint": c["endpoint"],
        "source": c["source"],
        "event_kind": c["event_kind"],
        "agent_id": c["agent_id"],
        "reporter_id": c["agent_id"],
        "success": c["success"],
        "duration_ms": [12.5] * n,
        "task_class": c["task_class"],
        "input_summary": c["input_summary"],
        "output_summary": c["output_summary"],
        "error": c["error"],
        "error_type": c["error_type"],
        "truncated": [False] * n,
    }
    return pa.table(
        {
            f.name: pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
            for f in OPS_SCHEMA
        },
        schema=OPS_SCHEMA,
    )


def repeated(hour: pa.Table, copies: int) -> pa.Table:
    """An hour's ops ``copies`` times (Arrow compute): copy k has ``-k`` appended to its op ids and
    its timestamps ``k`` ms later (ingested_at unchanged, so it stays in its partition)."""
    parts = [hour]
    ts_index = hour.schema.get_field_index("ts")
    id_index = hour.schema.get_field_index("op_id")
    as_ms = pc.cast(hour["ts"], pa.int64())
    for k in range(1, copies):
        copy = hour.set_column(
            id_index, hour.schema.field("op_id"), pc.binary_join_element_wise(hour["op_id"], f"-{k}", "")
        )
        shifted = pc.cast(pc.add(as_ms, k), pa.int64()).cast(hour.schema.field("ts").type)
        parts.append(copy.set_column(ts_index, hour.schema.field("ts"), shifted))
    return pa.concat_tables(parts)


def cached_lake(n_ops: int, rows_per_object: int = 0) -> Path:
    """The lake's Parquet objects for ``n_ops`` ops, one per hour or objects of at most
    ``rows_per_object`` rows (built once, then reused)."""
    folder = CACHE / (f"consolidator-{n_ops}" + (f"-{rows_per_object}" if rows_per_object else ""))
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    base_ops = min(n_ops, BASE_OPS)
    copies = -(-n_ops // base_ops)
    table = day_table(base_ops)
    hours = pc.floor(pc.divide(pc.cast(pc.cast(table["ingested_at"], pa.int64()), pa.float64()), 3_600_000.0))
    for hour in sorted(set(hours.to_pylist())):
        at = datetime.fromtimestamp(hour * 3600, UTC)
        part = repeated(table.filter(pc.equal(hours, hour)), copies)
        step = rows_per_object or part.num_rows
        for i, start in enumerate(range(0, part.num_rows, step)):
            path = folder / f"{at:%Y-%m-%d}_{at:%H}_{i:03d}.parquet"
            path.write_bytes(to_parquet_bytes(part.slice(start, step)))
    (folder / "done").write_text(str(n_ops))
    return folder


def load(client: Clients, n_ops: int, rows_per_object: int = 0) -> dict[str, int]:
    """Put the cached objects into the local lake."""
    settings = load_settings()
    s3 = client("s3")
    counts: Counter[str] = Counter()
    partitions = set()
    for path in sorted(cached_lake(n_ops, rows_per_object).glob("*.parquet")):
        dt, hh, i = path.stem.split("_")
        part = pq.read_table(path, columns=["success", "event_kind"])
        counts["ops"] += part.num_rows
        counts["failures"] += part.num_rows - pc.sum(part["success"]).as_py()
        counts["logs"] += pc.sum(pc.equal(part["event_kind"], "log")).as_py() or 0
        key = f"{settings.ops_prefix}dt={dt}/hour={hh}/bench-{i}.parquet"
        s3.put_object(Bucket=settings.lake_bucket, Key=key, Body=path.read_bytes())
        partitions.add((dt, hh))
    GlueCatalog(client("glue"), settings.glue_database, "ops").ensure_partitions(sorted(partitions))
    counts["successes"] = counts["ops"] - counts["failures"] - counts["logs"]
    return dict(counts)


def analyze(client: Clients, settings: Settings) -> None:
    s3 = client("s3")
    # the analyzer keeps failures as a Glue view (issue 13) or, in older code, as a table it writes
    wiring: dict[str, Any] = (
        {"glue": client("glue")}
        if "glue" in inspect.signature(Analyzer).parameters
        else {"failures_catalog": GlueCatalog(client("glue"), settings.glue_database, "failures")}
    )
    analyzer = Analyzer(
        settings=settings,
        engine=EmbeddedEngine.from_settings(settings),
        store=S3ObjectStore(s3, settings.lake_bucket),
        **wiring,
        state=StateStore(
            s3, settings.lake_bucket, settings.analyzer_state_key, lease_s=600, clock=lambda: ANALYZED_AT
        ),
        diagnoser=Diagnoser(),  # heuristic: no model
        clock=lambda: ANALYZED_AT,
    )
    started = time.perf_counter()
    report = analyzer.run()
    print(
        f"analyzer (heuristic diagnoser): {time.perf_counter() - started:.2f} s; failures read "
        f"{report.failures_read:,}; signatures {report.signatures_total}; diagnoses {report.diagnoses}"
    )


def consolidator(stack: LocalStack, settings: Settings, now: datetime) -> Consolidator:
    s3 = stack.client("s3")
    return Consolidator(
        settings=settings,
        engine=EmbeddedEngine.from_settings(settings),
        store=S3ObjectStore(s3, settings.lake_bucket),
        state=StateStore(
            s3, settings.lake_bucket, settings.consolidator_state_key, lease_s=1800, clock=lambda: now
        ),
        compactor=None,
        clock=lambda: now,
    )


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS
    except OSError:
        return False
    return True


def _measured(report: ConsolidatorRun) -> str:
    """What measured the entries: the holdout experiment's rows, or (an older checkout, through
    OPSLAKE_BENCH_ROOT) the before/after outcomes."""
    if hasattr(report, "experiment_rows"):
        return f"experiment rows {report.experiment_rows:,}"
    return f"outcomes read {getattr(report, 'outcomes_read', 0):,}"


def describe(label: str, wall: float, report: ConsolidatorRun) -> None:
    print(
        f"{label}: {wall:.2f} s wall (status {report.status}); read successes {report.successes_read:,}, "
        f"logs {report.logs_read:,}, diagnoses {report.diagnoses_read}; candidates {report.candidates}; "
        f"entries created {len(report.entries_created)}, updated {len(report.entries_updated)}, "
        f"retired {len(report.entries_retired)}, rejected {len(report.rejected)}; active {report.active_entries}; "
        f"{_measured(report)}; bytes scanned {report.bytes_scanned / 1e6:.1f} MB "
        f"in {report.queries} queries"
    )


def prepare(n_ops: int, rows_per_object: int, endpoint: str) -> None:
    """The child process: load the lake and run the analyzer (their memory is not the consolidator's)."""
    import boto3

    logger.setLevel("WARNING")

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=endpoint)  # type: ignore[call-overload]

    started = time.perf_counter()
    counts = load(client, n_ops, rows_per_object)
    print(
        f"loaded {counts['ops']:,} ops ({counts['successes']:,} successes, {counts['logs']:,} /log records, "
        f"{counts['failures']:,} failures) in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    base = load_settings().model_copy(update={"analyzer_settle_s": 0.0, "query_timeout_s": 900.0})
    analyze(client, base.model_copy(update={"analyzer_initial_lookback_h": 24.0, "diagnosis_budget": 40}))
    sys.stdout.flush()


def entries_summary(stack: LocalStack, settings: Settings) -> list[dict[str, Any]]:
    """The entries the consolidator keeps (state object), for the summary and ``--entries``."""
    body = stack.client("s3").get_object(Bucket=settings.lake_bucket, Key=settings.consolidator_state_key)[
        "Body"
    ]
    entries: list[dict[str, Any]] = json.loads(body.read())["data"]["entries"]
    kinds = Counter(f"{e.get('source')}/{e.get('kind')}/{e.get('status')}" for e in entries)
    print("entries by source/kind/status: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--tracemalloc", action="store_true", help="repeat the first run under tracemalloc")
    parser.add_argument("--profile", action="store_true", help="cProfile the first run (top 15)")
    parser.add_argument("--entries", type=Path, help="write the first run's entries to this JSON file")
    parser.add_argument(
        "--rows-per-object",
        type=int,
        default=0,
        help="objects of at most this many ops (default: one per hour)",
    )
    args = parser.parse_args()
    logger.setLevel("WARNING")  # the runs' own JSON log lines repeat what is printed
    print(f"code: {ROOT}")
    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack:
        child = multiprocessing.get_context("spawn").Process(
            target=prepare, args=(args.ops, args.rows_per_object, stack.endpoint)
        )
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"loading or analyzing failed (exit code {child.exitcode})")
        base = load_settings().model_copy(update={"analyzer_settle_s": 0.0})
        # the first consolidator run reads the whole day and the diagnoses created at its end (the
        # default reads at most 2 h per run; a day of 10M ops takes longer than the default 60 s
        # query limit on this machine's embedded engine)
        settings = base.model_copy(update={"consolidator_max_window_h": 24.5, "query_timeout_s": 900.0})

        gc.collect()
        rss_before = rss_mb("VmRSS")
        can_reset = reset_peak_rss()
        profiler = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        report = consolidator(stack, settings, FIRST_RUN).run()
        if profiler:
            profiler.disable()
        wall = time.perf_counter() - started
        peak = rss_mb("VmHWM")
        describe("first run", wall, report)
        if can_reset:
            print(
                f"first run: process RSS {rss_before:.0f} MB before, peak {peak:.0f} MB during "
                f"(+{peak - rss_before:.0f} MB; VmHWM reset just before the run)"
            )
        entries = entries_summary(stack, settings)
        if args.entries:
            args.entries.write_text(json.dumps(entries, indent=1, sort_keys=True, default=str))
        if profiler:
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(15)
            stats.sort_stats("tottime").print_stats(15)
            print(out.getvalue())

        if args.tracemalloc:
            s3 = stack.client("s3")
            for key in (settings.consolidator_state_key, settings.playbooks_key):
                s3.delete_object(Bucket=settings.lake_bucket, Key=key)
            gc.collect()
            tracemalloc.start()
            started = time.perf_counter()
            again = consolidator(stack, settings, FIRST_RUN).run()
            wall = time.perf_counter() - started
            _, traced_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(
                f"first run again from a fresh state under tracemalloc: {wall:.2f} s wall; "
                f"entries created {len(again.entries_created)}; Python allocations peak {traced_peak / 1e6:.0f} MB"
            )

        started = time.perf_counter()
        report = consolidator(stack, settings, SECOND_RUN).run()
        describe("second run (30 min later, no new ops)", time.perf_counter() - started, report)


if __name__ == "__main__":
    main()
