"""The local console chat: standard input is one user's messages in one thread.

Lines are taken as they arrive, so a line typed while a turn runs is injected into it. The
agent's answer streams to standard output, tool activity as short lines. While a tool call
waits for approval, the next line answers ``approve? [y/a/N]`` (``deny: why`` works too; any
other text is a message for the agent).
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

from .lines import InputLines

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
    """A live reply written to a text stream."""

    def __init__(self, out: TextIO):
        self.out = out
        self.streamed: list[str] = []
        self.at_line_start = True

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self.at_line_start = text.endswith("\n")

    def _line(self, text: str) -> None:
        if not self.at_line_start:
            self._write("\n")
        self._write(text + "\n")

    async def append(self, text: str) -> None:
        self.streamed.append(text)
        self._write(text)

    async def tool(self, activity: ToolActivity) -> None:
        if activity.state == "ACTIVE":
            self._line(f"  › {activity.name} {activity.summary}".rstrip())
        elif activity.state == "ERROR":
            detail = (activity.error or "failed").splitlines()[0][:200]
            self._line(f"  ✗ {activity.name}: {detail}")

    async def finish(self, outcome: TurnOutcome) -> None:
        streamed = "".join(self.streamed)
        final = outcome.final_text
        if final and final != streamed:
            # result.response can hold text no delta carried: show the whole final answer.
            self._line("")
            self._write(final)
        if not self.at_line_start:
            self._write("\n")
        for line in outcome_lines(outcome):
            self._line(line)


class ConsoleAdapter:
    platform = "console"

    def __init__(
        self,
        *,
        thread: str = "console",
        user: str = "",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
    ):
        self.thread = ThreadRef(platform="console", channel="local", thread=thread)
        name = user or _login_name()
        self.author = Author(id=f"console:{name}", display_name=name)
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.eof = anyio.Event()
        self._run_id = uuid.uuid4().hex[:12]
        self._asking: str | None = None  # the handle of the request waiting for an answer

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
        for line in visible(request.text).split("\n"):
            self._notice(line)
        self._notice("approve? [y/a/N]" if request.always else "approve? [y/N]")
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        if self._asking == handle:
            self._asking = None
        for line in visible(result.text).split("\n"):
            self._notice(line)

    def _notice(self, text: str) -> None:
        self.stdout.write(f"[bridge] {text}\n")
        self.stdout.flush()

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[LiveReply]:
        yield ConsoleReply(self.stdout)

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        for line in text.splitlines() or [""]:
            self._notice(line)

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
