"""Where every command's text goes: ``command_console()``, one rich console per command.

On a terminal it prints rich tables and colours. Anywhere else — a pipe, a file, ``$(…)`` —
it prints plain lines: no colour, no line ever wrapped or cut (an id or a command is copied
whole), and each table as tab-separated rows under a header row, every cell whole and every
column there, so ``cut -f`` and ``awk -F'\\t'`` read it. ``--json`` is the other way to read
a command's output from a script. Whether stdout is a terminal is rich's own test, so
``FORCE_COLOR`` and ``TTY_COMPATIBLE`` work as they do for any rich program.

Lines are never wrapped on a terminal either (``soft_wrap``): the terminal folds a long line
for the eye and a copy of it still pastes as one command.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# The width a plain console claims: so wide that no table column is dropped for want of
# room and nothing is folded (plain output is never cut to a terminal's width).
_PLAIN_WIDTH = 1_000_000


class CliConsole(Console):
    """A rich console that prints a ``Table`` as tab-separated rows when ``plain``."""

    def __init__(self, *, plain: bool) -> None:
        if plain:
            super().__init__(highlight=False, soft_wrap=True, color_system=None, width=_PLAIN_WIDTH)
        else:
            super().__init__(highlight=False, soft_wrap=True)
        self.plain = plain  # true iff stdout is not a terminal: no colour, tables as rows

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.plain and len(objects) == 1 and isinstance(objects[0], Table):
            for row in table_rows(objects[0]):
                self.file.write(row + "\n")
            self.file.flush()
            return
        super().print(*objects, **kwargs)


def command_console() -> CliConsole:
    """The console of one command: plain iff stdout is not a terminal."""
    return CliConsole(plain=not Console().is_terminal)


def table_rows(table: Table) -> Iterator[str]:
    """``table`` as plain text: its header row, then one row per table row, cells separated
    by a tab (a tab or line break inside a cell becomes a space, so a row stays one line)."""
    columns = table.columns
    yield "\t".join(_plain(c.header) for c in columns)
    cells = [list(c.cells) for c in columns]
    for i in range(table.row_count):
        yield "\t".join(_plain(column[i]) if i < len(column) else "" for column in cells)


def _plain(cell: Any) -> str:
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = Text.from_markup(cell).plain
    else:
        text = str(cell)
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


__all__ = ["CliConsole", "command_console", "table_rows"]
