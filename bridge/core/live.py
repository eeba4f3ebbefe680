"""What runs in each thread on this instance, as it happens: for watchers (the web console).

Every turn's live reply passes through the chat wrapper of :mod:`bridge.core.scrubbed_chat`,
which tells the :class:`LiveHub` its text, its tool calls, its end, and the thread's approval
requests and message marks. A watcher reads the running turn so far (:meth:`LiveHub.current`)
and subscribes to what comes next (:meth:`LiveHub.subscribe`). Nothing here is stored: the
store stays the one source of truth for what happened; this is only what is happening now.

A watcher that cannot keep up is dropped (its stream ends) instead of slowing the turn.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from bridge.core.events import Author, LiveReply, ToolActivity, TurnOutcome

# What a page shows of a running turn's text (the end of it): enough for any answer, bounded.
MAX_TEXT = 200_000
MAX_TOOLS = 200
# Events a watcher may fall behind by before it is dropped.
WATCHER_BUFFER = 512


@dataclass(frozen=True)
class LiveEvent:
    """``kind``: ``turn`` (a turn began), ``delta`` (``text`` streamed), ``tool``
    (``data``: name, summary, state, error), ``end`` (``data``: error, interrupted),
    ``approval`` (a request was asked or settled), ``mark`` (``data``: message, reaction)."""

    kind: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class LiveTurn:
    """The running turn of a thread as far as it went."""

    author: Author | None
    started_at: float
    parts: list[str] = field(default_factory=list)
    size: int = 0
    tools: list[ToolActivity] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size > MAX_TEXT:
            whole = self.text[-MAX_TEXT:]
            self.parts, self.size = [whole], len(whole)

    def tool(self, activity: ToolActivity) -> None:
        # A tool's later state replaces its earlier line (same name and summary).
        for i, known in enumerate(self.tools):
            if (known.name, known.summary) == (activity.name, activity.summary):
                self.tools[i] = activity
                return
        self.tools.append(activity)
        del self.tools[:-MAX_TOOLS]


class LiveHub:
    """The running turns of this instance's threads and their watchers, by thread key."""

    def __init__(self) -> None:
        self._turns: dict[str, LiveTurn] = {}
        self._watchers: dict[str, set[MemoryObjectSendStream[LiveEvent]]] = {}

    def current(self, key: str) -> LiveTurn | None:
        return self._turns.get(key)

    def running(self) -> frozenset[str]:
        return frozenset(self._turns)

    @contextmanager
    def subscribe(self, key: str) -> Iterator[MemoryObjectReceiveStream[LiveEvent]]:
        send, receive = anyio.create_memory_object_stream[LiveEvent](WATCHER_BUFFER)
        self._watchers.setdefault(key, set()).add(send)
        try:
            yield receive
        finally:
            self._drop(key, send)
            receive.close()

    def publish(self, key: str, event: LiveEvent) -> None:
        for send in list(self._watchers.get(key, ())):
            try:
                send.send_nowait(event)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._drop(key, send)  # too slow or gone: its stream ends, it reloads

    def end_watchers(self) -> None:
        """Every watcher's stream ends now (its server is stopping)."""
        for key, watchers in list(self._watchers.items()):
            for send in list(watchers):
                self._drop(key, send)

    def _drop(self, key: str, send: MemoryObjectSendStream[LiveEvent]) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(send)
            if not watchers:
                del self._watchers[key]
        send.close()

    @asynccontextmanager
    async def watch(
        self,
        key: str,
        author: Author | None,
        reply: AbstractAsyncContextManager[LiveReply],
    ) -> AsyncIterator[LiveReply]:
        """``reply`` (a chat's live reply) told to this hub as well."""
        turn = LiveTurn(author=author, started_at=time.time())
        self._turns[key] = turn
        self.publish(key, LiveEvent("turn", data={"by": author.label if author else ""}))
        try:
            async with reply as inner:
                yield _Tee(inner, self, key, turn)
        finally:
            if self._turns.get(key) is turn:
                del self._turns[key]
            self.publish(key, LiveEvent("end"))


class _Tee:
    """A live reply that also tells the hub."""

    def __init__(self, inner: LiveReply, hub: LiveHub, key: str, turn: LiveTurn) -> None:
        self._inner, self._hub, self._key, self._turn = inner, hub, key, turn

    async def append(self, text: str) -> None:
        self._turn.add(text)
        self._hub.publish(self._key, LiveEvent("delta", text))
        await self._inner.append(text)

    async def tool(self, activity: ToolActivity) -> None:
        self._turn.tool(activity)
        self._hub.publish(self._key, LiveEvent("tool", data=activity.model_dump()))
        await self._inner.tool(activity)

    async def finish(self, outcome: TurnOutcome) -> None:
        data = {"error": outcome.error or "", "interrupted": outcome.interrupted}
        self._hub.publish(self._key, LiveEvent("finish", outcome.final_text, data))
        await self._inner.finish(outcome)
