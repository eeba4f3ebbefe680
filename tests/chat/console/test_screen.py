"""The console's rendering: the bridge's Markdown styled on a terminal, as written elsewhere;
streamed answers shown block by block; the simulator's hint after its default reply."""

from __future__ import annotations

import io
import re

import pytest

from bridge.chat.console.adapter import ConsoleAdapter
from bridge.chat.console.blocks import MarkdownBlocks
from bridge.chat.console.screen import Screen
from bridge.chat.console.tour import HINT
from bridge.core.approvals.texts import request_text
from bridge.core.events import ApprovalRequest, ThreadRef, TurnOutcome

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Terminal(io.StringIO):
    """What a terminal would receive (a stream that says it is a TTY)."""

    def isatty(self) -> bool:
        return True


def shown(out: io.StringIO) -> str:
    return ANSI.sub("", out.getvalue())


def test_streamed_markdown_comes_out_in_finished_blocks() -> None:
    blocks = MarkdownBlocks()
    assert blocks.feed("one ") == ""
    assert blocks.feed("line\nstill one\n") == "", "a paragraph is not done before a blank line"
    assert blocks.feed("\nsecond") == "one line\nstill one\n\n"
    assert blocks.feed("\n\n```sh\nls\n\n") == "second\n\n", "a blank line inside a fence"
    assert blocks.feed("echo\n```\nlast") == "```sh\nls\n\necho\n```\n"
    assert blocks.rest() == "last" and blocks.rest() == ""


def test_a_pipe_gets_the_markdown_as_written() -> None:
    out = io.StringIO()
    Screen(out).markdown("🔐 **Approval needed**: run\n```\nls\n```", label="[bridge] ")
    assert (
        out.getvalue()
        == "[bridge] 🔐 **Approval needed**: run\n[bridge] ```\n[bridge] ls\n[bridge] ```\n"
    )


def test_a_terminal_gets_bold_code_lists_and_links_rendered() -> None:
    out = Terminal()
    screen = Screen(out)
    assert screen.terminal
    screen.markdown(
        "**bold** and `code`\nnext line\n\n- one\n- two\n\n[docs](https://d.example)\n\n"
        "```\nls -la\n```"
    )
    raw = out.getvalue()
    assert "\x1b[1mbold" in raw, "bold is styled"
    text = shown(out)
    assert "*" not in text and "`" not in text, text
    assert "bold and code" in text
    assert "next line" in text.split("bold and code", 1)[1].split("\n", 2)[1], "a line break stays"
    assert "• one" in text and "• two" in text
    assert "docs (https://d.example)" in text, "a link shows where it goes"
    assert "ls -la" in text


def test_no_colour_without_a_terminal_even_when_asked_for_markdown() -> None:
    out = io.StringIO()
    Screen(out).markdown("**bold**")
    assert "\x1b" not in out.getvalue()


def request() -> ApprovalRequest:
    text = request_text(
        tool="run_command", summary="ls -la", preview="", requested_by=None, timeout=60
    )
    thread = ThreadRef(platform="console", channel="local", thread="console")
    return ApprovalRequest(
        id="1", thread=thread, tool="run_command", summary="ls -la", text=text, always=True
    )


async def test_an_approval_request_on_a_terminal_shows_no_raw_markup() -> None:
    out = Terminal()
    adapter = ConsoleAdapter(stdin=io.StringIO(), stdout=out, user="alice")
    await adapter.ask_approval(request())
    text = shown(out)
    assert "Approval needed" in text and "**" not in text and "```" not in text, text
    assert "ls -la" in text
    assert text.rstrip().endswith("approve? [y/a/N]")


async def test_the_simulator_hint_follows_its_default_reply_only() -> None:
    async def finished(answer: str, simulated: bool) -> str:
        out = io.StringIO()
        adapter = ConsoleAdapter(stdin=io.StringIO(), stdout=out, user="a", simulated=simulated)
        async with adapter.open_reply(adapter.thread, None) as reply:
            await reply.append(answer)
            await reply.finish(TurnOutcome(final_text=answer))
        return out.getvalue()

    assert HINT in await finished("You said: a (console:a): hello\n", simulated=True)
    assert HINT not in await finished("You said: a (console:a): hi [[calls 2]]\n", simulated=True)
    assert HINT not in await finished("You said: hello\n", simulated=False)


async def test_a_streamed_answer_on_a_terminal_is_rendered_and_shown_once() -> None:
    out = Terminal()
    adapter = ConsoleAdapter(stdin=io.StringIO(), stdout=out, user="a")
    async with adapter.open_reply(adapter.thread, None) as reply:
        await reply.append("First **part**.\n\nSec")
        assert "First part." in shown(out) and "Sec" not in shown(out)
        await reply.append("ond part.\n")
        await reply.finish(TurnOutcome(final_text="First **part**.\n\nSecond part.\n"))
    text = shown(out)
    assert text.count("First part.") == 1 and text.count("Second part.") == 1, text


def test_rendered_lines_carry_no_padding_to_copy() -> None:
    out = Terminal()
    Screen(out).markdown("a line to paste `[[calls 3]]`\nand another", label="[bridge] ")
    assert [line for line in shown(out).split("\n") if line] == [
        "[bridge] a line to paste [[calls 3]]",
        "[bridge] and another",
    ]


def test_a_terminal_obeys_no_control_sequence_from_the_agent() -> None:
    """An answer or a tool line holding an escape sequence (clear the screen, set the title)
    or a carriage return shows it, escaped, instead of acting on the terminal."""
    out = Terminal()
    screen = Screen(out)
    screen.markdown("evil \x1b[2J\x1b]0;title\x07 text\rover\r\nnext")
    screen.line("tool \x1b[31mred\u202e")
    sent = out.getvalue()
    obeyed = [c for c in ("\x1b[2J", "\x1b]0", "\x07", "\r", "\u202e", "\x1b[31mred") if c in sent]
    assert not obeyed, repr(sent)
    raw = ANSI.sub("", sent)
    assert "\\x1b[2J" in raw and "\\rover" in raw and "\\u202e" in raw
    assert "over\nnext" in raw.replace("\\r", ""), "a CRLF line ending is a line break"
