"""Failure signatures on planted failures: speed, and how well signatures recover the planted modes.

Generates 1,000,000 ops with 1% failures from 40 planted modes (bench/planted.py), then assigns
signatures to the 10,000 failures with the real SignatureIndex. Prints:

* time to generate the ops, to build the FailureSample models, and to assign and count;
* signatures found (against 40 planted modes);
* purity: sum over signatures of its majority mode's count / failures (goal ≥ 0.95);
* the inverse: signatures per planted mode (ideally 1), and the modes that split.

    .venv/bin/python bench/bench_signatures.py [--ops 1000000] [--rate 0.01] [--runs 5] [--seed 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "common"))
sys.path.insert(0, str(ROOT / "bench"))

from planted import Planted, generate  # noqa: E402

from opslake.analysis.signatures import SignatureIndex, normalize  # noqa: E402
from opslake.models.analysis import FailureSample  # noqa: E402


def failure_samples(data: Planted) -> tuple[list[FailureSample], list[str]]:
    """The failures as the analyzer reads them, and their planted mode labels."""
    c = data.columns
    samples, labels = [], []
    for i in data.failure_indexes():
        ts = datetime.fromtimestamp(c["ts_ms"][i] / 1000, UTC)
        samples.append(
            FailureSample(
                op_id=c["op_id"][i],
                endpoint=c["endpoint"][i],
                agent_id=c["agent_id"][i],
                ts=ts,
                ingested_at=ts,
                error=c["error"][i],
                error_type=c["error_type"][i],
                input_summary=c["input_summary"][i],
            )
        )
        labels.append(c["mode"][i])
    return samples, labels


def purity(
    assigned: list[str], labels: list[str]
) -> tuple[float, dict[str, set[str]], dict[str, Counter[str]]]:
    """(purity of the signatures against the labels, signatures per label, labels per signature)."""
    by_signature: dict[str, Counter[str]] = defaultdict(Counter)
    per_label: dict[str, set[str]] = defaultdict(set)
    for sig, label in zip(assigned, labels, strict=True):
        by_signature[sig][label] += 1
        per_label[label].add(sig)
    majority = sum(counter.most_common(1)[0][1] for counter in by_signature.values())
    return majority / max(len(labels), 1), per_label, by_signature


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--modes", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    started = time.perf_counter()
    data = generate(n_ops=args.ops, failure_rate=args.rate, modes=args.modes, seed=args.seed)
    generated = time.perf_counter() - started
    started = time.perf_counter()
    samples, labels = failure_samples(data)
    built = time.perf_counter() - started
    print(f"generated {len(data):,} ops in {generated:.2f} s; {len(samples):,} failures")
    print(f"built {len(samples):,} FailureSample models in {built * 1000:.0f} ms")

    normalize_times, apply_times = [], []
    rows = []
    index = SignatureIndex()
    for _ in range(args.runs):
        started = time.perf_counter()
        for sample in samples:
            normalize(sample.error or "")
        normalize_times.append(time.perf_counter() - started)
        index = SignatureIndex()  # a fresh index: no template cache carried between runs
        started = time.perf_counter()
        rows = index.apply(samples)
        apply_times.append(time.perf_counter() - started)

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:.0f} ms, best {min(values) * 1000:.0f} ms"

    print(f"normalize() on {len(samples):,} errors: {ms(normalize_times)}")
    print(f"SignatureIndex.apply (assign + count) on {len(samples):,} failures: {ms(apply_times)}")
    score, per_label, by_signature = purity([row.signature_id for row in rows], labels)
    split = {label: len(sigs) for label, sigs in per_label.items() if len(sigs) > 1}
    print(f"signatures found: {len(index.signatures)} (planted modes: {len(per_label)})")
    print(f"purity: {score:.4f} (goal ≥ 0.95)")
    per_mode = [len(s) for s in per_label.values()]
    print(f"signatures per planted mode: mean {statistics.mean(per_mode):.2f}, max {max(per_mode)}")
    if split:
        print(
            "modes split over several signatures: "
            + ", ".join(f"{k} ({v})" for k, v in sorted(split.items()))
        )
    shared = sum(1 for counter in by_signature.values() if len(counter) > 1)
    print(f"signatures shared by several modes: {shared}")


if __name__ == "__main__":
    main()
