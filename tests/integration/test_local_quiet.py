"""The local stack's quiet mode holds: the CLI, the demo and the simulator import no opslake logger.

Powertools' Logger takes its level when it is built. The local stack runs the functions with
POWERTOOLS_LOG_LEVEL=ERROR (QUIET_ENV); a module of the CLI that imports ``opslake.observability``
first builds the logger at INFO, and `make demo` then printed ~230 JSON log lines between its tables
(the simulator's import of the OTLP mapping did, through ``opslake.http``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_the_cli_demo_simulator_and_worlds_import_no_opslake_logger() -> None:
    probe = (
        "import sys\n"
        "import opslake_local.cli, opslake_local.demo, opslake_local.loop, opslake_local.simulator\n"
        "import opslake_local.simulator.otlp, opslake_local.worlds.helpdesk, opslake_local.experiments\n"
        "print(sorted(m for m in sys.modules if m.startswith('opslake.observability')))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
