"""A turn broken by a crash must be reported in its thread even when the first report fails.

A SIGKILLed bridge leaves the turn ``running`` in the store; the next start reports it. Posting
can fail (the chat service answers 5xx, or the bridge dies again between recording the turn as
interrupted and posting): the report must then come with a later start, not be lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.events import Author, IncomingMessage
from bridge.core.store.opening import open_store
from bridge.core.store.threads import ThreadQueries
from tests.core.harness import RecordingAdapter, running, thread

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

NOTICE = "The bridge restarted while the agent was working"


async def leave_a_running_turn(tmp: Path) -> None:
    """What a bridge killed mid-turn leaves behind: a turn still marked running."""
    async with open_store(tmp / "data" / "bridge.sqlite3") as store:
        await store.ensure_thread(thread())
        await store.add_message(
            IncomingMessage(
                thread=thread(), event_id="e-left", message_id="e-left", author=Author(id="u")
            )
        )
        assert await store.take_turn(thread().key, None) is not None


async def test_a_broken_turn_is_reported_once_at_the_next_start(tmp_path: Path) -> None:
    await leave_a_running_turn(tmp_path)
    async with running(tmp_path) as h:
        assert [n for _, n in h.adapter.notices if NOTICE in n]
    async with running(tmp_path) as h:
        assert not h.adapter.notices, "a reported turn is not reported again"


async def test_a_restart_report_that_could_not_be_posted_comes_with_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await leave_a_running_turn(tmp_path)
    original = RecordingAdapter.post_message

    async def chat_down(self: RecordingAdapter, where: object, text: str) -> None:
        raise ConnectionError("the chat service answered 503")

    monkeypatch.setattr(RecordingAdapter, "post_message", chat_down)
    async with running(tmp_path):
        pass
    monkeypatch.setattr(RecordingAdapter, "post_message", original)
    async with running(tmp_path) as h:
        assert [n for _, n in h.adapter.notices if NOTICE in n]


async def test_a_restart_report_said_but_not_recorded_is_not_said_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the chat took the notice and before the turn was recorded as reported:
    the next start finds the turn running still, and the chat recognises the notice by its
    key (the turn's), so the thread hears it once."""
    await leave_a_running_turn(tmp_path)
    chat = RecordingAdapter()
    original = ThreadQueries.finish_turn

    async def killed_before_recording(*args: object, **kwargs: object) -> None:
        return None

    monkeypatch.setattr(ThreadQueries, "finish_turn", killed_before_recording)
    async with running(tmp_path, adapter=chat):
        pass
    monkeypatch.setattr(ThreadQueries, "finish_turn", original)
    async with running(tmp_path, adapter=chat) as h:
        assert await h.bridge.store.running_turns() == [], "recorded as reported now"
    told = [n for _, n in chat.notices if NOTICE in n]
    assert len(told) == 1, f"told {len(told)} times"
