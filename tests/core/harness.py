"""A recording chat adapter and a running bridge on the agy simulator, for core tests."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bridge.app import Bridge, open_bridge
from bridge.config import build_config
from bridge.core.events import (
    ApprovalRequest,
    ApprovalResult,
    AttachmentError,
    AttachmentRef,
    Author,
    HistoryEntry,
    Inbound,
    IncomingMessage,
    Reaction,
    SubmitOutcome,
    ThreadRef,
    ToolActivity,
    TurnOutcome,
)

SIMULATOR = [sys.executable, "-m", "bridge.simulator"]


class Changes:
    """Wake every waiter whenever something was recorded."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def touch(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def until(self, predicate: Callable[[], Any], timeout: float = 20) -> Any:
        with anyio.fail_after(timeout):
            while not (value := predicate()):
                await self._event.wait()
            return value


@dataclass
class RecordedReply:
    thread: ThreadRef
    reply_to: str | None
    changes: Changes
    deltas: list[str] = field(default_factory=list)
    tools: list[ToolActivity] = field(default_factory=list)
    outcome: TurnOutcome | None = None
    author: Author | None = None
    closed: bool = False

    async def append(self, text: str) -> None:
        self.deltas.append(text)
        self.changes.touch()

    async def tool(self, activity: ToolActivity) -> None:
        self.tools.append(activity)
        self.changes.touch()

    async def finish(self, outcome: TurnOutcome) -> None:
        self.outcome = outcome
        self.changes.touch()


class RecordingAdapter:
    platform = "test"

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.changes = Changes()
        self.replies: list[RecordedReply] = []
        self.notices: list[tuple[str, str]] = []
        self.reactions: list[tuple[str, Reaction]] = []
        self.files = files or {}
        self.count = 0
        self.requests: list[ApprovalRequest] = []
        self.settled: dict[str, ApprovalResult] = {}

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        started()
        await anyio.sleep_forever()

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[RecordedReply]:
        reply = RecordedReply(thread, reply_to, self.changes)
        reply.author = author
        self.replies.append(reply)
        self.changes.touch()
        try:
            yield reply
        finally:
            reply.closed = True
            self.changes.touch()

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        self.notices.append((thread.key, text))
        self.changes.touch()

    async def post_file(self, thread: ThreadRef, path: Path, title: str | None) -> None:
        self.notices.append((thread.key, f"file {path.name}"))
        self.changes.touch()

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        self.reactions.append((message_id, reaction))
        self.changes.touch()

    async def fetch_attachment(self, ref: AttachmentRef, dest: Path, max_bytes: int) -> int:
        if ref.source not in self.files:
            raise AttachmentError("the chat service answered 404")
        data = self.files[ref.source]
        if len(data) > max_bytes:
            raise AttachmentError(f"the file is larger than {max_bytes} bytes")
        dest.write_bytes(data)
        return len(data)

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        return []

    async def ask_approval(self, request: ApprovalRequest) -> str:
        self.requests.append(request)
        self.changes.touch()
        return f"req-{len(self.requests)}"

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        self.settled[handle] = result
        self.changes.touch()

    # --- test helpers ---------------------------------------------------------------------

    def finished(self, thread: ThreadRef | None = None) -> list[RecordedReply]:
        return [
            r
            for r in self.replies
            if r.outcome is not None and (thread is None or r.thread == thread)
        ]

    async def wait_finished(
        self, count: int, thread: ThreadRef | None = None
    ) -> list[RecordedReply]:
        return await self.changes.until(
            lambda: (done := self.finished(thread)) and len(done) >= count and done
        )

    async def wait_notice(self, text: str) -> str:
        return await self.changes.until(
            lambda: next((n for _, n in self.notices if text in n), None)
        )


def thread(name: str = "t1") -> ThreadRef:
    return ThreadRef(platform="test", channel="room", thread=name)


@dataclass
class Harness:
    bridge: Bridge
    adapter: RecordingAdapter
    tmp: Path

    async def say(
        self,
        text: str,
        *,
        where: ThreadRef | None = None,
        who: str = "alice",
        attachments: list[AttachmentRef] | None = None,
        event_id: str | None = None,
    ) -> str:
        self.adapter.count += 1
        mid = event_id or f"m{self.adapter.count}"
        outcome = await self.bridge.core.submit(
            IncomingMessage(
                thread=where or thread(),
                event_id=mid,
                message_id=mid,
                author=Author(id=f"@{who}:test", display_name=who.title()),
                text=text,
                attachments=attachments or [],
            )
        )
        assert outcome in (SubmitOutcome.ACCEPTED, SubmitOutcome.COMMAND, SubmitOutcome.DUPLICATE)
        return mid

    def flag(self, name: str) -> Path:
        return self.tmp / "flags" / name

    async def worker_gone(self, where: ThreadRef | None = None) -> None:
        key = (where or thread()).key
        with anyio.fail_after(20):
            while key in self.bridge.core.workers:
                await anyio.sleep(0.02)


@asynccontextmanager
async def running(
    tmp: Path, extra: dict[str, Any] | None = None, **agy: Any
) -> AsyncIterator[Harness]:
    (tmp / "flags").mkdir(exist_ok=True)
    os.environ["AGY_SIM_HOME"] = str(tmp / "sim-home")
    settings = {"command": SIMULATOR, "init_timeout": 20, "stop_grace": 2, **agy}
    # Tests of other areas run tools freely; approvals tests turn the gate on themselves.
    raw = {
        "bridge": {"data_dir": str(tmp / "data")},
        "agy": settings,
        "approvals": {"mode": "off"},
        **(extra or {}),
    }
    config = build_config(raw, environ={})
    adapter = RecordingAdapter()
    async with open_bridge(config, {"test": adapter}) as bridge:
        await bridge.core.recover()
        yield Harness(bridge, adapter, tmp)
