"""The CLI's text tables and progress (opslake_local.console): the same plain text in a terminal,
a CI log or a captured stdout, and no progress output where stdout is not a terminal.

Pure logic, but here rather than in tests/unit: importing anything from opslake_local runs the
package's __init__, which imports the local stack and with it moto (tests/unit/test_isolation.py).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from opslake_local.console import progress, text_table
from opslake_local.queries import cell_text


def test_a_table_aligns_numbers_right_and_text_left_under_a_dashed_rule() -> None:
    rows = [("alpha", 1234, None, True), ("b", 5, Decimal("2.5"), False)]
    assert text_table(["name", "count", "ratio", "flag"], rows, cell=cell_text) == (
        "name   count  ratio  flag\n"
        "-----  -----  -----  -----\n"
        "alpha  1,234         true\n"
        "b          5    2.5  false"
    )


def test_a_table_without_rows_is_its_header() -> None:
    assert text_table(["name", "description"], []) == "name  description\n----  -----------"


def test_cells_are_text_never_markup_and_wide_tables_are_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # CI systems set it: tables stay plain text regardless
    monkeypatch.setenv("COLUMNS", "40")
    wide = "x" * 300
    table = text_table(
        ["when", "text"], [(datetime(2024, 5, 1, 12, 3, 4), f"[bold]{wide}[/bold] :smile:")], cell=cell_text
    )
    lines = table.splitlines()
    assert len(lines) == 3 and "\x1b" not in table
    assert lines[2] == f"2024-05-01 12:03:04  [bold]{wide}[/bold] :smile:"


def test_the_default_cell_is_str() -> None:
    assert text_table(["confidence"], [(1.0,), (0.99,)]).splitlines()[2:] == ["       1.0", "      0.99"]


def test_progress_is_silent_when_stdout_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress("work", 3, first="one") as step:
        step("two")
        print("a line of output")
        step("three")
    out, err = capsys.readouterr()
    assert out == "a line of output\n" and err == ""


def test_a_cell_with_a_tab_is_shown_whole() -> None:
    table = text_table(["name", "note"], [("a", "x\ty"), ("b", "plain")])
    assert "x       y" in table and "…" not in table
