"""The analyzer over a day of ops with 1% failures in 40 planted modes: time, memory, grouping quality.

Builds the lake once per size with Arrow (failures from bench/planted.py's 40 modes, successes
generated column-wise) and caches its Parquet files under ``--cache`` (one file per hour, 24
partitions, written by the lake's own ``to_parquet_bytes`` as compaction writes an hour: zstd,
row groups of ``ROW_GROUP_ROWS``), loads them into the local stack (moto server, in this
process), and runs the real Analyzer on the embedded engine in a separate process per checkout
(``--code``, repeatable: an older checkout runs side by side on the same lake), with a fake
OpenAI-compatible model on loopback answering every call. Per size and checkout it prints the wall time of the first run
(goal ≤ 10 s at 1M), the model calls it made (goal ≤ 40), the analyzer process's peak RSS
(VmHWM, taken right after the runs: the Lambda's footprint, the stack's memory excluded),
the signature purity against the planted labels read back from the ``failures`` table (goal ≥
0.95) and the number of signatures, and the same for a second run with no new ops (goal: zero
model calls).

    .venv/bin/python bench/bench_analyzer.py [--ops 1000000 10000000] [--code /tmp/i13/old --code .]
        [--catalog words]

``--catalog words`` plants the 12 modes of bench/planted_words.py instead (errors naming cities,
products, users …: word-valued variables); the grouping accuracy (Loghub's GA,
bench/grouping_scores.py) is printed beside the purity.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
START = datetime(2025, 6, 1, tzinfo=UTC)
FAILURE_RATE = 0.01
ANSWER = {
    "cause": "planted failure",
    "agent_adjustment": "do the other thing",
    "avoid": True,
    "category": "other",
    "confidence": 0.5,
}
# The failures table as template.yaml declared it before it became a view (for older checkouts).
OLD_FAILURES_COLUMNS = [
    ("op_id", "string"),
    ("signature_id", "string"),
    ("endpoint", "string"),
    ("agent_id", "string"),
    ("error_type", "string"),
    ("ts", "timestamp"),
    ("ingested_at", "timestamp"),
    ("reporter_id", "string"),
]


def use_code(root: Path) -> None:
    sys.path[:0] = [str(root / "layers" / "common"), str(root / "local"), str(root / "bench"), str(root)]


# -- the lake (built once per size, cached) ---------------------------------------------------
def build_lake(n_ops: int, folder: Path, catalog: str = "planted") -> None:
    """``folder/dt=…/hour=…/bench.parquet`` (24 hours of ``n_ops`` ops) and ``folder/labels.parquet``
    (op_id → planted mode of every failure). Failures come from planted.generate (all failing),
    successes are generated column-wise by numpy/Arrow, so 10M ops build in seconds."""
    import numpy as np
    import planted_words
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from planted import MODES, SUCCESS_ENDPOINTS, generate

    from opslake.lake.parquet import to_parquet_bytes
    from opslake.lake.schema import OPS_SCHEMA

    rng = np.random.default_rng(7)
    n_fail = round(n_ops * FAILURE_RATE)
    n_ok = n_ops - n_fail
    modes = planted_words.MODES if catalog == "words" else MODES
    failed = generate(n_ops=n_fail, failure_rate=1.0, seed=7, catalog=modes).columns
    agents = pa.array([f"agent-{i:04d}" for i in range(500)])
    start_ms = int(START.timestamp() * 1000)
    day_ms = 86_400_000
    ok_ts = rng.integers(0, day_ms, n_ok) + start_ms
    fail_ts = rng.integers(0, day_ms, n_fail) + start_ms
    inputs = pa.array([f"input {i}" for i in range(97)])
    successes = {
        "op_id": pc.binary_join_element_wise("op-ok-", pc.cast(pa.array(np.arange(n_ok)), pa.string()), ""),
        "ts_ms": pa.array(ok_ts),
        "endpoint": pc.take(
            pa.array(SUCCESS_ENDPOINTS), pa.array(rng.integers(0, len(SUCCESS_ENDPOINTS), n_ok))
        ),
        "agent_id": pc.take(agents, pa.array(rng.integers(0, len(agents), n_ok))),
        "success": pa.array(np.ones(n_ok, dtype=bool)),
        "input_summary": pc.take(inputs, pa.array(np.arange(n_ok) % 97)),
        "error": pa.nulls(n_ok, pa.string()),
        "error_type": pa.nulls(n_ok, pa.string()),
    }
    failures = {
        "op_id": pa.array([f"op-fail-{i}" for i in range(n_fail)]),
        "ts_ms": pa.array(fail_ts),
        "endpoint": pa.array(failed["endpoint"]),
        "agent_id": pa.array(failed["agent_id"]),
        "success": pa.array(np.zeros(n_fail, dtype=bool)),
        "input_summary": pa.array(failed["input_summary"]),
        "error": pa.array(failed["error"], pa.string()),
        "error_type": pa.array(failed["error_type"], pa.string()),
    }
    table = pa.concat_tables([pa.table(successes), pa.table(failures)]).sort_by("ts_ms")
    n = len(table)
    ts = pc.cast(table["ts_ms"], pa.timestamp("ms", tz="UTC"))
    columns = {
        "op_id": table["op_id"],
        "ts": ts,
        "ingested_at": ts,
        "endpoint": table["endpoint"],
        "source": pa.repeat("gateway", n),
        "agent_id": table["agent_id"],
        "reporter_id": table["agent_id"],
        "success": table["success"],
        "duration_ms": pa.array(np.full(n, 12.5)),
        "input_summary": table["input_summary"],
        "error": table["error"],
        "error_type": table["error_type"],
        "truncated": pa.array(np.zeros(n, dtype=bool)),
    }
    ops = pa.table(
        {f.name: columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in OPS_SCHEMA},
        schema=OPS_SCHEMA,
    )
    hours = (table["ts_ms"].to_numpy() - start_ms) // 3_600_000
    bounds = np.searchsorted(hours, np.arange(25))
    for h in range(24):
        at = START + timedelta(hours=h)
        part = folder / f"dt={at:%Y-%m-%d}" / f"hour={at:%H}"
        part.mkdir(parents=True, exist_ok=True)
        # as the lake's writer and compaction write a file (zstd, row groups of ROW_GROUP_ROWS)
        (part / "bench.parquet").write_bytes(
            to_parquet_bytes(ops.slice(bounds[h], bounds[h + 1] - bounds[h]))
        )
    pq.write_table(
        pa.table({"op_id": failures["op_id"], "mode": pa.array(failed["mode"])}), folder / "labels.parquet"
    )


def lake_files(n_ops: int, cache: Path, catalog: str = "planted") -> Path:
    from opslake.lake.parquet import ROW_GROUP_ROWS

    # a lake written with other row groups (or other planted modes) is another lake
    folder = cache / f"ops-{n_ops}-rg{ROW_GROUP_ROWS}{'' if catalog == 'planted' else '-' + catalog}"
    if not (folder / "labels.parquet").exists():
        began = time.perf_counter()
        build_lake(n_ops, folder, catalog)
        print(f"built the {n_ops:,}-op lake in {time.perf_counter() - began:.1f} s ({folder})", flush=True)
    return folder


def upload(stack: Any, folder: Path) -> None:
    from opslake.config import load_settings
    from opslake.lake.catalog import GlueCatalog

    settings = load_settings()
    s3 = stack.client("s3")
    partitions = []
    for path in sorted(folder.glob("dt=*/hour=*/bench.parquet")):
        dt, hour = path.parent.parent.name[3:], path.parent.name[5:]
        key = f"{settings.ops_prefix}dt={dt}/hour={hour}/bench.parquet"
        s3.put_object(Bucket=settings.lake_bucket, Key=key, Body=path.read_bytes())
        partitions.append((dt, hour))
    GlueCatalog(stack.client("glue"), settings.glue_database, "ops").ensure_partitions(partitions)


def reset(stack: Any, *, old_failures_table: bool) -> None:
    """Forget a previous checkout's run: its state, derived objects, and the failures table/view
    (an older checkout gets the Parquet table it wrote to)."""
    from opslake.config import load_settings

    settings = load_settings()
    s3, glue = stack.client("s3"), stack.client("glue")
    for prefix in ("state/", "derived/"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=settings.lake_bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                s3.delete_object(Bucket=settings.lake_bucket, Key=obj["Key"])
    with contextlib.suppress(glue.exceptions.EntityNotFoundException):
        glue.delete_table(DatabaseName=settings.glue_database, Name="failures")
    if old_failures_table:
        glue.create_table(
            DatabaseName=settings.glue_database,
            TableInput={
                "Name": "failures",
                "TableType": "EXTERNAL_TABLE",
                "Parameters": {"classification": "parquet", "EXTERNAL": "TRUE"},
                "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
                "StorageDescriptor": {
                    "Location": f"s3://{settings.lake_bucket}/derived/failures/",
                    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                    "SerdeInfo": {
                        "SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                    },
                    "Columns": [{"Name": n, "Type": t} for n, t in OLD_FAILURES_COLUMNS],
                },
            },
        )


# -- one checkout (a worker process) ----------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM, the high-water mark of its own memory map. (``ru_maxrss``
    would not do: Linux carries it across fork and exec, so a worker started by a parent holding
    a 10M-op lake would report the parent's size.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB (macOS: bytes)


def worker(code: Path, llm_url: str, budget: int, labels_path: Path) -> dict[str, Any]:
    use_code(code)
    import pyarrow.parquet as pq

    import opslake
    from opslake import runtime
    from opslake.analysis.diagnoser import Diagnoser
    from opslake.config import load_settings
    from opslake.jobs.analyzer import Analyzer
    from opslake.jobs.lease import StateStore
    from opslake.lake.store import S3ObjectStore
    from opslake.llm import LlmClient, LlmConfig
    from opslake.query.embedded import EmbeddedEngine

    settings = load_settings().model_copy(
        update={"analyzer_settle_s": 0.0, "analyzer_initial_lookback_h": 25.0, "diagnosis_budget": budget}
    )
    s3, glue = runtime.client("s3"), runtime.client("glue")
    llm = LlmClient(LlmConfig(base_url=llm_url, model="fake-model"))
    runs = []
    rss_before = peak_rss_mb()
    for label, now in (
        ("first run", START + timedelta(hours=24)),
        ("second run", START + timedelta(hours=24, minutes=5)),
    ):
        wiring: dict[str, Any] = {}
        if "failures_catalog" in inspect.signature(Analyzer).parameters:  # before issue 13
            from opslake.lake.catalog import GlueCatalog

            wiring["failures_catalog"] = GlueCatalog(glue, settings.glue_database, "failures")
        else:
            wiring["glue"] = glue
        analyzer = Analyzer(
            settings=settings,
            engine=EmbeddedEngine.from_settings(settings),
            store=S3ObjectStore(s3, settings.lake_bucket),
            state=StateStore(
                s3, settings.lake_bucket, settings.analyzer_state_key, lease_s=600, clock=lambda n=now: n
            ),
            diagnoser=Diagnoser(llm),
            clock=lambda n=now: n,
            **wiring,
        )
        began = time.perf_counter()
        report = analyzer.run()
        runs.append(
            {
                "label": label,
                "wall_s": time.perf_counter() - began,
                "status": report.status,
                "failures_read": report.failures_read,
                "signatures_new": report.signatures_new,
                "signatures_total": report.signatures_total,
                "llm_calls": report.llm_calls,
                "diagnoses": report.diagnoses,
                "pending": report.diagnoses_pending,
                "scanned_mb": (report.bytes_scanned or 0) / 1e6,
                "queries": report.queries,
            }
        )
    rss = peak_rss_mb()
    labels = dict(
        zip(*(pq.read_table(labels_path).column(c).to_pylist() for c in ("op_id", "mode")), strict=True)
    )
    rows = EmbeddedEngine.from_settings(settings).run("SELECT op_id, signature_id FROM failures").rows
    from grouping_scores import grouping_accuracy

    accuracy = grouping_accuracy([r[1] for r in rows], [labels[r[0]] for r in rows])
    by_signature: dict[str, Counter[str]] = defaultdict(Counter)
    for op_id, signature in rows:
        by_signature[signature][labels[op_id]] += 1
    per_mode: dict[str, set[str]] = defaultdict(set)
    for signature, counter in by_signature.items():
        for mode in counter:
            per_mode[mode].add(signature)
    return {
        "code": str(Path(opslake.__file__).resolve().parents[3]),
        "runs": runs,
        "rss_before_mb": rss_before,
        "peak_rss_mb": rss,
        "failures_rows": len(rows),
        "distinct_ops": len({r[0] for r in rows}),
        "signatures": len(by_signature),
        "modes": len(per_mode),
        "purity": sum(c.most_common(1)[0][1] for c in by_signature.values()) / max(len(rows), 1),
        "grouping_accuracy": accuracy,
        "max_per_mode": max((len(s) for s in per_mode.values()), default=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument(
        "--code", type=Path, action="append", help="a checkout to run (repeatable; default: this one)"
    )
    parser.add_argument("--cache", type=Path, default=Path("/tmp/opslake-bench-analyzer"))
    parser.add_argument(
        "--catalog", choices=("planted", "words"), default="planted", help="the planted modes"
    )
    parser.add_argument(
        "--worker", nargs=4, metavar=("CODE", "LLM_URL", "BUDGET", "LABELS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        code, url, budget, labels = args.worker
        print(json.dumps(worker(Path(code), url, int(budget), Path(labels))))
        return
    use_code(HERE)
    from opslake_local.stack import QUIET_ENV, LocalStack
    from tests.fake_llm import FakeLlm

    codes = [c.resolve() for c in args.code or [HERE]]
    for n_ops in args.ops:
        folder = lake_files(n_ops, args.cache, args.catalog)
        with (
            LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack,
            FakeLlm() as llm_api,
        ):
            llm_api.default = FakeLlm.answer(ANSWER)
            began = time.perf_counter()
            upload(stack, folder)
            print(
                f"{n_ops:,} ops loaded into the local stack in {time.perf_counter() - began:.1f} s",
                flush=True,
            )
            for code in codes:
                reset(
                    stack,
                    old_failures_table=not (code / "layers/common/opslake/analysis/masking.py").exists(),
                )
                env = {**os.environ, "PYTHONPATH": ""}
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", str(code), llm_api.base_url, str(args.budget),
                     str(folder / "labels.parquet")],
                    check=True, capture_output=True, text=True, env=env,
                ).stdout  # fmt: skip
                r = json.loads(out.strip().splitlines()[-1])
                print(f"[{n_ops:,} ops] {r['code']}")
                for run in r["runs"]:
                    print(
                        f"  {run['label']}: {run['wall_s']:.2f} s wall; failures read {run['failures_read']:,}; "
                        f"signatures new {run['signatures_new']}, total {run['signatures_total']}; "
                        f"LLM calls {run['llm_calls']}; diagnoses {run['diagnoses']} (pending {run['pending']}); "
                        f"bytes scanned {run['scanned_mb']:.1f} MB in {run['queries']} queries"
                    )
                print(
                    f"  peak RSS {r['peak_rss_mb']:.0f} MB (before the first run {r['rss_before_mb']:.0f} MB); "
                    f"failures rows {r['failures_rows']:,} (distinct ops {r['distinct_ops']:,}); "
                    f"signatures {r['signatures']} for {r['modes']} planted modes; purity {r['purity']:.4f}; "
                    f"grouping accuracy {r['grouping_accuracy']:.4f}; "
                    f"max signatures per mode {r['max_per_mode']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
