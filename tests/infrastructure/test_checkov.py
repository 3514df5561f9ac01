"""checkov finds nothing on the transformed template; every skip carries a reason."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.infrastructure, pytest.mark.slow]


def _checkov() -> str | None:
    beside = Path(sys.executable).with_name("checkov")
    return str(beside) if beside.is_file() else shutil.which("checkov")


@pytest.fixture(scope="module")
def checkov_report(transformed_path: Path) -> list[dict[str, Any]]:
    exe = _checkov()
    if exe is None:
        pytest.skip("checkov is not installed (pip install checkov, or the dev extra)")
    proc = subprocess.run(
        [
            exe,
            "-f",
            str(transformed_path),
            "--framework",
            "cloudformation",
            "--skip-download",
            "--quiet",
            "--compact",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Exit code 1 means "failed checks"; anything else without JSON is a crash.
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"checkov exited {proc.returncode} without a JSON report:\n{proc.stderr[-2000:]}")
    return report if isinstance(report, list) else [report]


def test_checkov_reports_no_failed_checks(checkov_report: list[dict[str, Any]]) -> None:
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for part in checkov_report
        for c in part.get("results", {}).get("failed_checks", [])
    ]
    assert not failed, "\n".join(failed)
    summaries = [part["summary"] for part in checkov_report if "summary" in part]
    assert summaries and all(s["parsing_errors"] == 0 for s in summaries)
    assert sum(s["resource_count"] for s in summaries) >= 20, "checkov did not see the transformed resources"


def test_every_checkov_skip_has_a_reason(sam_template: dict[str, Any]) -> None:
    for logical_id, resource in sam_template["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert skip["id"].startswith(("CKV_", "CKV2_")), (logical_id, skip)
            assert len(skip.get("comment", "").strip()) >= 20, f"{logical_id} {skip['id']}: say why"
