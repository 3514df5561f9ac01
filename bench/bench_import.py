"""Cold import time of the request-path handlers (goal ≤ 300 ms), and proof they skip pyarrow.

Each handler is imported in a fresh interpreter with ``python -S -X importtime`` against a
Lambda-like package directory (the common layer's requirements plus boto3, installed with
``pip --target`` into out/bench/lambda-site on first use, and nothing else on the path), as a
Lambda cold start would. The figure is the median over several runs of the sum of top-level
import times; the script also lists the heaviest top-level imports.

    make bench            # or: .venv/bin/python bench/bench_import.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "out" / "bench" / "lambda-site"
HANDLERS = [
    "functions/observer/events.py",
    "functions/observer/health.py",
    "functions/gateway/sql.py",
    "functions/gateway/log.py",
    "functions/gateway/playbooks.py",
    "functions/gateway/model.py",
]
LOADER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print("PYARROW_LOADED=" + str("pyarrow" in sys.modules))
"""
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def lambda_site() -> Path:
    """The packages a deployed request-path function sees: the common layer plus boto3."""
    if not (SITE / "aws_lambda_powertools").exists():
        print(f"installing the common layer's requirements into {SITE} (once) ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--target",
                str(SITE),
                "boto3",
                "-r",
                str(ROOT / "layers" / "common" / "requirements.txt"),
            ],
            check=True,
        )
    return SITE


def measure(handler: str) -> tuple[float, bool, list[tuple[int, str]]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(lambda_site()), str(ROOT / "layers" / "common")]),
        "AWS_DEFAULT_REGION": "us-east-1",
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    proc = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", LOADER, str(ROOT / handler)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    top_level = []
    total_us = 0
    for line in proc.stderr.splitlines():
        match = LINE.match(line)
        if match and len(match.group(3)) == 1:  # top-level imports only (one space of indent)
            cumulative = int(match.group(2))
            total_us += cumulative
            top_level.append((cumulative, match.group(4)))
    loaded = "PYARROW_LOADED=True" in proc.stdout
    return total_us / 1000, loaded, sorted(top_level, reverse=True)[:5]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"{'handler':34} {'median ms':>10} {'min ms':>8}  pyarrow  heaviest imports (ms)")
    for handler in HANDLERS:
        results = [measure(handler) for _ in range(args.runs)]
        times = [r[0] for r in results]
        heaviest = ", ".join(f"{name} {us / 1000:.0f}" for us, name in results[-1][2][:4])
        print(
            f"{handler:34} {statistics.median(times):10.0f} {min(times):8.0f}  "
            f"{'yes' if results[-1][1] else 'no':7}  {heaviest}"
        )


if __name__ == "__main__":
    main()
