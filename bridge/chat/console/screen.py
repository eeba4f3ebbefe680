"""One output stream of the console: the bridge's Markdown rendered where a person reads it.

On a terminal the Markdown is rendered by rich (:mod:`.rendering`, imported only then). Anywhere
else (a pipe, a file, a test) the text is written as the bridge wrote it: plain Markdown,
without escapes, so what a program reads is exactly what the chats get. Line breaks are kept,
as every chat keeps them.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from bridge.chat.console.rendering import Rendering


class Screen:
    """Text and Markdown written to ``out``; keeps track of whether a line is open."""

    def __init__(self, out: TextIO, *, terminal: bool | None = None) -> None:
        self.out = out
        self.terminal = _is_terminal(out) if terminal is None else terminal
        self._rich: Rendering | None = None
        if self.terminal:
            # rich only where a person reads: tests/test_startup_imports.py imports it.
            from bridge.chat.console.rendering import Rendering

            self._rich = Rendering(out)
        self.at_line_start = True

    def write(self, text: str) -> None:
        """``text`` as it is (a streamed answer on a pipe)."""
        if text:
            self.out.write(text)
            self.out.flush()
            self.at_line_start = text.endswith("\n")

    def end_line(self) -> None:
        if not self.at_line_start:
            self.write("\n")

    def line(self, text: str, *, dim: bool = False) -> None:
        """One line of plain text (a tool line), on a line of its own."""
        self.end_line()
        if self._rich is None:
            self.write(text + "\n")
        else:
            self._rich.line(text, dim=dim)
            self.at_line_start = True

    def markdown(self, text: str, *, label: str = "") -> None:
        """``text`` as a block of its own, each of its lines after ``label``."""
        self.end_line()
        if self._rich is None:
            self.write("".join(f"{label}{line}\n" for line in text.splitlines() or [""]))
            return
        self._rich.markdown(text, label=label)
        self.at_line_start = True


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False
