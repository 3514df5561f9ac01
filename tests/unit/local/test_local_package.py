"""The local package names its API lazily (as the layer's packages do): every name resolves, and the
CLI with ``opslake mcp``'s modules imports no moto, boto3 or stack code (an agent's stdio server and
the light commands must not pay ~0.6 s for moto, which only ``LocalStack`` needs)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_opslake_local_names_its_api_and_every_name_resolves() -> None:
    package = importlib.import_module("opslake_local")
    assert {"LocalStack", "Invoker", "LocalApi", "Template", "find_template"} <= set(package.__all__)
    assert [name for name in package.__all__ if not hasattr(package, name)] == []


def test_the_cli_and_opslake_mcp_import_no_moto_boto3_or_stack() -> None:
    code = (
        "import sys, opslake_local, opslake_local.cli, opslake_local.mcp_forward; "
        "print(sorted(m for m in ('moto', 'boto3', 'opslake_local.stack', 'opslake_local.invoke') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
