"""The console's Markdown on a terminal, rendered by rich (bold, code and code blocks, lists,
links as "text (url)", so a link cannot hide where it goes), in colour; control characters in
it (an escape sequence, a carriage return: the agent's text can hold them) are shown escaped,
not obeyed: rich passes ESC through.

Its own module: rich, markdown-it and pygments are a tenth of a console's start, and a console
whose output is a pipe or a file (every test, every script) never renders (:mod:`.screen`)."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.segment import Segment
from rich.style import Style

from bridge.core.approvals.texts import visible

LABEL_STYLE = Style(dim=True)


class Rendering:
    """rich writing to a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        # rich's own markup, emoji codes and highlighting stay off: the text is the bridge's
        # Markdown, nothing else in it is a format.
        self._console = Console(
            file=out, force_terminal=True, highlight=False, markup=False, emoji=False
        )

    def line(self, text: str, *, dim: bool) -> None:
        self._console.print(_shown(text), style=LABEL_STYLE if dim else None, soft_wrap=True)
        self.out.flush()

    def markdown(self, text: str, *, label: str) -> None:
        self._console.print(_Labelled(label, chat_markdown(_shown(text))))
        self.out.flush()


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
