"""Signatures on the Loghub-2k logs: masking alone, masking + word-variant merging, and drain3.

The 16 public log sets of Loghub with ground truth (2,000 lines each; logpai/loghub on GitHub,
``<System>/<System>_2k.log_structured.csv``: ``Content`` and the true ``EventId``). Each line's
Content is taken as a failure's error text, with the system's name as its endpoint and no error
type; the analyzer's masking (opslake.analysis.masking) gives each line a template, and
opslake.analysis.template_merge merges the distinct templates (one rule set for every system:
nothing here is tuned per system). Grouping accuracy and purity: bench/grouping_scores.py.

The data is not in this repository. The Loghub licence allows research and academic use and asks
that the repository (https://github.com/logpai/loghub) and the Loghub paper (Zhu et al., ISSRE
2023) be cited; get it with ``git clone --depth 1 https://github.com/logpai/loghub /tmp/loghub``
and pass the folder (or set ``OPSLAKE_LOGHUB_DIR``).

drain3 (IBM's Drain implementation) is not a dependency of opslake: install it in a throwaway venv
(``python3 -m venv /tmp/drain3-venv && /tmp/drain3-venv/bin/pip install drain3``) and pass its
interpreter with ``--drain3-python``; it runs with its default settings in that interpreter.

    .venv/bin/python bench/bench_loghub.py --data /tmp/loghub [--drain3-python /tmp/drain3-venv/bin/python]
        [--sensitivity]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "common"))
sys.path.insert(0, str(ROOT / "bench"))

from grouping_scores import grouping_accuracy, purity  # noqa: E402

from opslake.analysis.masking import normalize, signature_id  # noqa: E402
from opslake.analysis.template_merge import DEFAULT_RULES, Candidate, MergeRules, merge_candidates  # noqa: E402

SYSTEMS = (
    "Android", "Apache", "BGL", "HDFS", "HPC", "Hadoop", "HealthApp", "Linux",
    "Mac", "OpenSSH", "OpenStack", "Proxifier", "Spark", "Thunderbird", "Windows", "Zookeeper",
)  # fmt: skip
T0 = datetime(2026, 1, 1, tzinfo=UTC)

DRAIN3 = """
import csv, json, logging, sys
logging.disable(logging.CRITICAL)
from drain3 import TemplateMiner
out = {}
for system in sys.argv[2:]:
    miner = TemplateMiner()  # default settings (sim_th 0.4, depth 4, its default masking: none)
    with open(f"{sys.argv[1]}/{system}/{system}_2k.log_structured.csv", encoding="utf-8", newline="") as f:
        out[system] = [miner.add_log_message(row["Content"])["cluster_id"] for row in csv.DictReader(f)]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Lines:
    system: str
    contents: list[str]
    events: list[str]


def load(folder: Path, system: str) -> Lines:
    path = folder / system / f"{system}_2k.log_structured.csv"
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return Lines(system, [r["Content"] for r in rows], [r["EventId"] for r in rows])


def templates(lines: Lines) -> list[str]:
    """Each line's template, as the analyzer writes it (endpoint | error type | masked text)."""
    return [f"{lines.system} | - | {normalize(text)}" for text in lines.contents]


def merged(lines: Lines, masked: list[str], rules: MergeRules) -> tuple[list[str], float]:
    """Each line's signature once its distinct templates are merged, and the merge's time (s)."""
    first: dict[str, int] = {}
    for i, template in enumerate(masked):
        first.setdefault(template, i)
    candidates = [
        Candidate(signature_id(t), lines.system, None, t, T0.replace(microsecond=i)) for t, i in first.items()
    ]
    began = time.perf_counter()
    merges = merge_candidates(candidates, rules)
    took = time.perf_counter() - began
    into = {c: m.signature_id for m in merges for c in m.candidates}
    return [into.get(signature_id(t), signature_id(t)) for t in masked], took


def drain3_groups(python: str, folder: Path, systems: list[str]) -> dict[str, list[int]]:
    out = subprocess.run(
        [python, "-c", DRAIN3, str(folder), *systems], check=True, capture_output=True, text=True
    )
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=os.environ.get("OPSLAKE_LOGHUB_DIR"))
    parser.add_argument("--drain3-python", help="an interpreter with drain3 installed (a throwaway venv)")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument(
        "--sensitivity", action="store_true", help="also the means with each rule moved by one step"
    )
    args = parser.parse_args()
    if args.data is None or not Path(args.data).is_dir():
        parser.error("--data DIR (or OPSLAKE_LOGHUB_DIR): a clone of github.com/logpai/loghub")
    folder = Path(args.data)
    logs = [load(folder, s) for s in args.systems]
    masked = {lines.system: templates(lines) for lines in logs}
    drained = drain3_groups(args.drain3_python, folder, args.systems) if args.drain3_python else {}

    print(
        "| system | events | masking: groups, GA, purity | + merging: groups, GA, purity | merge time "
        + ("| drain3 (defaults): groups, GA, purity |" if drained else "|")
    )
    print("|---|---|---|---|---|" + ("---|" if drained else ""))
    scores: dict[str, list[float]] = {k: [] for k in ("ga0", "p0", "ga1", "p1", "gad", "pd")}
    for lines in logs:
        before = masked[lines.system]
        after, took = merged(lines, before, DEFAULT_RULES)
        row = [
            lines.system,
            str(len(set(lines.events))),
            f"{len(set(before))}, {grouping_accuracy(before, lines.events):.3f}, {purity(before, lines.events):.3f}",
            f"{len(set(after))}, **{grouping_accuracy(after, lines.events):.3f}**, {purity(after, lines.events):.3f}",
            f"{took * 1000:.0f} ms",
        ]
        scores["ga0"].append(grouping_accuracy(before, lines.events))
        scores["p0"].append(purity(before, lines.events))
        scores["ga1"].append(grouping_accuracy(after, lines.events))
        scores["p1"].append(purity(after, lines.events))
        if drained:
            ids = drained[lines.system]
            scores["gad"].append(grouping_accuracy(ids, lines.events))
            scores["pd"].append(purity(ids, lines.events))
            row.append(f"{len(set(ids))}, {scores['gad'][-1]:.3f}, {scores['pd'][-1]:.3f}")
        print("| " + " | ".join(row) + " |")
    mean = {k: statistics.mean(v) for k, v in scores.items() if v}
    last = [
        "**mean**",
        "",
        f"GA {mean['ga0']:.3f}, purity {mean['p0']:.3f}",
        f"GA **{mean['ga1']:.3f}**, purity **{mean['p1']:.3f}**",
        "",
    ]
    if drained:
        last.append(f"GA {mean['gad']:.3f}, purity {mean['pd']:.3f}")
    print("| " + " | ".join(last) + " |")

    if args.sensitivity:
        print("\nOne rule moved at a time (mean over the systems):")
        print("| rules | mean GA | mean purity |\n|---|---|---|")
        variants = [("as shipped", DEFAULT_RULES)]
        for name in ("min_word_values", "min_recurring_contexts", "min_constant_words"):
            value = getattr(DEFAULT_RULES, name)
            variants += [
                (f"{name} = {v}", replace(DEFAULT_RULES, **{name: v}))
                for v in (value - 1, value + 1)
                if v >= 1
            ]
        variants.append(
            ("min_recurring_contexts = off", replace(DEFAULT_RULES, min_recurring_contexts=10**9))
        )
        for label, rules in variants:
            ga, pu = [], []
            for lines in logs:
                after, _ = merged(lines, masked[lines.system], rules)
                ga.append(grouping_accuracy(after, lines.events))
                pu.append(purity(after, lines.events))
            print(f"| {label} | {statistics.mean(ga):.3f} | {statistics.mean(pu):.3f} |")


if __name__ == "__main__":
    main()
