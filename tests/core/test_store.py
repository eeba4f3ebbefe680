"""The store's contract, on SQLite and on PostgreSQL (``store_where`` runs each test on both)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core import store as st
from bridge.core.events import AttachmentRef, Author, IncomingMessage, ThreadRef
from bridge.core.store.opening import open_store
from bridge.core.store.rows import StoreError
from bridge.core.store.sqlite import SqliteDatabase

pytestmark = pytest.mark.anyio
T = ThreadRef(platform="slack", channel="C1", thread="1.0")


def msg(event: str, text: str = "hi", attachments: list[AttachmentRef] | None = None):
    return IncomingMessage(
        thread=T,
        event_id=event,
        message_id=event,
        author=Author(id="U1", display_name="Alice"),
        text=text,
        attachments=attachments or [],
    )


async def test_redelivered_event_is_dropped(store_where: str) -> None:
    async with open_store(store_where) as store:
        assert await store.add_message(msg("e1")) is not None
        assert await store.add_message(msg("e1", "again")) is None
        assert [m.text for m in await store.pending(T.key)] == ["hi"]


async def test_take_pending_is_once_and_in_order(store_where: str) -> None:
    async with open_store(store_where) as store:
        for n in range(3):
            await store.add_message(msg(f"e{n}", f"m{n}"))
        taken = await store.take_pending(T.key, st.MessageState.INJECTED, 7, ready_only=True)
        assert [m.text for m in taken] == ["m0", "m1", "m2"]
        assert [m.state for m in taken] == [st.MessageState.INJECTED] * 3
        assert await store.take_pending(T.key, st.MessageState.IN_TURN, 7, ready_only=False) == []
        assert await store.take_turn(T.key, "c1") is None


async def test_ready_only_stops_at_an_unsaved_attachment(store_where: str) -> None:
    ref = AttachmentRef(name="a.png", mimetype="image/png", source="x")
    async with open_store(store_where) as store:
        await store.add_message(msg("e0", "first"))
        second = await store.add_message(msg("e1", "pic", [ref]))
        await store.add_message(msg("e2", "third"))
        taken = await store.take_pending(T.key, st.MessageState.INJECTED, None, ready_only=True)
        assert [m.text for m in taken] == ["first"]
        assert second is not None
        await store.set_saved(second, ["/tmp/a.png"])
        taken = await store.take_pending(T.key, st.MessageState.INJECTED, None, ready_only=True)
        assert [m.text for m in taken] == ["pic", "third"]
        assert taken[0].saved == ["/tmp/a.png"]


async def test_state_survives_reopen_and_running_turns_are_found(store_where: str) -> None:
    path = store_where
    async with open_store(path) as store:
        await store.ensure_thread(T)
        await store.set_conversation(T.key, "conv-1")
        await store.set_model(T.key, "m")
        await store.set_usage(T.key, st.Usage(input_tokens=3, output_tokens=4, total_tokens=7))
        await store.add_message(msg("e0"))
        assert await store.take_turn(T.key, "conv-1") is not None
        await store.add_process(4242, T.key, "marker")
    async with open_store(path) as store:
        row = await store.thread(T.key)
        assert (row.conversation_id, row.model) == ("conv-1", "m")
        assert row.usage is not None and row.usage.total_tokens == 7
        await store.reset_conversation(T.key)
        row = await store.thread(T.key)
        assert (row.conversation_id, row.usage, row.model) == (None, None, "m")
        assert [t.thread_key for t in await store.running_turns()] == [T.key]
        assert [(p.pgid, p.run_marker) for p in await store.processes()] == [(4242, "marker")]
        assert await store.known_thread(T.key)


async def test_history_mixes_messages_and_answers(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_message(msg("e0", "question"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        await store.finish_turn(taken[0], st.TurnState.DONE, response="answer")
        history = await store.history(T.key, 10)
        assert [(who, text) for _, who, text in history] == [
            ("Alice (U1)", "question"),
            ("agent", "answer"),
        ]


async def test_a_failing_write_is_a_clear_error(tmp_path: Path) -> None:
    # Tests run as root, where file modes do not stop writes: make SQLite refuse them instead.
    async with open_store(tmp_path / "db.sqlite3") as store:
        assert isinstance(store.database, SqliteDatabase)
        await store.database.conn.execute("PRAGMA query_only=ON")
        with pytest.raises(StoreError, match="could not write"):
            await store.add_message(msg("e1"))
        with pytest.raises(StoreError):
            await store.take_pending(T.key, st.MessageState.IN_TURN, None, ready_only=False)


async def test_newer_schema_is_refused(store_where: str) -> None:
    path = store_where
    async with open_store(path) as store, store.database.transaction() as tx:
        await tx.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="newer"):
        async with open_store(path):
            pass


async def test_take_turn_starts_a_turn_on_everything_pending(store_where: str) -> None:
    async with open_store(store_where) as store:
        assert await store.take_turn(T.key, "c") is None
        await store.add_message(msg("e0", "a"))
        await store.add_message(msg("e1", "b"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        turn_id, messages = taken
        assert [m.text for m in messages] == ["a", "b"]
        assert [t.id for t in await store.running_turns()] == [turn_id]
        assert await store.pending(T.key) == []
        assert await store.requeue_turn(turn_id) == 2
        assert [m.text for m in await store.pending(T.key)] == ["a", "b"]


async def test_concurrent_takers_never_take_a_message_twice(store_where: str) -> None:
    """Two stores on one database (two instances) race for the same pending messages."""
    async with open_store(store_where) as one, open_store(store_where) as two:
        for n in range(20):
            await one.add_message(msg(f"e{n}", f"m{n}"))
        taken: list[str] = []

        async def take(store: st.Store) -> None:
            for _ in range(10):
                got = await store.take_pending(
                    T.key, st.MessageState.INJECTED, None, ready_only=True
                )
                taken.extend(m.text for m in got)
                got_turn = await store.take_turn(T.key, "c")
                if got_turn is not None:
                    taken.extend(m.text for m in got_turn[1])

        async with anyio.create_task_group() as tg:
            tg.start_soon(take, one)
            tg.start_soon(take, two)
        assert sorted(taken) == sorted(f"m{n}" for n in range(20))


async def test_text_a_database_refuses_is_stored_readable(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_message(msg("e0", "nul\x00 and lone \ud800 surrogate"))
        [stored] = await store.pending(T.key)
        assert stored.text == "nul\ufffd and lone \ufffd surrogate"


async def test_an_unknown_url_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="unknown store URL"):
        async with open_store("mysql://db/bridge"):
            pass


async def test_an_unreachable_postgresql_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.core.store import postgres as store_pg

    monkeypatch.setattr(store_pg, "CONNECT_TIMEOUT", 1.0)
    with pytest.raises(StoreError, match=r"cannot open the store at postgresql://u:\*\*\*@"):
        async with open_store("postgresql://u:secret@127.0.0.1:1/none"):
            pass


async def test_a_new_message_can_record_its_thread_in_the_same_transaction(
    store_where: str,
) -> None:
    async with open_store(store_where) as store:
        assert not await store.known_thread(T.key)
        assert await store.add_message(msg("e0"), record_thread=True) is not None
        assert await store.known_thread(T.key)
        # Known from now on: the next message is one statement, and a redelivery still none.
        assert await store.add_message(msg("e1"), record_thread=True) is not None
        assert await store.add_message(msg("e1"), record_thread=True) is None
        assert [m.text for m in await store.pending(T.key)] == ["hi", "hi"]
    async with open_store(store_where) as store:
        assert await store.known_thread(T.key)


async def test_a_redelivered_message_records_no_thread(store_where: str) -> None:
    async with open_store(store_where) as one, open_store(store_where) as two:
        await one.add_message(msg("e0"))  # stored before, without its thread (a command)
        assert await two.add_message(msg("e0"), record_thread=True) is None
        assert not await two.known_thread(T.key)


async def test_a_threads_usage_is_its_conversations_latest_turns(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_message(msg("e0"), record_thread=True)
        await store.set_conversation(T.key, "c")
        await store.set_usage(T.key, st.Usage(total_tokens=2))  # an older version's record
        assert (await store.thread(T.key)).usage == st.Usage(total_tokens=2)
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        usage = st.Usage(input_tokens=5, output_tokens=6, total_tokens=11)
        await store.finish_turn(taken[0], st.TurnState.DONE, response="answer", usage=usage)
        assert (await store.thread(T.key)).usage == usage
        assert await store.running_turns() == []
        # A later turn that reported nothing (agy died) leaves the latest report in place.
        await store.add_message(msg("e1"))
        second = await store.take_turn(T.key, "c")
        assert second is not None
        await store.finish_turn(second[0], st.TurnState.ERROR, error="agy exited")
        assert (await store.thread(T.key)).usage == usage
        # A turn of another conversation is not this one's.
        await store.add_message(msg("e2"))
        other = await store.take_turn(T.key, "elsewhere")
        assert other is not None
        await store.finish_turn(other[0], st.TurnState.DONE, usage=st.Usage(total_tokens=99))
        assert (await store.thread(T.key)).usage == usage
        # The newest report of the conversation wins; a new conversation starts with none.
        await store.add_message(msg("e3"))
        third = await store.take_turn(T.key, "c")
        assert third is not None
        await store.finish_turn(third[0], st.TurnState.DONE, usage=st.Usage(total_tokens=20))
        assert (await store.thread(T.key)).usage == st.Usage(total_tokens=20)
        await store.reset_conversation(T.key)
        assert (await store.thread(T.key)).usage is None


async def test_take_turn_keeps_the_order_of_many_messages(store_where: str) -> None:
    async with open_store(store_where) as store:
        for n in range(30):
            await store.add_message(msg(f"e{n}", f"m{n}"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        assert [m.text for m in taken[1]] == [f"m{n}" for n in range(30)]
        assert {m.state for m in taken[1]} == {st.MessageState.IN_TURN}
        assert await store.take_turn(T.key, "c") is None
        assert [t.id for t in await store.running_turns()] == [taken[0]]


async def test_racing_turns_leave_no_turn_without_messages(store_where: str) -> None:
    """Two instances start a turn on the same message: one gets it, the other gets None and
    leaves no turn behind (on PostgreSQL both may see it waiting; the loser's turn is rolled
    back)."""
    async with open_store(store_where) as one, open_store(store_where) as two:
        for n in range(10):
            await one.add_message(msg(f"e{n}", f"m{n}"))
            results: list[tuple[int, list[st.StoredMessage]] | None] = []

            async def take(store: st.Store) -> None:
                results.append(await store.take_turn(T.key, "c"))  # noqa: B023

            async with anyio.create_task_group() as tg:
                tg.start_soon(take, one)
                tg.start_soon(take, two)
            [won] = [r for r in results if r is not None]
            assert [m.text for m in won[1]] == [f"m{n}"]
        running = await one.running_turns()
        assert len(running) == 10


async def test_a_waiting_message_is_revised_or_withdrawn_only_while_it_waits(
    store_where: str,
) -> None:
    async with open_store(store_where) as store:
        first = await store.add_message(msg("e1", "deploy staging"))
        second = await store.add_message(msg("e2", "and tell bob"))
        assert first is not None and second is not None
        assert await store.revise_pending(first, "deploy production")
        assert await store.withdraw_pending(second)
        assert not await store.revise_pending(second, "too late")  # withdrawn: not waiting
        [waiting] = await store.pending(T.key)
        assert waiting.text == "deploy production"
        taken = await store.take_turn(T.key, "c1")
        assert taken is not None and [m.text for m in taken[1]] == ["deploy production"]
        # Taken: a change can no longer touch it.
        assert not await store.revise_pending(first, "again")
        assert not await store.withdraw_pending(first)
        original = await store.original(T.key, "e1")
        assert original is not None and original.state is st.MessageState.IN_TURN


async def test_last_seen_names_each_threads_messages_since_a_time(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_message(msg("1.1"))
        await store.add_message(msg("1.2"))
        other = IncomingMessage(
            thread=ThreadRef(platform="matrix", channel="!r", thread=""),
            event_id="$x",
            message_id="$x",
            author=Author(id="@a:x"),
        )
        await store.add_message(other)
        assert await store.last_seen("slack", 0) == {T.key: ["1.1", "1.2"]}
        assert await store.last_seen("slack", 2**40) == {}
