"""Invariant 7: the paths the randomised SIGKILL test guards, pinned deterministically.

A bridge killed between two writes that belong together leaves the store half-way; the SIGKILL
test finds that only when a kill happens to land there. Here the second write of each such step
is made to fail (a SQLite trigger on the same database, as a crash at that instant would), and
the store must show all or nothing. Then the store states a kill leaves behind are set up
directly and a start must deal with them: a broken turn reported once and not run again, the
messages that waited still run, nothing delivered twice. And the answer goes to the thread
before the turn is recorded, so a store that fails (or a kill) right then cannot lose it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.store.opening import open_store
from bridge.core.store.rows import MessageState, StoreError
from tests.core.harness import running, thread
from tests.faults.console import sim_conversation_messages
from tests.faults.test_store_faults import refuse_writes, wait_file

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

IN_TURN, INJECTED, PENDING = MessageState.IN_TURN, MessageState.INJECTED, MessageState.PENDING

NOTICE = "The bridge restarted while the agent was working"


def db_path(tmp: Path) -> Path:
    return tmp / "data" / "bridge.sqlite3"


def message(text: str, n: int, where: ThreadRef | None = None) -> IncomingMessage:
    return IncomingMessage(
        thread=where or thread(),
        event_id=f"evt-{n}",
        message_id=f"m{n}",
        author=Author(id="@alice:test", display_name="Alice"),
        text=text,
    )


def crash_on(tmp: Path, sql: str) -> None:
    """A trigger that makes one kind of write fail, as a kill at that moment would stop it."""
    db = sqlite3.connect(db_path(tmp))
    try:
        db.execute(sql)
        db.commit()
    finally:
        db.close()


def rows(tmp: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(db_path(tmp))
    try:
        return list(db.execute(sql))
    finally:
        db.close()


async def test_a_turn_starts_with_its_messages_or_not_at_all(tmp_path: Path) -> None:
    async with open_store(db_path(tmp_path)) as store:
        for n in range(3):
            await store.add_message(message(f"waiting {n}", n))
        crash_on(
            tmp_path,
            "CREATE TRIGGER die BEFORE UPDATE OF state ON inbox WHEN NEW.state = 'turn'"
            " BEGIN SELECT RAISE(ABORT, 'killed here'); END",
        )
        with pytest.raises(StoreError):
            await store.take_turn(thread().key, None)
        assert await store.running_turns() == [], "a turn was left without its messages"
        assert [m.text for m in await store.pending(thread().key)] == [
            "waiting 0",
            "waiting 1",
            "waiting 2",
        ]
        crash_on(tmp_path, "DROP TRIGGER die")
        taken = await store.take_turn(thread().key, None)
        assert taken is not None
        turn_id, messages = taken
        assert [m.state for m in messages] == [IN_TURN] * 3
        assert rows(tmp_path, f"SELECT text FROM inbox WHERE turn_id = {turn_id} ORDER BY id") == [
            ("waiting 0",),
            ("waiting 1",),
            ("waiting 2",),
        ]
        assert [t.id for t in await store.running_turns()] == [turn_id]


async def test_an_injection_takes_every_message_or_none(tmp_path: Path) -> None:
    async with open_store(db_path(tmp_path)) as store:
        for n in range(3):
            await store.add_message(message(f"mid-turn {n}", n))
        # The second message's update fails: the first must not stay taken.
        crash_on(
            tmp_path,
            "CREATE TRIGGER die BEFORE UPDATE OF state ON inbox"
            " WHEN NEW.state = 'injected' AND OLD.message_id = 'm1'"
            " BEGIN SELECT RAISE(ABORT, 'killed here'); END",
        )
        turn_id = 7  # the running turn the hook call belongs to
        with pytest.raises(StoreError):
            await store.take_pending(thread().key, INJECTED, turn_id, ready_only=True)
        assert [m.state for m in await store.pending(thread().key)] == [PENDING] * 3
        crash_on(tmp_path, "DROP TRIGGER die")
        taken = await store.take_pending(thread().key, INJECTED, turn_id, ready_only=True)
        assert [(m.message_id, m.state) for m in taken] == [
            ("m0", INJECTED),
            ("m1", INJECTED),
            ("m2", INJECTED),
        ]
        assert rows(
            tmp_path, f"SELECT message_id FROM inbox WHERE turn_id = {turn_id} ORDER BY id"
        ) == [("m0",), ("m1",), ("m2",)]


async def test_a_start_after_a_kill_mid_turn_reports_it_and_runs_only_what_waited(
    tmp_path: Path,
) -> None:
    # What a kill mid-turn leaves: a running turn holding a message agy may have read, and a
    # message that arrived meanwhile and still waits.
    async with open_store(db_path(tmp_path)) as store:
        await store.ensure_thread(thread())
        await store.add_message(message("was in the broken turn", 1))
        taken = await store.take_turn(thread().key, "conv-from-the-killed-run")
        assert taken is not None
        await store.add_message(message("arrived while it ran", 2))
    async with running(tmp_path) as h:
        [reply] = await h.adapter.wait_finished(1)
        final = reply.outcome.final_text  # type: ignore[union-attr]
        assert "arrived while it ran" in final
        assert "was in the broken turn" not in final, "a broken turn's message runs at most once"
        assert len([n for _, n in h.adapter.notices if NOTICE in n]) == 1
    states = rows(tmp_path, "SELECT message_id, state FROM inbox ORDER BY id")
    assert states == [("m1", IN_TURN), ("m2", IN_TURN)]
    turns = rows(tmp_path, "SELECT state, error FROM turns ORDER BY id")
    assert turns == [
        ("interrupted", "the bridge restarted during this turn"),
        ("done", None),
    ]
    sent = sim_conversation_messages(tmp_path / "sim-home", ["user", "injected"])
    assert sum(t.count("arrived while it ran") for t in sent) == 1
    assert sum(t.count("was in the broken turn") for t in sent) == 0


async def test_the_answer_reaches_the_thread_when_the_turn_cannot_be_recorded(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"work [[calls 2]] [[touch {started}]] [[wait {go}]] [[reply the answer]]")
        await wait_file(started)
        await refuse_writes(h, True)
        go.touch()
        notice = await h.adapter.wait_notice("could not record this turn")
        await refuse_writes(h, False)
        assert "the answer above is all there is of it" in notice
        [reply] = h.adapter.finished()
        assert reply.outcome is not None and reply.outcome.final_text == "the answer\n"
