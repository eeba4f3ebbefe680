"""The store refusing writes (a full disk, a read-only mount), under the core harness.

Tests run as root, so file modes would not stop a write: ``PRAGMA query_only`` on the store's
own connection makes every write fail the way a full disk does, while reads go on.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import Author, IncomingMessage, SubmitOutcome
from bridge.core.store.rows import StoreError
from bridge.core.store.sqlite import SqliteDatabase
from tests.core.harness import Harness, running, thread
from tests.faults.console import sim_conversation_messages

pytestmark = [pytest.mark.faults, pytest.mark.anyio]


async def refuse_writes(h: Harness, on: bool) -> None:
    db = h.bridge.store.database
    assert isinstance(db, SqliteDatabase)
    # Under the store's own lock, so the switch never lands inside another task's transaction.
    async with db.lock:
        await db.conn.execute(f"PRAGMA query_only={'ON' if on else 'OFF'}")


def message(text: str, event_id: str) -> IncomingMessage:
    return IncomingMessage(
        thread=thread(),
        event_id=event_id,
        message_id=event_id,
        author=Author(id="@carol:test", display_name="Carol"),
        text=text,
    )


def delivered(h: Harness, text: str) -> int:
    """How often ``text`` reached agy (the simulator's stored conversations) or a reply."""
    history = sim_conversation_messages(h.tmp / "sim-home", ("user", "injected"))
    replies = [r.outcome.final_text for r in h.adapter.finished() if r.outcome]
    return sum(t.count(text) for t in history + replies)


async def test_a_message_the_store_cannot_take_is_refused_and_never_delivered(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        await refuse_writes(h, True)
        with pytest.raises(StoreError, match="could not write to the store"):
            await h.bridge.core.submit(message("written to a full disk", "evt-lost"))
        assert not h.bridge.core.threads, "no worker starts for a message that was not stored"
        await refuse_writes(h, False)

        await h.say("after the disk was cleaned up")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        assert delivered(h, "written to a full disk") == 0
        assert not h.adapter.reactions and not h.adapter.notices

        # The platform redelivers the event it never got an acknowledgement for: it runs now.
        outcome = await h.bridge.core.submit(message("written to a full disk", "evt-lost"))
        assert outcome is SubmitOutcome.ACCEPTED
        _, again = await h.adapter.wait_finished(2)
        assert again.outcome is not None and "written to a full disk" in again.outcome.final_text


async def test_a_message_refused_mid_turn_is_not_injected(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        # The first model call has run; the second one's hook could inject what is stored now.
        await h.say(f"long job [[calls 2]] [[touch {started}]] [[wait {go}]]")
        await wait_file(started)
        await refuse_writes(h, True)
        with pytest.raises(StoreError):
            await h.bridge.core.submit(message("typed while the disk was full", "evt-mid"))
        await refuse_writes(h, False)
        go.touch()
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        await h.say("and now?")
        await h.adapter.wait_finished(2)
        assert delivered(h, "typed while the disk was full") == 0
        assert ("evt-mid", "injected") not in [(m, r.value) for m, r in h.adapter.reactions]


async def test_a_store_failure_at_the_end_of_a_turn_is_told_and_the_bridge_stays_up(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"work [[touch {started}]] [[wait {go}]] [[calls 2]]")
        await wait_file(started)
        await refuse_writes(h, True)
        go.touch()
        # agy answers; the bridge cannot record the turn. The thread must hear something.
        await h.adapter.changes.until(lambda: h.adapter.finished() or h.adapter.notices)
        await refuse_writes(h, False)
        await h.say("is the bridge still up?")
        answered = await h.adapter.changes.until(
            lambda: [
                r
                for r in h.adapter.finished()
                if r.outcome and "is the bridge still up?" in r.outcome.final_text
            ]
        )
        assert answered


async def wait_file(path: Path) -> None:
    with anyio.fail_after(20):
        while not path.exists():
            await anyio.sleep(0.02)
