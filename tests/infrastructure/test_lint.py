"""cfn-lint on template.yaml (it runs the SAM transform itself, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def lint_matches(project_root: Path) -> list:
    from cfnlint.api import ManualArgs, lint_file

    return lint_file(project_root / "template.yaml", config=ManualArgs(regions=["us-east-1"]))


def _describe(matches: list) -> str:
    return "\n".join(f"{m.rule.id} line {m.linenumber}: {m.message}" for m in matches)


def test_cfn_lint_reports_no_errors(lint_matches: list) -> None:
    errors = [m for m in lint_matches if m.rule.severity.lower() == "error"]
    assert not errors, _describe(errors)


def test_cfn_lint_reports_no_warnings(lint_matches: list) -> None:
    warnings = [m for m in lint_matches if m.rule.severity.lower() == "warning"]
    assert not warnings, _describe(warnings)
