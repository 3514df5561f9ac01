"""POST /search over HTTP on the local stack's embedded engine: p50/p95 per query shape.

The sample dataset (3,000 workers and their placements) and a playbook snapshot of ``--entries``
active entries; each query runs ``--queries`` times after one warm-up call (the first call pays the
handler's cold start, shown apart). Beside it, POST /match on the same stack, the nearest tool that
also runs one engine query, as a yardstick.

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_search.py [--queries 30] [--entries 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local")]

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "1 term, all sources": ("/search", {"q": "forklift"}),
    "3 terms, all sources": ("/search", {"q": "TIG welder Detroit", "limit": 10}),
    "10 terms, all sources": (
        "/search",
        {"q": "tig mig stick pipe welding stainless aluminum houston austin osha", "limit": 50},
    ),
    "3 terms, workers only": ("/search", {"q": "TIG welder Detroit", "sources": ["workers"]}),
    "2 terms, playbooks only": ("/search", {"q": "stainless pipe", "sources": ["playbooks"]}),
    "POST /match (yardstick)": (
        "/match",
        {"role": "welder", "state": "MI", "need": "tig welding", "count": 10},
    ),
}


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def snapshot(entries: int) -> dict[str, Any]:
    words = ["stainless pipe", "forklift certification", "dt and hour", "join placements", "tig welding"]
    return {
        "generated_at": "2026-11-21T10:00:00Z",
        "entries": [
            {
                "entry_id": f"bench-{i:04d}", "trigger": f"before {words[i % len(words)]} task {i}",
                "action": f"filter on state, then ask for {words[(i + 1) % len(words)]}", "kind": "do",
                "confidence": 0.5, "domain": "staffing", "scope": "project", "status": "active",
                "evidence_op_ids": ["op-1"], "created_at": "2026-11-20T10:00:00Z",
            }
            for i in range(entries)
        ],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--entries", type=int, default=200)
    args = parser.parse_args()

    import httpx

    from opslake_local.http import LocalApi
    from opslake_local.stack import QUIET_ENV, LocalStack

    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack:
        assert stack.api_key is not None
        stack.client("s3").put_object(
            Bucket=stack.bucket,
            Key="playbooks/current.json",
            Body=json.dumps(snapshot(args.entries)).encode(),
        )
        api = LocalApi(stack, stack.invoker())
        base_url = api.start()
        try:
            with httpx.Client(
                base_url=base_url, timeout=120, headers={"x-api-key": stack.api_key.value}
            ) as client:

                def call(path: str, body: dict[str, Any]) -> Callable[[], float]:
                    def once() -> float:
                        t0 = time.perf_counter()
                        answer = client.post(path, json=body)
                        elapsed = (time.perf_counter() - t0) * 1000
                        assert answer.status_code == 200, answer.text
                        return elapsed

                    return once

                first = {name: call(*case)() for name, case in CASES.items()}
                print(
                    f"POST /search over HTTP, local stack, embedded engine, {args.entries} playbook entries, "
                    f"{args.queries} calls each"
                )
                for name, case in CASES.items():
                    samples = [call(*case)() for _ in range(args.queries)]
                    print(
                        f"    {name:26} p50 {pct(samples, 0.5):6.1f} ms  p95 {pct(samples, 0.95):6.1f} ms  "
                        f"mean {statistics.fmean(samples):6.1f} ms  (first call {first[name]:.0f} ms)"
                    )
        finally:
            api.stop()


if __name__ == "__main__":
    main()
