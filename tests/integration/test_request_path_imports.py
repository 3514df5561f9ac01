"""The request path stays light: no gateway or ingest handler imports pyarrow (or the local stack).

Timing is measured in bench/bench_import.py, never asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUEST_PATH = sorted(
    [
        ROOT / "functions/observer/events.py",
        ROOT / "functions/observer/health.py",
        ROOT / "functions/observer/traces.py",
        *(ROOT / "functions/gateway").glob("*.py"),
    ]
)
PROBE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
heavy = sorted(name for name in ("pyarrow", "duckdb", "sqlglot", "moto", "opslake_local") if name in sys.modules)
print(",".join(heavy))
"""


@pytest.mark.parametrize("handler", REQUEST_PATH, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_request_path_handler_imports_nothing_heavy(handler: Path) -> None:
    env = {
        **os.environ,
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(handler)], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "", f"{handler.name} imports {result.stdout.strip()}"
