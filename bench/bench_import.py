"""Cold import time of the request-path handlers against ``/health``'s (goal ≤ 1.3×), and proof
they skip pyarrow.

Each handler is imported in a fresh interpreter with ``python -S -X importtime`` against a
Lambda-like package directory (the common layer's requirements plus boto3, installed with
``pip --target`` into out/bench/lambda-site on first use and again whenever the layer's
requirements change, and nothing else on the path), in Lambda's environment with tracing on
(``LAMBDA_TASK_ROOT`` set, ``POWERTOOLS_TRACE_DISABLED`` not): outside Lambda the X-Ray SDK
builds a botocore client to poll sampling rules, which it never does in Lambda, so measuring
there would count work no deployed function does. The figure
is the median over several runs of the sum of top-level import times ("importtime") and of the
wall time of the handler module's execution ("wall", which also counts the module's own code);
the ratio is the median of each round's ratio to ``/health`` (rounds alternate handlers and
checkouts, so the machine's load changes hit every row alike). The script also lists the
heaviest top-level imports. What a handler no longer imports, its first request may: see
bench_cold_start.py for import plus first request.

    make bench            # or: .venv/bin/python bench/bench_import.py [--runs 15] [--code OLD_CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "out" / "bench" / "lambda-site"
BASELINE = "functions/observer/health.py"
HANDLERS = [
    BASELINE,
    "functions/observer/events.py",
    "functions/observer/traces.py",
    "functions/gateway/sql.py",
    "functions/gateway/match.py",
    "functions/gateway/log.py",
    "functions/gateway/playbooks.py",
    "functions/gateway/model.py",
    "functions/gateway/tables.py",
    "functions/gateway/worker.py",
    "functions/gateway/search.py",
    # The MCP handler imports a tool's handler on its first call, /ask its prompts and guard on its
    # first question: their import is the cold start the ratio to /health is about.
    "functions/gateway/mcp_http.py",
    "functions/gateway/ask.py",
]
LOADER = """
import importlib.util, sys, time
t0 = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print("WALL_MS=%.3f" % ((time.perf_counter() - t0) * 1000))
print("PYARROW_LOADED=" + str("pyarrow" in sys.modules))
print("LOADED=" + ",".join(m for m in ("boto3", "botocore.client", "aws_xray_sdk.core") if m in sys.modules))
"""
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def lambda_site() -> Path:
    """The packages a deployed request-path function sees: the common layer plus boto3 (installed
    again when the layer's requirements change: a site without a new requirement would fail, or
    time, an import the layer does not have)."""
    requirements = ROOT / "layers" / "common" / "requirements.txt"
    stamp = SITE / ".requirements.txt"
    if not stamp.exists() or stamp.read_text() != requirements.read_text():
        print(f"installing the common layer's requirements into {SITE} ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--upgrade",
                "--target",
                str(SITE),
                "boto3",
                "-r",
                str(requirements),
            ],
            check=True,
        )
        stamp.write_text(requirements.read_text())
    return SITE


class Sample(NamedTuple):
    importtime_ms: float
    wall_ms: float
    pyarrow: bool
    loaded: str
    heaviest: list[tuple[int, str]]


def measure(code: Path, handler: str) -> Sample:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(lambda_site()), str(code / "layers" / "common")]),
        "AWS_DEFAULT_REGION": "us-east-1",
        "LAMBDA_TASK_ROOT": str(code),
        "AWS_LAMBDA_FUNCTION_NAME": "opslake-bench",
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
    }
    proc = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", LOADER, str(code / handler)],
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
    out = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return Sample(
        total_us / 1000,
        float(out["WALL_MS"]),
        out["PYARROW_LOADED"] == "True",
        out["LOADED"],
        sorted(top_level, reverse=True)[:5],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--code", action="append", type=Path, help="another checkout to time (old code)")
    args = parser.parse_args()
    codes = [*(args.code or []), ROOT]
    samples: dict[tuple[Path, str], list[Sample]] = {}
    for _ in range(args.runs):  # rounds: every handler of every checkout once, then again
        for code in codes:
            for handler in HANDLERS:
                if (code / handler).exists():  # an older checkout may not have every handler
                    samples.setdefault((code, handler), []).append(measure(code, handler))
    print(f"{args.runs} fresh processes per row; medians; x = median of each round's ratio to /health")
    print(
        f"{'code':20} {'handler':32} {'importtime':>10} {'x':>5} {'wall':>6} {'x':>5}  pyarrow  "
        "loaded at import  heaviest imports (ms)"
    )
    for code in codes:
        base = samples[(code, BASELINE)]
        for handler in HANDLERS:
            rows = samples.get((code, handler))
            if not rows:
                continue
            ratio = statistics.median(
                r.importtime_ms / b.importtime_ms for r, b in zip(rows, base, strict=True)
            )
            wall_ratio = statistics.median(r.wall_ms / b.wall_ms for r, b in zip(rows, base, strict=True))
            heaviest = ", ".join(f"{name} {us / 1000:.0f}" for us, name in rows[-1].heaviest[:4])
            label = "new (this checkout)" if code == ROOT else str(code)
            print(
                f"{label:20} {handler:32} {statistics.median(r.importtime_ms for r in rows):10.0f} "
                f"{ratio:5.2f} {statistics.median(r.wall_ms for r in rows):6.0f} {wall_ratio:5.2f}  "
                f"{'yes' if any(r.pyarrow for r in rows) else 'no':7}  {rows[-1].loaded or '-':16}  {heaviest}"
            )


if __name__ == "__main__":
    main()
