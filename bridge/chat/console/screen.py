"""One output stream of the console: the bridge's Markdown rendered where a person reads it.

On a terminal the Markdown is rendered by rich (bold, code and code blocks, lists, links as
"text (url)", so a link cannot hide where it goes), in colour, and control characters in it (an
escape sequence, a carriage return: the agent's text can hold them) are shown escaped, not
obeyed: rich passes ESC through. Anywhere else (a pipe, a file, a
test) the text is written as the bridge wrote it: plain Markdown, without escapes, so what a
program reads is exactly what the chats get. Line breaks are kept, as every chat keeps them.
"""

from __future__ import annotations

import io
from typing import TextIO

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.segment import Segment
from rich.style import Style

from bridge.core.approvals.texts import visible

LABEL_STYLE = Style(dim=True)


class Screen:
    """Text and Markdown written to ``out``; keeps track of whether a line is open."""

    def __init__(self, out: TextIO, *, terminal: bool | None = None) -> None:
        self.out = out
        self.terminal = _is_terminal(out) if terminal is None else terminal
        # rich's own markup, emoji codes and highlighting stay off: the text is the bridge's
        # Markdown, nothing else in it is a format.
        self._rich = (
            Console(file=out, force_terminal=True, highlight=False, markup=False, emoji=False)
            if self.terminal
            else None
        )
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
            self._rich.print(_shown(text), style=LABEL_STYLE if dim else None, soft_wrap=True)
            self.out.flush()
            self.at_line_start = True

    def markdown(self, text: str, *, label: str = "") -> None:
        """``text`` as a block of its own, each of its lines after ``label``."""
        self.end_line()
        if self._rich is None:
            self.write("".join(f"{label}{line}\n" for line in text.splitlines() or [""]))
            return
        self._rich.print(_Labelled(label, chat_markdown(_shown(text))))
        self.out.flush()
        self.at_line_start = True


def chat_markdown(text: str) -> Markdown:
    """``text`` as rich Markdown that keeps line breaks, as chats do (CommonMark joins the
    lines of a paragraph; a chat message's lines are meant as lines)."""
    # "default": lines are not padded to the width with spaces (a pasted line would carry them).
    markdown = Markdown(text, hyperlinks=False, justify="default")
    for token in markdown.parsed:
        for child in token.children or []:
            if child.type == "softbreak":
                child.type = "hardbreak"
    return markdown


class _Labelled:
    """A renderable with ``label`` before each of its lines (``[bridge] ``), dimmed."""

    def __init__(self, label: str, inner: RenderableType) -> None:
        self.label = label
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        room = max(options.max_width - len(self.label), 20)
        lines = console.render_lines(self.inner, options.update_width(room), pad=False)
        for line in lines:
            if self.label:
                yield Segment(self.label, LABEL_STYLE)
            yield from line
            yield Segment.line()


def _shown(text: str) -> str:
    """``text`` with what would act on a terminal made visible (a CRLF ending is a newline)."""
    return visible(text.replace("\r\n", "\n"))


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False
