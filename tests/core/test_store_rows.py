"""The store's rows read back field by field, and the edges of its state changes (requeues that
only move what they may, turns ended once, approvals and allow lists, history limits), on
SQLite. The contract on both databases is ``test_store.py``'s; these are the details mutation
testing found unpinned (docs/testing.md).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bridge.config import build_config
from bridge.core import store as st
from bridge.core.events import AttachmentRef, Author, IncomingMessage, ThreadRef
from bridge.core.store import is_shared, store_url
from bridge.core.store.opening import open_store
from bridge.core.store.rows import StoreError
from bridge.core.store.schema import migration_statements
from bridge.core.store.sqlite import TYPES, SqliteDatabase

pytestmark = pytest.mark.anyio
T = ThreadRef(platform="slack", channel="C1", thread="1.0")
OTHER = ThreadRef(platform="slack", channel="C1", thread="2.0")
ALICE = Author(id="U1", display_name="Alice")
BOB = Author(id="U2", display_name="Bob")


def msg(
    event: str,
    text: str = "hi",
    where: ThreadRef = T,
    attachments: list[AttachmentRef] | None = None,
    author: Author = ALICE,
) -> IncomingMessage:
    return IncomingMessage(
        thread=where,
        event_id=event,
        message_id=f"mid-{event}",
        author=author,
        text=text,
        attachments=attachments or [],
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "db.sqlite3"


async def inbox(store: st.Store) -> list[dict[str, object]]:
    return [dict(r) for r in await store.database.fetch("SELECT * FROM inbox ORDER BY id")]


async def test_a_stored_message_reads_back_field_by_field(db_path: Path) -> None:
    ref = AttachmentRef(name="a.png", mimetype="image/png", size=3, source="src")
    async with open_store(db_path) as store:
        row_id = await store.add_message(msg("e1", "hello", attachments=[ref]))
        assert row_id == 1
        assert await store.add_message(msg("e2", "second")) == 2
        [first, second] = await store.pending(T.key)
        assert first.id == 1 and first.thread_key == T.key and first.message_id == "mid-e1"
        assert first.author == ALICE and first.text == "hello"
        assert first.attachments == [ref] and first.saved is None and not first.ready
        assert first.state is st.MessageState.PENDING and first.received_at > 0
        assert second.attachments == [] and second.ready
        [row, _] = await inbox(store)
        assert row["event_key"] == "slack:e1", "events are unique per platform"
        assert row["turn_id"] is None and row["delivered_at"] is None
        # The same event id on another platform is another message.
        other = msg("e1").model_copy(
            update={"thread": ThreadRef(platform="matrix", channel="!r", thread="$t")}
        )
        assert await store.add_message(other) == 3


async def test_a_command_is_stored_but_never_pending(db_path: Path) -> None:
    async with open_store(db_path) as store:
        assert await store.add_message(msg("e1", "!status"), state=st.MessageState.COMMAND)
        assert await store.pending(T.key) == []
        assert not await store.has_pending(T.key)
        assert await store.threads_with_pending() == []
        await store.add_message(msg("e2", "real"))
        assert await store.has_pending(T.key)
        assert not await store.has_pending(OTHER.key)


async def test_threads_with_pending_lists_each_once_in_order(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_message(msg("e1", where=OTHER))
        await store.add_message(msg("e2", where=T))
        await store.add_message(msg("e3", where=OTHER))
        assert await store.threads_with_pending() == sorted([T.key, OTHER.key])
        await store.take_turn(OTHER.key, "c")
        assert await store.threads_with_pending() == [T.key]


async def test_take_turn_records_who_and_when(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_message(msg("e1"))
        await store.add_message(msg("e2", where=OTHER))
        taken = await store.take_turn(T.key, "conv-9", owner="inst-a")
        assert taken is not None
        turn_id, [message] = taken
        assert message.state is st.MessageState.IN_TURN
        [turn] = await store.running_turns()
        assert (turn.id, turn.thread_key, turn.conversation_id, turn.owner) == (
            turn_id,
            T.key,
            "conv-9",
            "inst-a",
        )
        assert turn.state is st.TurnState.RUNNING and turn.started_at > 0
        rows = await inbox(store)
        assert rows[0]["state"] == st.MessageState.IN_TURN and rows[0]["turn_id"] == turn_id
        assert rows[0]["delivered_at"] is not None
        assert rows[1]["state"] == "pending", "another thread's message stays"
        assert await store.running_turns(T.key) == [turn]
        assert await store.running_turns(OTHER.key) == []


async def test_take_pending_marks_the_turn_and_the_time(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_message(msg("e1"))
        await store.add_message(msg("e2", where=OTHER))
        [taken] = await store.take_pending(T.key, st.MessageState.INJECTED, 5, ready_only=True)
        assert taken.state is st.MessageState.INJECTED
        rows = await inbox(store)
        assert (rows[0]["state"], rows[0]["turn_id"]) == ("injected", 5)
        assert rows[0]["delivered_at"] is not None
        assert rows[1]["state"] == "pending"
        failed = await store.take_pending(OTHER.key, st.MessageState.FAILED, None, ready_only=False)
        assert [m.state for m in failed] == [st.MessageState.FAILED]


async def test_take_pending_without_ready_only_takes_unsaved_files_too(db_path: Path) -> None:
    ref = AttachmentRef(name="a.png", source="x")
    async with open_store(db_path) as store:
        await store.add_message(msg("e1", attachments=[ref]))
        await store.add_message(msg("e2"))
        taken = await store.take_pending(T.key, st.MessageState.FAILED, None, ready_only=False)
        assert [m.message_id for m in taken] == ["mid-e1", "mid-e2"]


async def test_requeues_move_only_what_they_may(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_message(msg("e1", "in turn"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        turn_id = taken[0]
        await store.add_message(msg("e2", "injected"))
        [injected] = await store.take_pending(
            T.key, st.MessageState.INJECTED, turn_id, ready_only=True
        )
        # requeue_turn moves the turn's own messages, not those injected into it.
        assert await store.requeue_turn(turn_id) == 1
        rows = await inbox(store)
        assert (rows[0]["state"], rows[0]["turn_id"], rows[0]["delivered_at"]) == (
            "pending",
            None,
            None,
        )
        assert rows[1]["state"] == "injected"
        assert await store.requeue_turn(turn_id) == 0
        # requeue_injected moves injected messages only, once.
        assert await store.requeue_injected([injected.id, rows[0]["id"]]) == 1  # type: ignore[list-item]
        rows = await inbox(store)
        assert [(r["state"], r["turn_id"], r["delivered_at"]) for r in rows] == [
            ("pending", None, None),
            ("pending", None, None),
        ]
        assert await store.requeue_injected([injected.id]) == 0
        assert await store.requeue_injected([]) == 0


async def test_saved_files_are_kept_with_the_message(db_path: Path) -> None:
    ref = AttachmentRef(name="a.png", source="x")
    async with open_store(db_path) as store:
        row_id = await store.add_message(msg("e1", attachments=[ref]))
        assert row_id is not None
        await store.set_saved(row_id, ["/files/a.png", "b: too large"])
        [message] = await store.pending(T.key)
        assert message.saved == ["/files/a.png", "b: too large"] and message.ready
        await store.set_saved(row_id, [])
        [message] = await store.pending(T.key)
        assert message.saved == [] and message.ready, "nothing saved is still decided"


async def test_a_turn_is_finished_with_what_it_said_and_ended_once(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_message(msg("e1"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        turn_id = taken[0]
        usage = st.Usage(input_tokens=1, output_tokens=2, total_tokens=3)
        await store.finish_turn(
            turn_id, st.TurnState.ERROR, error="boom", response="part\x00ial", usage=usage
        )
        [row] = await store.database.fetch("SELECT * FROM turns")
        assert row["state"] == "error" and row["error"] == "boom"
        assert row["response"] == "part\ufffdial" and row["ended_at"] is not None
        assert st.Usage.model_validate_json(row["usage_json"]) == usage
        assert await store.running_turns() == []
        assert not await store.end_running_turn(turn_id, st.TurnState.INTERRUPTED, "late")

        await store.add_message(msg("e2"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        assert await store.end_running_turn(taken[0], st.TurnState.INTERRUPTED, "restarted")
        assert not await store.end_running_turn(taken[0], st.TurnState.INTERRUPTED, "again")
        [_, second] = await store.database.fetch("SELECT * FROM turns ORDER BY id")
        assert (second["state"], second["error"]) == ("interrupted", "restarted")
        assert second["ended_at"] is not None and second["response"] is None


async def test_history_is_the_latest_messages_and_answers_oldest_first(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_message(msg("e0", "!status"), state=st.MessageState.COMMAND)
        await store.add_message(msg("e1", "first", author=BOB))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        await store.finish_turn(taken[0], st.TurnState.DONE, response="")
        await store.add_message(msg("e2", "second"))
        taken = await store.take_turn(T.key, "c")
        assert taken is not None
        await store.finish_turn(taken[0], st.TurnState.DONE, response="answer")
        await store.add_message(msg("e3", "elsewhere", where=OTHER))
        history = await store.history(T.key, 10)
        assert [(who, text) for _, who, text in history] == [
            ("Bob (U2)", "first"),
            ("Alice (U1)", "second"),
            ("agent", "answer"),
        ]
        times = [at for at, _, _ in history]
        assert times == sorted(times)
        assert [text for _, _, text in await store.history(T.key, 2)] == ["second", "answer"]
        assert await store.history(T.key, 0) == []


async def test_a_thread_row_reads_back_and_an_unknown_thread_is_empty(db_path: Path) -> None:
    async with open_store(db_path) as store:
        assert await store.thread(T.key) == st.ThreadRow(key=T.key)
        assert not await store.known_thread(T.key)
        await store.ensure_thread(T)
        await store.ensure_thread(T)
        assert await store.known_thread(T.key) and not await store.known_thread(OTHER.key)
        [row] = await store.database.fetch("SELECT * FROM threads")
        assert (row["platform"], row["channel"], row["thread"]) == ("slack", "C1", "1.0")
        await store.set_conversation(T.key, "conv-1", instance="inst-a")
        await store.set_model(T.key, "model-x")
        thread = await store.thread(T.key)
        assert thread == st.ThreadRow(
            key=T.key, conversation_id="conv-1", model="model-x", conversation_instance="inst-a"
        )
        await store.set_conversation(T.key, None)
        thread = await store.thread(T.key)
        assert thread.conversation_id is None and thread.conversation_instance is None
        await store.set_model(T.key, None)
        assert (await store.thread(T.key)).model is None
        assert (await store.thread(OTHER.key)).model is None


async def test_process_rows_are_replaced_by_group_and_removed(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_process(10, T.key, "m1", owner="inst-a")
        await store.add_process(10, OTHER.key, "m2")
        await store.add_process(11, T.key, "m3")
        rows = sorted(await store.processes(), key=lambda p: p.pgid)
        assert rows == [
            st.ProcessRow(pgid=10, thread_key=OTHER.key, run_marker="m2", owner=None),
            st.ProcessRow(pgid=11, thread_key=T.key, run_marker="m3", owner=None),
        ]
        await store.remove_process(10)
        assert [p.pgid for p in await store.processes()] == [11]


async def test_approvals_are_recorded_decided_once_and_found_by_handle(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_approval("a1", T.key, "run_command", {"CommandLine": "ls"}, "ls", ALICE)
        await store.add_approval("a2", T.key, "write_to_file", {"p": Path("/x")}, "write x", None)
        await store.add_approval("a3", OTHER.key, "run_command", {}, "rm", None)
        await store.set_approval_handle("a1", "h-1")
        one = await store.approval("a1")
        assert one is not None
        assert (one.id, one.thread_key, one.tool, one.args, one.summary) == (
            "a1",
            T.key,
            "run_command",
            {"CommandLine": "ls"},
            "ls",
        )
        assert one.requested_by == ALICE and one.state is st.ApprovalState.WAITING
        assert one.handle == "h-1" and one.decided_by is None and one.reason is None
        assert one.requested_at > 0 and one.decided_at is None
        two = await store.approval("a2")
        assert two is not None and two.args == {"p": "/x"} and two.requested_by is None
        assert await store.approval("nope") is None
        assert await store.approval_by_handle(T.key, "h-1") == one
        assert await store.approval_by_handle(OTHER.key, "h-1") is None
        assert [a.id for a in await store.waiting_approvals()] == ["a1", "a2", "a3"]
        assert [a.id for a in await store.waiting_approvals(T.key)] == ["a1", "a2"]
        assert await store.settle_approval("a1", st.ApprovalState.DENIED, by=BOB, reason="no")
        assert not await store.settle_approval("a1", st.ApprovalState.APPROVED, by=ALICE)
        decided = await store.approval("a1")
        assert decided is not None and decided.state is st.ApprovalState.DENIED
        assert decided.decided_by == BOB and decided.reason == "no"
        assert decided.decided_at is not None
        assert await store.settle_approval("a2", st.ApprovalState.APPROVED)
        plain = await store.approval("a2")
        assert plain is not None and plain.decided_by is None and plain.reason is None
        assert [a.id for a in await store.waiting_approvals(T.key)] == []
        assert [a.id for a in await store.waiting_approvals()] == ["a3"]


async def test_the_allow_list_keeps_each_pattern_once_in_order(db_path: Path) -> None:
    async with open_store(db_path) as store:
        await store.add_allowed(T.key, "git status", ALICE)
        await store.add_allowed(T.key, "ls", None)
        await store.add_allowed(T.key, "git status", BOB)
        await store.add_allowed(OTHER.key, "rm", None)
        assert await store.allow_list(T.key) == ["git status", "ls"]
        [row, _] = await store.database.fetch(
            "SELECT * FROM approval_allow WHERE thread_key = ? ORDER BY added_at", (T.key,)
        )
        assert Author.model_validate_json(row["added_by_json"]) == ALICE
        assert await store.clear_allowed(T.key) == 2
        assert await store.clear_allowed(T.key) == 0
        assert await store.allow_list(T.key) == []
        assert await store.allow_list(OTHER.key) == ["rm"]


async def test_a_store_that_cannot_be_read_is_a_clear_error(db_path: Path) -> None:
    async with open_store(db_path) as store:
        db = store.database
        assert isinstance(db, SqliteDatabase)
        assert await db.ping()
        assert db.where == f"sqlite:///{db_path}"
        assert not db.shared and db.for_update == ""
        with pytest.raises(StoreError, match=r"^could not read the store: no such table"):
            await db.fetch("SELECT * FROM nowhere")
        with pytest.raises(StoreError, match=r"^could not write to the store: no such table"):
            await db.execute("DELETE FROM nowhere")
        # The failed write was rolled back: the next transaction starts cleanly.
        assert await store.add_message(msg("e1")) == 1


async def test_a_transaction_cut_short_is_rolled_back(db_path: Path) -> None:
    async with open_store(db_path) as store:
        with pytest.raises(RuntimeError):
            async with store.database.transaction() as tx:
                await tx.execute("DELETE FROM meta")
                raise RuntimeError("cut short")
        rows = await store.database.fetch("SELECT value FROM meta")
        assert [r["value"] for r in rows] == [str(st.SCHEMA_VERSION)]
        async with store.database.transaction() as tx:
            assert await tx.execute("UPDATE meta SET value = value") == 1
            assert await tx.execute("DELETE FROM inbox") == 0
            await tx.notify("channel", "payload")  # nothing to tell on SQLite


async def test_a_store_file_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.sqlite3"
    folder.mkdir()
    with pytest.raises(StoreError, match=r"cannot open the store at .*a-folder.sqlite3"):
        async with open_store(folder):
            pass


async def test_open_store_takes_a_url_or_a_path_and_sets_up_sqlite(tmp_path: Path) -> None:
    for where in (f"sqlite:///{tmp_path / 'a' / 'db.sqlite3'}", tmp_path / "b" / "db.sqlite3"):
        async with open_store(where) as store:
            assert await store.add_message(msg("e1")) == 1
    with sqlite3.connect(tmp_path / "a" / "db.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == (str(st.SCHEMA_VERSION),)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"threads", "inbox", "turns", "processes", "leases", "approvals"} <= tables
        columns = {r[1] for r in conn.execute("PRAGMA table_info(threads)")}
        assert "workdir" not in columns and "conversation_instance" in columns
    with pytest.raises(StoreError, match=r"^unknown store URL mysql://…: use sqlite:///path"):
        async with open_store("mysql://db/bridge"):
            pass


async def test_a_store_of_an_older_schema_is_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        for statement in migration_statements(1, TYPES):
            conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        conn.execute(
            "INSERT INTO threads (key, platform, channel, thread, conversation_id, created_at,"
            " updated_at) VALUES (?, 'slack', 'C1', '1.0', 'conv-old', 1, 1)",
            (T.key,),
        )
    async with open_store(path) as store:
        assert (await store.thread(T.key)).conversation_id == "conv-old"
        await store.add_allowed(T.key, "ls", None)
        assert await store.allow_list(T.key) == ["ls"]


def test_migrations_fill_in_the_databases_types() -> None:
    statements = migration_statements(1, {"id": "SERIAL PRIMARY KEY", "real": "DOUBLE PRECISION"})
    assert len(statements) == 6
    assert all(s == s.strip() and s for s in statements)
    assert "id SERIAL PRIMARY KEY" in statements[1]
    assert "{" not in json.dumps(statements)
    assert len(migration_statements(2, TYPES)) == 2


def test_the_store_url_is_configured_or_under_the_data_directory(tmp_path: Path) -> None:
    config = build_config({"bridge": {"data_dir": str(tmp_path)}}, environ={})
    assert store_url(config) == f"sqlite:///{(tmp_path / 'bridge.sqlite3').resolve()}"
    shared = build_config(
        {"bridge": {"data_dir": str(tmp_path)}, "store": {"url": "postgresql://u@h/db"}},
        environ={},
    )
    assert store_url(shared) == "postgresql://u@h/db"
    assert is_shared("postgresql://h/db") and is_shared("postgres://h/db")
    assert not is_shared("sqlite:///x") and not is_shared("/var/postgresql://x")


async def test_ping_says_false_when_the_store_cannot_be_read(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_store(db_path) as store:
        db = store.database
        assert await db.ping()

        async def unreadable(*args: object) -> list[st.Row]:
            raise StoreError("could not read the store: disk I/O error")

        monkeypatch.setattr(db, "fetch", unreadable)
        assert await db.ping() is False
