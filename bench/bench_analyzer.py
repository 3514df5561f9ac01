"""The analyzer over a day of 1,000,000 ops with 1% failures in 40 planted modes.

Loads the ops into the local stack (moto server, 24 hour partitions) and runs the real Analyzer
on the embedded engine, with a fake OpenAI-compatible model on loopback answering every call.
Prints the wall time of the first run (goal ≤ 10 s), the model calls it made (goal ≤ 40), the
signature purity against the planted labels read back from the ``failures`` table (goal ≥ 0.95),
and the same for a second run with no new ops (goal: zero model calls).

    .venv/bin/python bench/bench_analyzer.py [--ops 1000000] [--budget 40]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT / "layers" / "common", ROOT / "local", ROOT / "bench", ROOT):
    sys.path.insert(0, str(extra))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from planted import generate  # noqa: E402

from opslake.analysis.diagnoser import Diagnoser  # noqa: E402
from opslake.config import load_settings  # noqa: E402
from opslake.jobs.analyzer import Analyzer  # noqa: E402
from opslake.jobs.lease import StateStore  # noqa: E402
from opslake.lake.catalog import GlueCatalog  # noqa: E402
from opslake.lake.parquet import to_parquet_bytes  # noqa: E402
from opslake.lake.schema import OPS_SCHEMA  # noqa: E402
from opslake.lake.store import S3ObjectStore  # noqa: E402
from opslake.llm import LlmClient, LlmConfig  # noqa: E402
from opslake.query.embedded import EmbeddedEngine  # noqa: E402
from opslake_local.stack import QUIET_ENV, LocalStack  # noqa: E402
from tests.fake_llm import FakeLlm  # noqa: E402

START = datetime(2025, 6, 1, tzinfo=UTC)
ANSWER = {
    "cause": "planted failure",
    "agent_adjustment": "do the other thing",
    "avoid": True,
    "category": "other",
    "confidence": 0.5,
}


def load(stack: LocalStack, n_ops: int) -> dict[str, str]:
    """Write the planted ops as one Parquet object per hour; return op_id → planted mode."""
    settings = load_settings()
    data = generate(n_ops=n_ops)
    c = data.columns
    n = len(data)
    ts = pa.array(c["ts_ms"], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    table = pa.table(
        {
            "op_id": c["op_id"],
            "ts": ts,
            "ingested_at": ts,
            "endpoint": c["endpoint"],
            "source": ["gateway"] * n,
            "agent_id": c["agent_id"],
            "reporter_id": c["agent_id"],
            "success": c["success"],
            "duration_ms": [12.5] * n,
            "input_summary": c["input_summary"],
            "error": c["error"],
            "error_type": c["error_type"],
            "truncated": [False] * n,
        }
    )
    table = pa.table(
        {f.name: table[f.name] if f.name in table.column_names else pa.nulls(n, f.type) for f in OPS_SCHEMA},
        schema=OPS_SCHEMA,
    )
    hours = pc.floor(pc.divide(pa.array(c["ts_ms"], pa.int64()).cast(pa.float64()), 3_600_000.0))
    s3 = stack.client("s3")
    partitions = []
    for hour in sorted(set(hours.to_pylist())):
        at = datetime.fromtimestamp(hour * 3600, UTC)
        dt, hh = at.strftime("%Y-%m-%d"), at.strftime("%H")
        part = table.filter(pc.equal(hours, hour))
        key = f"{settings.ops_prefix}dt={dt}/hour={hh}/bench.parquet"
        s3.put_object(Bucket=settings.lake_bucket, Key=key, Body=to_parquet_bytes(part))
        partitions.append((dt, hh))
    GlueCatalog(stack.client("glue"), settings.glue_database, "ops").ensure_partitions(partitions)
    return {c["op_id"][i]: c["mode"][i] for i in data.failure_indexes()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--budget", type=int, default=40)
    args = parser.parse_args()
    with (
        LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack,
        FakeLlm() as llm_api,
    ):
        llm_api.default = FakeLlm.answer(ANSWER)
        started = time.perf_counter()
        labels = load(stack, args.ops)
        print(f"loaded {args.ops:,} ops ({len(labels):,} failures) in {time.perf_counter() - started:.1f} s")
        settings = load_settings().model_copy(
            update={
                "analyzer_settle_s": 0.0,
                "analyzer_initial_lookback_h": 25.0,
                "diagnosis_budget": args.budget,
            }
        )
        s3 = stack.client("s3")
        llm = LlmClient(LlmConfig(base_url=llm_api.base_url, model="fake-model"))
        for label, now in (
            ("first run", START + timedelta(hours=24)),
            ("second run", START + timedelta(hours=24, minutes=5)),
        ):
            analyzer = Analyzer(
                settings=settings,
                engine=EmbeddedEngine.from_settings(settings),
                store=S3ObjectStore(s3, settings.lake_bucket),
                failures_catalog=GlueCatalog(stack.client("glue"), settings.glue_database, "failures"),
                state=StateStore(
                    s3,
                    settings.lake_bucket,
                    settings.analyzer_state_key,
                    lease_s=600,
                    clock=lambda now=now: now,
                ),
                diagnoser=Diagnoser(llm),
                clock=lambda now=now: now,
            )
            started = time.perf_counter()
            report = analyzer.run()
            wall = time.perf_counter() - started
            print(
                f"{label}: {wall:.2f} s wall; failures read {report.failures_read:,}; "
                f"signatures new {report.signatures_new}, total {report.signatures_total}; "
                f"LLM calls {report.llm_calls}; diagnoses {report.diagnoses} (pending {report.diagnoses_pending}); "
                f"bytes scanned {report.bytes_scanned / 1e6:.1f} MB in {report.queries} queries"
            )
        rows = EmbeddedEngine.from_settings(settings).run("SELECT op_id, signature_id FROM failures").rows
        by_signature: dict[str, Counter[str]] = defaultdict(Counter)
        for op_id, signature in rows:
            by_signature[signature][labels[op_id]] += 1
        majority = sum(counter.most_common(1)[0][1] for counter in by_signature.values())
        per_mode: dict[str, set[str]] = defaultdict(set)
        for signature, counter in by_signature.items():
            for mode in counter:
                per_mode[mode].add(signature)
        print(
            f"failures rows {len(rows):,} (distinct ops {len({r[0] for r in rows}):,}); "
            f"signatures {len(by_signature)} for {len(per_mode)} planted modes; "
            f"purity {majority / max(len(rows), 1):.4f}; max signatures per mode "
            f"{max(len(s) for s in per_mode.values())}"
        )


if __name__ == "__main__":
    main()
