"""The LiveHub: a running turn as it happens, for watchers; a slow watcher is dropped instead
of slowing the turn, and what is kept of a turn's text is bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from bridge.core import live
from bridge.core.events import Author, ToolActivity, TurnOutcome
from bridge.core.live import LiveEvent, LiveHub

pytestmark = pytest.mark.anyio


class _Reply:
    def __init__(self) -> None:
        self.text = ""

    async def append(self, text: str) -> None:
        self.text += text

    async def tool(self, activity: ToolActivity) -> None:
        pass

    async def finish(self, outcome: TurnOutcome) -> None:
        pass


@asynccontextmanager
async def _opened(reply: _Reply) -> AsyncIterator[_Reply]:
    yield reply


async def test_watchers_see_the_turn_and_the_chat_still_gets_it() -> None:
    hub, inner = LiveHub(), _Reply()
    with hub.subscribe("k") as events:
        async with hub.watch("k", Author(id="a"), _opened(inner)) as reply:
            await reply.append("hello ")
            await reply.tool(ToolActivity(name="run_command", summary="ls", state="ACTIVE"))
            await reply.tool(ToolActivity(name="run_command", summary="ls", state="DONE"))
            await reply.append("world")
            turn = hub.current("k")
            assert turn is not None and turn.text == "hello world"
            assert [t.state for t in turn.tools] == ["DONE"]  # its later state, in place
            await reply.finish(TurnOutcome(final_text="hello world"))
        assert hub.current("k") is None and hub.running() == frozenset()
        kinds = []
        with anyio.fail_after(5):
            async for event in events:
                kinds.append(event.kind)
                if event.kind == "end":
                    break
    assert kinds == ["turn", "delta", "tool", "tool", "delta", "finish", "end"]
    assert inner.text == "hello world"


async def test_a_slow_watcher_is_dropped_and_text_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(live, "MAX_TEXT", 10)
    hub = LiveHub()
    with hub.subscribe("k") as slow:
        for i in range(live.WATCHER_BUFFER + 5):
            hub.publish("k", LiveEvent("delta", str(i)))
        received = [event async for event in slow]  # its stream ended: it was dropped
    assert len(received) == live.WATCHER_BUFFER
    turn = live.LiveTurn(author=None, started_at=0)
    for _ in range(5):
        turn.add("abcdef")
    assert turn.text == "cdefabcdef" and turn.size == 10
