"""A thread moved to another key (a Matrix room upgrade) carries on with its conversation."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.events import Author, ThreadRef
from bridge.core.workspaces import thread_slug
from tests.core.harness import running, thread
from tests.core.test_turn_loop import wait_file

pytestmark = pytest.mark.anyio

ALICE = Author(id="@alice:test", display_name="Alice")


async def _count(h: object, table: str, key: str) -> int:
    db = h.bridge.store.database  # type: ignore[attr-defined]
    rows = await db.fetch(f"SELECT count(*) AS n FROM {table} WHERE thread_key = ?", (key,))
    return int(rows[0]["n"])


async def test_a_moved_thread_carries_on_with_the_same_conversation(tmp_path: Path) -> None:
    old = thread("old")
    new = ThreadRef(platform="test", channel="replacement", thread="")
    async with running(tmp_path) as h:
        await h.say("remember 42", where=old)
        await h.adapter.wait_finished(1, old)
        before = await h.bridge.store.thread(old.key)
        assert before.conversation_id
        # A turn runs when the room is upgraded: it is stopped, and the actor of the old key
        # ends before the rows move.
        started = h.flag("started")
        await h.say(f"long [[touch {started}]] [[sleep 30]]", where=old)
        await wait_file(started)
        assert await h.bridge.core.move_thread(old, new, ALICE)
        assert old.key not in h.bridge.core.threads
        [_, stopped] = await h.adapter.wait_finished(2, old)
        assert stopped.outcome is not None and stopped.outcome.interrupted
        for table in ("inbox", "turns"):
            assert await _count(h, table, old.key) == 0
            assert await _count(h, table, new.key) >= 2
        moved = await h.bridge.store.thread(new.key)
        assert moved.conversation_id == before.conversation_id
        assert (await h.bridge.store.thread(old.key)).conversation_id is None
        sessions = h.bridge.config.bridge.data_dir.resolve() / "sessions"
        assert (sessions / thread_slug(new)).is_dir()
        assert not (sessions / thread_slug(old)).exists()
        assert await h.bridge.core.is_conversation(new)
        # The conversation goes on under the new key, with the same agy conversation.
        await h.say("carry on", where=new)
        [after] = await h.adapter.wait_finished(1, new)
        assert after.outcome is not None and after.outcome.error is None
        assert (await h.bridge.store.thread(new.key)).conversation_id == before.conversation_id


async def test_a_thread_is_not_moved_onto_another_conversation(tmp_path: Path) -> None:
    old, other = thread("old"), thread("other")
    async with running(tmp_path) as h:
        await h.say("one", where=old)
        await h.say("two", where=other)
        await h.adapter.wait_finished(1, old)
        await h.adapter.wait_finished(1, other)
        conversation = (await h.bridge.store.thread(other.key)).conversation_id
        assert not await h.bridge.core.move_thread(old, other, ALICE)
        assert (await h.bridge.store.thread(other.key)).conversation_id == conversation
        assert await _count(h, "inbox", old.key) == 1
