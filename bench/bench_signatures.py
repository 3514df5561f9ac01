"""Failure signatures on planted failures: speed, and how well signatures recover the planted modes.

Generates 1,000,000 ops with 1% failures from 40 planted modes (bench/planted.py; ``--catalog
words``: the 12 modes of bench/planted_words.py, whose errors name cities, products, users …),
then assigns signatures to the 10,000 failures with the real SignatureIndex (masking), and merges
the word variants among the distinct templates (merge_variants, as the analyzer does). Prints,
masking alone and then with merging:

* time to generate the ops, to build the FailureSample models, to assign and count, to merge;
* signatures found (against the planted modes);
* purity: sum over signatures of its majority mode's count / failures (goal ≥ 0.95), and grouping
  accuracy (GA, Loghub's: failures whose signature holds exactly their mode's failures);
* the inverse: signatures per planted mode (ideally 1), and the modes that split.

    .venv/bin/python bench/bench_signatures.py [--catalog planted|words] [--ops 1000000] [--rate 0.01]
        [--runs 5] [--seed 7] [--scale 2000 10000 50000]

``--scale N …`` also times the merge alone over N synthetic distinct templates (200 error shapes
on 50 endpoints, two word positions drawn from 2,000 and 30 words): what a run costs when the
analyzer's state holds that many signatures (it merges over all of them every run).
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "common"))
sys.path.insert(0, str(ROOT / "bench"))

import planted_words  # noqa: E402
from grouping_scores import grouping_accuracy  # noqa: E402
from planted import MODES, Planted, generate  # noqa: E402

from opslake.analysis.signatures import (  # noqa: E402
    MergedRaw,
    NewTemplate,
    SignatureIndex,
    merge_variants,
    merged_id,
    normalize,
)
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
    parser.add_argument("--catalog", choices=("planted", "words"), default="planted")
    parser.add_argument("--modes", type=int, help="the first N modes of the catalog (default: all)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=int, nargs="*", default=[], help="distinct templates to merge")
    args = parser.parse_args()

    started = time.perf_counter()
    catalog = MODES if args.catalog == "planted" else planted_words.MODES
    data = generate(n_ops=args.ops, failure_rate=args.rate, modes=args.modes, seed=args.seed, catalog=catalog)
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
    assigned = [row.signature_id for row in rows]
    report("masking alone", assigned, labels, len(index.signatures))

    merge_times = []
    merged: dict[str, MergedRaw] = {}
    for _ in range(args.runs):
        signatures = {sid: sig.model_copy(deep=True) for sid, sig in index.signatures.items()}
        merged = {}
        new = [NewTemplate(s.signature_id, s.endpoint, s.error_type, s.template, s.first_seen)
               for s in sorted(signatures.values(), key=lambda s: (s.first_seen, s.signature_id))]  # fmt: skip
        started = time.perf_counter()
        merge_variants(signatures, merged, new)
        merge_times.append(time.perf_counter() - started)
    print(f"merge_variants over {len(index.signatures):,} distinct templates: {ms(merge_times)}")
    for n in args.scale:
        scale(n, args.seed)
    report(
        "masking + merging",
        [merged_id(merged, sid) for sid in assigned],
        labels,
        len(set(merged_id(merged, s) for s in assigned)),
    )


def scale(n: int, seed: int) -> None:
    """merge_candidates over ``n`` synthetic distinct templates (no timing is asserted anywhere)."""
    from opslake.analysis.masking import signature_id, template_of
    from opslake.analysis.template_merge import Candidate, merge_candidates

    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=6)) for _ in range(2_000)]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    candidates: dict[str, Candidate] = {}
    while len(candidates) < n:
        shape = rng.randrange(200)
        endpoint = f"tool:t{shape % 50}"
        text = " ".join(
            ["error", f"shape{shape}", "of", rng.choice(words), "in", rng.choice(words[:30]), "because"]
            + ["const"] * (shape % 5)
        )
        template = template_of(endpoint, "E", text)
        if template not in candidates:
            first = start + timedelta(seconds=len(candidates))
            candidates[template] = Candidate(signature_id(template), endpoint, "E", template, first)
    started = time.perf_counter()
    merges = merge_candidates(candidates.values())
    took = time.perf_counter() - started
    print(
        f"merge_candidates over {n:,} distinct templates: {took * 1000:.0f} ms ({len(merges)} merged signatures)"
    )


def report(title: str, assigned: list[str], labels: list[str], found: int) -> None:
    score, per_label, by_signature = purity(assigned, labels)
    split = {label: len(sigs) for label, sigs in per_label.items() if len(sigs) > 1}
    print(f"[{title}] signatures found: {found} (planted modes: {len(per_label)})")
    print(
        f"[{title}] purity: {score:.4f} (goal ≥ 0.95); grouping accuracy {grouping_accuracy(assigned, labels):.4f}"
    )
    per_mode = [len(s) for s in per_label.values()]
    print(f"[{title}] signatures per planted mode: mean {statistics.mean(per_mode):.2f}, max {max(per_mode)}")
    if split:
        print(
            f"[{title}] modes split over several signatures: "
            + ", ".join(f"{k} ({v})" for k, v in sorted(split.items()))
        )
    shared = sum(1 for counter in by_signature.values() if len(counter) > 1)
    print(f"[{title}] signatures shared by several modes: {shared}")


if __name__ == "__main__":
    main()
