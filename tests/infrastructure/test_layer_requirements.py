"""Every third-party module the Lambda code imports (at module level or lazily, on a request) ships
in a layer: the common layer every function has (Globals), the data layer for the jobs' pyarrow,
or the Lambda runtime (boto3). A module only the local venv has passes every local test and fails
the deployed function on its first call that needs it.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure

ROOT = Path(__file__).resolve().parents[2]
LAMBDA_CODE = (ROOT / "layers/common/opslake", ROOT / "functions")
#: Run by hand to regenerate a data file, never in a function.
SCRIPTS = {ROOT / "layers/common/opslake/analysis/data/make_english_words.py"}
#: The Lambda Python runtime provides these.
RUNTIME = {"boto3", "botocore"}
#: Only the writer and the jobs import these (DataLayer); test_request_path_imports keeps handlers off.
DATA_LAYER_ONLY = {"pyarrow"}
#: The local stack's embedded engine (opslake.query.embedded), never deployed: Athena serves Lambda.
LOCAL_ONLY = {"duckdb"}


def _requirement_names(layer_dir: str) -> set[str]:
    text = (ROOT / layer_dir / "requirements.txt").read_text(encoding="utf-8")
    names = (re.match(r"[A-Za-z0-9_.-]+", line.strip()) for line in text.splitlines())
    return {_normalized(m.group(0)) for m in names if m and not m.group(0).startswith("#")}


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module → the Lambda files importing it (anywhere in the file)."""
    found: dict[str, set[str]] = {}
    for base in LAMBDA_CODE:
        for path in base.rglob("*.py"):
            if path in SCRIPTS:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("opslake", "__future__"):
                        found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def _layer_dir(resources: dict[str, Any], logical_id: str) -> str:
    uri = resources[logical_id]["Properties"]["ContentUri"]
    assert isinstance(uri, str), uri
    return uri


def test_every_module_the_lambda_code_imports_is_in_its_layer(resources: dict[str, Any]) -> None:
    common = _requirement_names(_layer_dir(resources, "CommonLayer"))
    data = _requirement_names(_layer_dir(resources, "DataLayer"))
    distributions = packages_distributions()
    missing = {}
    for module, files in sorted(_third_party_imports().items()):
        if module in RUNTIME or module in LOCAL_ONLY:
            continue
        layer = data if module in DATA_LAYER_ONLY else common
        provided_by = {_normalized(d) for d in distributions.get(module, [module])}
        if not provided_by & layer:
            missing[module] = sorted(files)
    assert missing == {}, f"imported by Lambda code but in no layer it runs with: {missing}"


def test_the_common_layer_is_every_functions_layer(sam_template: dict[str, Any]) -> None:
    # What lets the first test check every handler against the common layer alone.
    assert sam_template["Globals"]["Function"]["Layers"] == [{"Ref": "CommonLayer"}]


def test_no_lambda_code_imports_the_mcp_sdk(resources: dict[str, Any]) -> None:
    # POST /mcp is hand-rolled on plain dicts; the SDK (mcp, mcp_types, httpx2) is the CLI's and the tests'.
    imported = _third_party_imports()
    assert {"mcp", "mcp_types"} & set(imported) == set(), {
        m: imported[m] for m in ("mcp", "mcp_types") if m in imported
    }
    layers = _requirement_names(_layer_dir(resources, "CommonLayer")) | _requirement_names(
        _layer_dir(resources, "DataLayer")
    )
    assert {"mcp", "mcp-types"} & layers == set()
