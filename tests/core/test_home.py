"""The core's facts for a person's home page, read from the store (both databases)."""

from __future__ import annotations

import pytest

from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.home import StoreFacts
from bridge.core.store.opening import open_store

pytestmark = pytest.mark.anyio
ALICE = Author(id="U0ALICE", display_name="alice")
BOB = Author(id="U0BOB", display_name="bob")
FIRST = ThreadRef(platform="slack", channel="C0DEV", thread="1.1")
SECOND = ThreadRef(platform="slack", channel="D0ALICE", thread="2.2")
BOBS = ThreadRef(platform="slack", channel="C0DEV", thread="3.3")
ELSEWHERE = ThreadRef(platform="matrix", channel="!room:x", thread="")


def said(where: ThreadRef, event: str, author: Author, text: str) -> IncomingMessage:
    return IncomingMessage(thread=where, event_id=event, message_id=event, author=author, text=text)


async def test_a_persons_threads_and_what_waits_for_them(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_message(
            said(FIRST, "e1", ALICE, "fix the flaky test\nplease"), record_thread=True
        )
        await store.add_message(said(FIRST, "e2", BOB, "me too"), record_thread=True)
        await store.add_message(said(SECOND, "e3", ALICE, "what does this do?"), record_thread=True)
        await store.add_message(said(BOBS, "e4", BOB, "bob's own"), record_thread=True)
        await store.add_message(
            said(ELSEWHERE, "e5", Author(id="U0ALICE"), "x"), record_thread=True
        )
        await store.set_title(SECOND.key, "Reading the code", "alice")
        await store.take_turn(FIRST.key, "conv-1")
        await store.add_approval("a1", FIRST.key, "run_command", {}, "make deploy", BOB)
        await store.add_approval("a2", BOBS.key, "run_command", {}, "rm -rf build", BOB)

        facts = StoreFacts(store)
        threads = await facts.active_threads("slack", ALICE.id)
        assert [(t.thread, t.title, t.working) for t in threads] == [
            (SECOND, "Reading the code", False),
            (FIRST, "fix the flaky test", True),
        ]
        # No approvers configured: what waits in her threads (Bob's thread is his).
        assert [w.summary for w in await facts.waiting_for("slack", ALICE.id)] == ["make deploy"]
        assert [w.summary for w in await facts.waiting_for("slack", BOB.id)] == [
            "make deploy",
            "rm -rf build",
        ]
        # Approvers configured: everything for an approver, nothing for anyone else.
        named = StoreFacts(store, approvers=[ALICE.id])
        assert len(await named.waiting_for("slack", ALICE.id)) == 2
        assert await named.waiting_for("slack", BOB.id) == []
