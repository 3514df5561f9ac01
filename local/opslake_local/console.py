"""What the ``opslake`` CLI and the demo show on a terminal, built on rich: text tables and progress.

A table is rendered to plain text (no colour, no markup, no wrapping, no terminal width), so it
reads the same in a terminal, in a CI log and in a test that captures stdout. Progress shows only
when stdout is a terminal, and vanishes when the work is done: piped or captured output is exactly
what the commands print, nothing more.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.progress import Progress

_GAP = 2  # spaces between columns
_NO_LIMIT = 1_000_000  # a table is never cut or wrapped to fit a terminal


def _numeric(rows: Sequence[Sequence[Any]], index: int) -> bool:
    """A column is right-aligned when it has values and every non-null one is a number."""
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(
        isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in values
    )


def _width(texts: Sequence[str]) -> int:
    """The terminal cells the widest line of ``texts`` takes."""
    return max(cell_len(line) for text in texts for line in text.splitlines() or [""])


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    """``text`` with control characters written as escapes (``\x1b``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], *, cell: Callable[[Any], str] = str
) -> str:
    """A plain-text table: left-aligned text, right-aligned numbers, a dashed rule under the header,
    columns two spaces apart and no trailing spaces. ``cell`` turns a value into its text."""
    # Tabs expanded here, where widths are measured: rich would expand them later and cut the cell.
    # Other control characters are shown escaped: a cell may hold what a client sent (a tool's name),
    # and an escape sequence must not reach the terminal.
    cells = [[_visible(cell(v).expandtabs()) for v in row] for row in rows]
    widths = [_width([str(name), *(row[i] for row in cells)]) for i, name in enumerate(header)]
    table = Table(box=None, padding=(0, _GAP), collapse_padding=True, pad_edge=False, header_style="")
    for index, name in enumerate(header):
        table.add_column(Text(str(name)), justify="right" if _numeric(rows, index) else "left", no_wrap=True)
    table.add_row(*("-" * width for width in widths))
    for row in cells:
        table.add_row(*(Text(text) for text in row))
    buffer = io.StringIO()
    Console(
        file=buffer, width=_NO_LIMIT, color_system=None, force_terminal=False, legacy_windows=False
    ).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


class Steps:
    """The steps of one long piece of work: ``steps(what)`` says which step runs now (the one
    before it is done). Does nothing when the progress display is off."""

    def __init__(self, progress: Progress | None, title: str, total: int, first: str | None = None) -> None:
        self._progress = progress
        self._title = title
        self._task = progress.add_task(title, total=total) if progress is not None else None
        self._started = False
        if first is not None:
            self(first)

    def __call__(self, what: str) -> None:
        if self._progress is None or self._task is None:
            return
        if self._started:
            self._progress.advance(self._task)
        self._started = True
        self._progress.update(self._task, description=f"{self._title}: {what}")


def progress_enabled() -> bool:
    """Whether stdout is an interactive terminal (not a pipe, a file, a CI log or a test's capture)."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress(title: str, total: int, *, first: str | None = None) -> Iterator[Steps]:
    """A transient progress bar of ``total`` steps on the terminal while the block runs (``first``:
    the step that starts with it); lines printed meanwhile appear above it. Off (a no-op
    :class:`Steps`) when stdout is not a terminal."""
    if not progress_enabled():
        yield Steps(None, title, total)
        return
    from rich.progress import (  # only a terminal needs it
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(highlight=False, markup=False, emoji=False),
        transient=True,
    )
    with bar:
        yield Steps(bar, title, total, first)
