"""A thread's rows move to another key in one step (store_moves), on both databases."""

from __future__ import annotations

import time

import pytest

from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.feedback import record_feedback
from bridge.core.store import PullRow
from bridge.core.store.moves import THREAD_TABLES
from bridge.core.store.opening import open_store

pytestmark = pytest.mark.anyio
OLD = ThreadRef(platform="matrix", channel="!old:x", thread="")
NEW = ThreadRef(platform="matrix", channel="!new:x", thread="")
ALICE = Author(id="@alice:x", display_name="Alice")


def msg(event: str, where: ThreadRef = OLD) -> IncomingMessage:
    return IncomingMessage(thread=where, event_id=event, message_id=event, author=ALICE, text="hi")


async def counts(store: object, key: str) -> dict[str, int]:
    db = store.database  # type: ignore[attr-defined]
    found = {}
    for table in THREAD_TABLES:
        rows = await db.fetch(f"SELECT count(*) AS n FROM {table} WHERE thread_key = ?", (key,))
        found[table] = int(rows[0]["n"])
    return found


async def test_every_row_of_the_thread_moves_together(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_message(msg("e1"), record_thread=True)
        await store.set_conversation(OLD.key, "conv-1")
        await store.add_approval("a1", OLD.key, "run_command", {"cmd": "ls"}, "ls", ALICE)
        await store.add_allowed(OLD.key, "git status", ALICE)
        await store.add_process(4242, OLD.key, "marker", owner="me")
        await store.take_turn(OLD.key, "conv-1")
        await store.database.execute(
            "INSERT INTO leases (thread_key, owner, expires_at) VALUES (?, ?, ?)",
            (OLD.key, "me", time.time() + 60),
        )
        await record_feedback(store, OLD.key, "2.0", ALICE.id, True)
        await store.database.execute(
            "INSERT INTO usage_shares (turn_id, person, person_name, thread_key, platform,"
            " channel, model, at, input_tokens, output_tokens, thinking_tokens,"
            " cache_read_tokens, total_tokens) VALUES (1, ?, 'Alice', ?, 'matrix', ?,"
            " 'default', ?, 5, 5, 0, 0, 10)",
            (ALICE.id, OLD.key, OLD.channel, time.time()),
        )
        await store.set_title(OLD.key, "Flaky CI hunt", ALICE.label)
        await store.save_pull(
            PullRow(
                thread_key=OLD.key,
                forge="github",
                repo="team/app",
                number=3,
                head="agy/x",
                base="main",
                url="https://x/3",
                state="open",
                pushed_sha="a" * 40,
                checks_sha="",
                checks={},
            )
        )
        assert all((await counts(store, OLD.key)).values())
        assert await store.move_thread(OLD, NEW, "me")
        assert not any((await counts(store, OLD.key)).values())
        assert all((await counts(store, NEW.key)).values())
        moved = await store.thread(NEW.key)
        assert moved.conversation_id == "conv-1"
        assert (await store.thread(OLD.key)).conversation_id is None
        assert await store.allow_list(NEW.key) == ["git status"]
        # A later message of the new room joins the moved conversation.
        await store.add_message(msg("e2", NEW), record_thread=True)
        assert (await store.thread(NEW.key)).conversation_id == "conv-1"


async def test_nothing_moves_onto_a_conversation_or_away_from_another_instance(
    store_where: str,
) -> None:
    async with open_store(store_where) as store:
        await store.add_message(msg("e1"), record_thread=True)
        await store.add_message(msg("e2", NEW), record_thread=True)
        assert not await store.move_thread(OLD, NEW, "me")
        assert (await counts(store, OLD.key))["inbox"] == 1
        other = ThreadRef(platform="matrix", channel="!other:x")
        await store.database.execute(
            "INSERT INTO leases (thread_key, owner, expires_at) VALUES (?, ?, ?)",
            (OLD.key, "another instance", time.time() + 60),
        )
        assert not await store.move_thread(OLD, other, "me")
        assert (await counts(store, OLD.key))["inbox"] == 1
        assert not await store.move_thread(OLD, OLD, "me")
