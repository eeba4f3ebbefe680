"""The local console chat: standard input is one user's messages in one thread.

Lines are taken as they arrive, so a line typed while a turn runs is injected into it. The
agent's answer streams to standard output, tool activity as short lines. While a tool call
waits for approval, the next line answers ``approve? [y/a/N]`` (``deny: why`` works too; any
other text is a message for the agent). "Always" (``a``) is offered only where the core offers
it: a plain command, not a chained line or a write (``approve? [y/N]`` then). The bridge's
Markdown is rendered on a terminal and written as it is elsewhere (:mod:`.screen`).
"""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, TextIO

import anyio

from bridge.chat.common.outcome import outcome_lines
from bridge.core.approvals.texts import visible
from bridge.core.capabilities import Opened
from bridge.core.events import (
    ApprovalChoice,
    ApprovalRequest,
    ApprovalResult,
    AttachmentError,
    AttachmentRef,
    Author,
    HistoryEntry,
    Inbound,
    IncomingMessage,
    LiveReply,
    OutgoingFile,
    Reaction,
    SubmitOutcome,
    ThreadRef,
    ToolActivity,
    TurnOutcome,
)

from .blocks import MarkdownBlocks
from .lines import InputLines
from .screen import Screen
from .tour import HINT, default_reply

NOTICE_LABEL = "[bridge] "

_ANSWERS = {
    "y": ApprovalChoice.APPROVE,
    "yes": ApprovalChoice.APPROVE,
    "a": ApprovalChoice.ALWAYS,
    "always": ApprovalChoice.ALWAYS,
    "n": ApprovalChoice.DENY,
    "no": ApprovalChoice.DENY,
    "": ApprovalChoice.DENY,
}

REACTION_WORDS = {
    Reaction.INJECTED: "seen by the agent mid-turn",
    Reaction.QUEUED: "queued for the next turn",
    Reaction.FAILED: "could not be handed to the agent",
}


class ConsoleReply:
    """A live reply on the console's screen: on a terminal each finished Markdown block of the
    answer is rendered as it completes; elsewhere the text is written as it streams."""

    def __init__(self, screen: Screen, *, hint: str = "") -> None:
        self.screen = screen
        self.streamed: list[str] = []
        self._blocks = MarkdownBlocks()
        self._shown = False  # whether a block of the answer is on the screen
        self._hint = hint  # said after the simulator's default reply

    async def append(self, text: str) -> None:
        self.streamed.append(text)
        if self.screen.terminal:
            self._show(self._blocks.feed(text))
        else:
            self.screen.write(text)

    def _show(self, markdown: str) -> None:
        if not markdown.strip():
            return
        if self._shown:
            self.screen.write("\n")
        self.screen.markdown(markdown.strip("\n"))
        self._shown = True

    async def tool(self, activity: ToolActivity) -> None:
        if activity.state == "ACTIVE":
            self.screen.line(f"  › {activity.name} {activity.summary}".rstrip(), dim=True)
        elif activity.state == "ERROR":
            detail = (activity.error or "failed").splitlines()[0][:200]
            self.screen.line(f"  ✗ {activity.name}: {detail}", dim=True)

    async def finish(self, outcome: TurnOutcome) -> None:
        streamed = "".join(self.streamed)
        final = outcome.final_text
        if self.screen.terminal:
            self._show(self._blocks.rest())
        if final and final != streamed:
            # result.response can hold text no delta carried: show the whole final answer.
            self.screen.end_line()
            self.screen.write("\n")
            if self.screen.terminal:
                self.screen.markdown(final.strip("\n"))
            else:
                self.screen.write(final)
        self.screen.end_line()
        for line in outcome_lines(outcome):
            self.screen.markdown(line)
        if self._hint and default_reply(final or streamed):
            self.screen.markdown(self._hint, label=NOTICE_LABEL)


class ConsoleAdapter:
    platform = "console"

    def __init__(
        self,
        *,
        thread: str = "console",
        user: str = "",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        simulated: bool = False,
    ):
        self.thread = ThreadRef(platform="console", channel="local", thread=thread)
        name = user or _login_name()
        self.author = Author(id=f"console:{name}", display_name=name)
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.screen = Screen(self.stdout)
        # On the simulator, a hint after its default reply says how to see more.
        self._hint = HINT if simulated else ""
        self.eof = anyio.Event()
        self._run_id = uuid.uuid4().hex[:12]
        self._asking: str | None = None  # the handle of the request waiting for an answer
        self._opened = 0  # turns the bridge started (start_thread)

    async def is_member(self, channel: str, user_id: str) -> bool:
        """The terminal is one person's direct conversation with the bot (the web console)."""
        return user_id == self.author.id

    async def is_direct(self, channel: str) -> bool:
        return True

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        started()
        count = 0
        lines = InputLines(self.stdin)
        while True:
            line = await lines.readline()
            if not line:
                break
            text = line.rstrip("\n")
            if self._asking is not None and await self._answer(inbound, self._asking, text):
                continue
            if not text.strip():
                continue
            count += 1
            message = IncomingMessage(
                thread=self.thread,
                event_id=f"{self._run_id}:{count}",
                message_id=f"{self._run_id}:{count}",
                author=self.author,
                text=text,
                sent_at=datetime.now(UTC),
            )
            outcome = await inbound.submit(message)
            if outcome is SubmitOutcome.DUPLICATE:
                self._notice("(duplicate message ignored)")
        self.eof.set()

    async def _answer(self, inbound: Inbound, handle: str, text: str) -> bool:
        """``approve? [y/a/N]``: y approves, a approves always, n or an empty line denies."""
        choice = _ANSWERS.get(text.strip().lower())
        if choice is None:
            return False
        await inbound.decide(self.thread, handle, choice, self.author)
        return True

    async def ask_approval(self, request: ApprovalRequest) -> str:
        handle = f"approval:{request.id}"
        self._asking = handle
        self._notice(visible(request.text))
        self._notice("approve? [y/a/N]" if request.always else "approve? [y/N]")
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        if self._asking == handle:
            self._asking = None
        self._notice(visible(result.text))

    def _notice(self, text: str) -> None:
        """The bridge's Markdown, each line after ``[bridge]``."""
        self.screen.markdown(text, label=NOTICE_LABEL)

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[LiveReply]:
        yield ConsoleReply(self.screen, hint=self._hint)

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        self._notice(text.rstrip("\n"))

    async def open_thread(self, channel: str, text: str) -> Opened:
        """The terminal is one conversation: a turn the bridge starts runs in it, after the
        opening text (so a typed ``!stop`` stops it)."""
        self._opened += 1
        self._notice(text.rstrip("\n"))
        return Opened(self.thread, f"{self._run_id}:opened:{self._opened}")

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        self._notice(
            f"file from the agent: {file.name} ({file.size:,} bytes)"
            + (f" ({title})" if title else "")
        )

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        number = message_id.rsplit(":", 1)[-1]
        self._notice(f"message {number}: {REACTION_WORDS[reaction]}")

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        raise AttachmentError("the console cannot send attachments")

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        return []


def _login_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "you"


def simulator_command() -> list[str]:
    """The project's own agy simulator, for a machine without agy."""
    return [sys.executable, "-m", "bridge.simulator"]


def agy_available(command: list[str]) -> bool:
    return shutil.which(command[0]) is not None or Path(command[0]).is_file()
