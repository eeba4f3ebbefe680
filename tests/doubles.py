"""The chat adapter that tests and benchmarks put in front of the core: it records, never talks.

One set of doubles for both: tests read what was said (deltas, tools, outcomes, notices,
marks); benchmarks read when it was said and how many calls the core made.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import anyio

from bridge.core.capabilities import Opened
from bridge.core.events import (
    ApprovalRequest,
    ApprovalResult,
    AttachmentError,
    AttachmentRef,
    Author,
    HistoryEntry,
    Inbound,
    IncomingMessage,
    OutgoingFile,
    Reaction,
    ThreadRef,
    ToolActivity,
    TurnOutcome,
)

ALICE = Author(id="@alice:test", display_name="Alice")


def file_message(thread: ThreadRef, author: Author, name: str, source: str) -> IncomingMessage:
    """A message (event ``e-file``, message ``m-file``) with one file still to be fetched."""
    return IncomingMessage(
        thread=thread,
        event_id="e-file",
        message_id="m-file",
        author=author,
        text="see the file",
        attachments=[AttachmentRef(name=name, source=source)],
    )


class Changes:
    """Wakes every waiter whenever something was recorded."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def touch(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    async def until(self, predicate: Callable[[], Any], timeout: float = 20) -> Any:
        """The first truthy value of ``predicate()``, checked after every change."""
        with anyio.fail_after(timeout):
            while not (value := predicate()):
                await self._event.wait()
            return value


@dataclass
class RecordedReply:
    """One turn's reply: what the core said on it, and when."""

    thread: ThreadRef
    reply_to: str | None
    changes: Changes
    author: Author | None = None
    record_text: bool = True
    deltas: list[str] = field(default_factory=list)
    tools: list[ToolActivity] = field(default_factory=list)
    outcome: TurnOutcome | None = None
    closed: bool = False
    opened: float = field(default_factory=time.perf_counter)
    first_delta: float | None = None
    finished: float | None = None
    appends: int = 0
    tool_calls: int = 0
    text_chars: int = 0

    async def append(self, text: str) -> None:
        if self.first_delta is None:
            self.first_delta = time.perf_counter()
        self.appends += 1
        self.text_chars += len(text)
        if self.record_text:
            self.deltas.append(text)
            self.changes.touch()

    async def tool(self, activity: ToolActivity) -> None:
        self.tool_calls += 1
        if self.record_text:
            self.tools.append(activity)
            self.changes.touch()

    async def finish(self, outcome: TurnOutcome) -> None:
        self.finished = time.perf_counter()
        self.outcome = outcome
        self.changes.touch()

    @property
    def calls(self) -> int:
        """How many calls the core made on this reply."""
        return self.appends + self.tool_calls + (self.outcome is not None)


class RecordingAdapter:
    """A :class:`bridge.core.events.ChatAdapter` that records; ``record_text=False`` keeps only
    counts and times (benchmarks: no memory grows with the text)."""

    def __init__(
        self,
        *,
        platform: str = "test",
        files: dict[str, bytes] | None = None,
        record_text: bool = True,
    ) -> None:
        self.platform = platform
        self.changes = Changes()
        self.replies: list[RecordedReply] = []
        self._replies_of: dict[str, list[RecordedReply]] = {}
        self.notices: list[tuple[str, str]] = []
        self.reactions: list[tuple[str, Reaction]] = []
        self.calls: Counter[str] = Counter()
        self.files = files or {}
        # What post_file was given: (thread key, the file).
        self.uploads: list[tuple[str, OutgoingFile]] = []
        self.record_text = record_text
        self.sent = 0
        # Approval requests asked (their handles are req-1, req-2, ...) and how each ended.
        self.requests: list[ApprovalRequest] = []
        self.settled: dict[str, ApprovalResult] = {}
        self.opened = 0  # threads opened (open_thread)
        self.resets: list[str] = []  # thread keys whose conversation was reset (!new)
        # Keys of the notices told once (tell_once), per thread key: what the chat holds.
        self.told: set[tuple[str, str]] = set()

    # --- ChatAdapter --------------------------------------------------------------------------

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        started()
        await anyio.sleep_forever()

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[RecordedReply]:
        self.calls["open_reply"] += 1
        reply = RecordedReply(thread, reply_to, self.changes, author, self.record_text)
        self.replies.append(reply)
        self._replies_of.setdefault(thread.key, []).append(reply)
        self.changes.touch()
        try:
            yield reply
        finally:
            reply.closed = True
            self.changes.touch()

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        self.calls["post_message"] += 1
        self.notices.append((thread.key, text))
        self.changes.touch()

    async def tell_once(self, thread: ThreadRef, key: str, text: str) -> bool:
        """:meth:`post_message` unless a notice with ``key`` is in the thread already (a chat
        that recognises it, as Slack's message metadata lets the bridge)."""
        self.calls["tell_once"] += 1
        if (thread.key, key) in self.told:
            return False
        await self.post_message(thread, text)
        self.told.add((thread.key, key))
        return True

    async def open_thread(self, channel: str, text: str) -> Opened:
        """A new thread whose root message is ``text`` (kept in ``notices`` under its key)."""
        self.calls["open_thread"] += 1
        self.opened += 1
        root = f"root{self.opened}"
        thread = ThreadRef(platform=self.platform, channel=channel, thread=root)
        self.notices.append((thread.key, text))
        self.changes.touch()
        return Opened(thread, root)

    async def conversation_reset(self, thread: ThreadRef) -> None:
        self.calls["conversation_reset"] += 1
        self.resets.append(thread.key)
        self.changes.touch()

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        self.calls["post_file"] += 1
        self.uploads.append((thread.key, file))
        self.notices.append((thread.key, f"file {file.name}"))
        self.changes.touch()

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        self.calls["react"] += 1
        self.reactions.append((message_id, reaction))
        self.changes.touch()

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        if ref.source not in self.files:
            raise AttachmentError("the chat service answered 404")
        data = self.files[ref.source]
        if len(data) > max_bytes:
            raise AttachmentError(f"the file is larger than {max_bytes} bytes")
        out.write(data)
        return len(data)

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        return []

    async def ask_approval(self, request: ApprovalRequest) -> str:
        self.calls["ask_approval"] += 1
        self.requests.append(request)
        self.changes.touch()
        return f"req-{len(self.requests)}"

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        self.calls["settle_approval"] += 1
        self.settled[handle] = result
        self.changes.touch()

    # --- driving and reading ------------------------------------------------------------------

    def thread(self, name: str) -> ThreadRef:
        return ThreadRef(platform=self.platform, channel="room", thread=name)

    def message(self, thread: ThreadRef, text: str, author: Author = ALICE) -> IncomingMessage:
        self.sent += 1
        mid = f"m{self.sent}"
        return IncomingMessage(
            thread=thread, event_id=mid, message_id=mid, author=author, text=text
        )

    def finished(self, thread: ThreadRef | None = None) -> list[RecordedReply]:
        replies = self.replies if thread is None else self._replies_of.get(thread.key, [])
        return [r for r in replies if r.outcome is not None]

    async def wait_finished(
        self, count: int, thread: ThreadRef | None = None, timeout: float = 20
    ) -> list[RecordedReply]:
        """Until ``count`` replies (of ``thread``) have finished; all of them, in order."""
        return await self.changes.until(
            lambda: (done := self.finished(thread)) and len(done) >= count and done, timeout
        )

    async def wait_notice(self, text: str, timeout: float = 20) -> str:
        return await self.changes.until(
            lambda: next((n for _, n in self.notices if text in n), None), timeout
        )


def signed_in(home: Path) -> Path:
    """The simulator's state directory ``home`` with its login in it (as after ``agy`` was
    signed in once): without one, the simulator refuses to start, as agy does."""
    home.mkdir(parents=True, exist_ok=True)
    login = home / "sim-login.json"
    if not login.exists():
        login.write_text(json.dumps({"account": "tester@agy-sim.invalid"}), encoding="utf-8")
    return home


async def fetch_into(adapter: Any, ref: AttachmentRef, dest: Path, max_bytes: int) -> int:
    """``adapter.fetch_attachment`` into a new file at ``dest`` (removed when it fails), as the
    core calls it (with an open file)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with dest.open("xb") as out:
            return int(await adapter.fetch_attachment(ref, out, max_bytes))
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def outgoing(path: Path) -> OutgoingFile:
    """A file as the core hands it to ``post_file``: its name and its bytes."""
    return OutgoingFile(name=path.name, data=path.read_bytes())


def git(repo: Path, *args: str) -> str:
    """git in ``repo``; its stdout (a non-zero exit fails the test)."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def one_commit_repository(
    repo: Path, name: str = "README.md", text: str = "the main checkout\n"
) -> Path:
    """A new git repository at ``repo`` (branch ``main``) holding one commit of one file."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return repo
