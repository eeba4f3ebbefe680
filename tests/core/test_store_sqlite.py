"""The SQLite database under the store (bridge/core/store/sqlite.py)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest

from bridge.core.store.rows import StoreError
from bridge.core.store.sqlite import SqliteDatabase, open_sqlite

if TYPE_CHECKING:
    from bridge.core.store.sqlite import _Write


def test_a_store_closed_by_a_cancellation_is_closed_before_the_loop_ends(tmp_path: Path) -> None:
    """Shutdown cancels the bridge's tasks: the store's close must still finish while the event
    loop runs, or aiosqlite's thread answers a closed loop (and the last checkpoint is lost)."""
    errors: list[BaseException | None] = []
    workers: list[threading.Thread] = []

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with open_sqlite(tmp_path / "store.sqlite3") as db:
                workers.append(db.conn._thread)  # aiosqlite's worker, to wait for below
                await db.execute("CREATE TABLE t (x INTEGER)")
                await db.execute("INSERT INTO t VALUES (1)")
                scope.cancel()  # lands on the close at the block's end

    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        anyio.run(main)
        workers[0].join(30)
    finally:
        threading.excepthook = previous
    assert not workers[0].is_alive()
    assert errors == []


# --- group commit -----------------------------------------------------------------------------


class Transactions:
    """Counts the transactions SQLite runs, from its statement trace: an explicit one from its
    BEGIN to its COMMIT or ROLLBACK, and each write outside one (its own, in autocommit)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, statement: str) -> None:
        self.statements.append(statement.strip().upper())

    @property
    def count(self) -> int:
        found, explicit = 0, False
        for statement in self.statements:
            if statement.startswith("BEGIN"):
                found, explicit = found + 1, True
            elif statement.startswith(("COMMIT", "ROLLBACK")):
                explicit = False
            elif not explicit and statement.startswith(("INSERT", "UPDATE", "DELETE")):
                found += 1
        return found

    @property
    def groups(self) -> int:
        return sum(statement.startswith("BEGIN") for statement in self.statements)


async def _traced(db: SqliteDatabase) -> Transactions:
    await db.execute("CREATE TABLE t (x INTEGER PRIMARY KEY, note TEXT)")
    trace = Transactions()
    await db.conn.set_trace_callback(trace)
    return trace


async def _values(db: SqliteDatabase) -> list[int]:
    return [row["x"] for row in await db.fetch("SELECT x FROM t ORDER BY x")]


async def _write_at_once(
    db: SqliteDatabase,
    count: int,
    statement: Callable[[int], tuple[str, tuple[Any, ...]]],
    error: str,
) -> list[int]:
    """``count`` writes made at once (``statement(i)``: the SQL and its parameters); which
    failed, each with a StoreError naming ``error``."""
    failed: list[int] = []

    async def write(index: int) -> None:
        try:
            await db.execute(*statement(index))
        except StoreError as exc:
            assert error in str(exc)
            failed.append(index)

    async with anyio.create_task_group() as tg:
        for index in range(count):
            tg.start_soon(write, index)
    return sorted(failed)


def test_writes_made_together_share_a_commit(tmp_path: Path) -> None:
    """Fifty writes at once: the first commits alone, the rest wait and commit together; each
    caller returns its own result once its statement is committed."""
    results: dict[int, object] = {}

    async def main() -> None:
        async with open_sqlite(tmp_path / "store.sqlite3") as db:
            trace = await _traced(db)

            async def write(x: int) -> None:
                if x % 2:
                    results[x] = await db.execute("INSERT INTO t (x) VALUES (?)", (x,))
                else:
                    rows = await db.execute_returning(
                        "INSERT INTO t (x) VALUES (?) RETURNING x", (x,)
                    )
                    results[x] = rows
                # Committed when the call returns: another connection sees it.
                with sqlite3.connect(tmp_path / "store.sqlite3") as other:
                    assert other.execute("SELECT 1 FROM t WHERE x = ?", (x,)).fetchone()

            async with anyio.create_task_group() as tg:
                for x in range(50):
                    tg.start_soon(write, x)
            assert await _values(db) == list(range(50))
            assert trace.count <= 3, trace.statements
            assert trace.groups >= 1

    anyio.run(main)
    assert results == {x: 1 if x % 2 else [{"x": x}] for x in range(50)}


def test_a_write_alone_is_one_statement(tmp_path: Path) -> None:
    """Nothing else waiting: no BEGIN and COMMIT around it (one call into aiosqlite, not three)."""

    async def main() -> None:
        async with open_sqlite(tmp_path / "store.sqlite3") as db:
            trace = await _traced(db)
            assert await db.execute("INSERT INTO t (x) VALUES (1)") == 1
            assert await db.execute("UPDATE t SET note = 'a' WHERE x = 1") == 1
            assert trace.groups == 0
            assert trace.count == 2

    anyio.run(main)


def test_a_failing_write_fails_only_its_own_caller(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_sqlite(tmp_path / "store.sqlite3") as db:
            trace = await _traced(db)
            await db.execute("INSERT INTO t (x) VALUES (7)")
            failed = await _write_at_once(
                db, 20, lambda x: ("INSERT INTO t (x) VALUES (?)", (x,)), "UNIQUE"
            )
            assert failed == [7]
            assert trace.groups >= 1  # the duplicate was in a group with others
            assert await _values(db) == list(range(20))

    anyio.run(main)


def test_a_group_whose_commit_fails_commits_each_write_on_its_own(tmp_path: Path) -> None:
    """A deferred foreign key fails at COMMIT, for the whole group: every write is then tried
    alone, so only the faulty one fails."""

    async def main() -> None:
        async with open_sqlite(tmp_path / "store.sqlite3") as db:
            await db.conn.execute("PRAGMA foreign_keys = ON")
            await db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
            await db.execute(
                "CREATE TABLE child (x INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent (id)"
                " DEFERRABLE INITIALLY DEFERRED)"
            )
            await db.execute("INSERT INTO parent (id) VALUES (1)")
            trace = Transactions()
            await db.conn.set_trace_callback(trace)
            failed = await _write_at_once(
                db,
                12,
                # Writer 5 names a parent that does not exist.
                lambda x: ("INSERT INTO child (x, parent) VALUES (?, ?)", (x, 2 if x == 5 else 1)),
                "FOREIGN KEY",
            )
            assert failed == [5]
            assert "ROLLBACK" in trace.statements
            rows = await db.fetch("SELECT x FROM child ORDER BY x")
            assert [row["x"] for row in rows] == [x for x in range(12) if x != 5]

    anyio.run(main)


def test_a_full_database_fails_only_the_write_that_does_not_fit(tmp_path: Path) -> None:
    """SQLite may roll a whole transaction back on a full disk: the writes that fit are still
    committed, each on its own if need be."""

    async def main() -> None:
        async with open_sqlite(tmp_path / "store.sqlite3") as db:
            await _traced(db)
            pages = (await db.fetch("PRAGMA page_count"))[0]["page_count"]
            await db.conn.execute(f"PRAGMA max_page_count = {pages + 8}")
            failed = await _write_at_once(
                db,
                10,
                # Writer 3's note is far larger than the room left.
                lambda x: (
                    "INSERT INTO t (x, note) VALUES (?, ?)",
                    (x, "x" * (200_000 if x == 3 else 10)),
                ),
                "full",
            )
            assert failed == [3]
            assert await _values(db) == [x for x in range(10) if x != 3]

    anyio.run(main)


def test_cancelled_waiting_writers_do_not_stall_the_others(tmp_path: Path) -> None:
    """Callers cancelled while their write waits (a shutdown, a timeout): the others' writes
    are still committed, including when the cancelled one had just been handed the role of
    committing the next group."""
    done: list[int] = []

    async def main() -> None:
        async with open_sqlite(tmp_path / "store.sqlite3") as db:
            await _traced(db)
            scopes = {x: anyio.CancelScope() for x in range(30)}
            successor = db._successor

            def cancel_on_handover() -> _Write | None:
                chosen = successor()
                if chosen is not None and chosen.params == (1,):
                    scopes[1].cancel()  # lands as the role is handed to writer 1
                return chosen

            db._successor = cancel_on_handover  # type: ignore[method-assign]

            async def write(x: int) -> None:
                with scopes[x]:
                    await db.execute("INSERT INTO t (x) VALUES (?)", (x,))
                    done.append(x)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for x in range(30):
                        tg.start_soon(write, x)
                    while len(db._waiting) < 29:  # writer 0 commits alone, 29 wait
                        await anyio.lowlevel.checkpoint()
                    for x in range(20, 30):
                        scopes[x].cancel()
                assert await db.execute("INSERT INTO t (x) VALUES (100)") == 1
            stored = await _values(db)
            assert set(done) <= set(stored)
            assert set(range(2, 20)) <= set(done)
            assert 1 not in done  # its caller saw the cancellation (its write may be stored)
            assert not db._waiting and not db._committing

    anyio.run(main)


def test_a_store_that_cannot_be_opened_leaves_no_thread_behind(tmp_path: Path) -> None:
    """aiosqlite stops its thread after a failed connect without waiting for it: the open must
    wait, or the thread answers an event loop that has closed meanwhile (an exception in a
    thread, seen in CI)."""
    folder = tmp_path / "a-folder.sqlite3"
    folder.mkdir()
    errors: list[BaseException | None] = []
    before = set(threading.enumerate())

    async def main() -> None:
        with pytest.raises(StoreError, match="cannot open the store"):
            async with open_sqlite(folder):
                pass

    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        # The loop closes as soon as the open has failed: a race the thread loses now and
        # then, so it runs many times.
        for _ in range(100):
            anyio.run(main)
        for thread in set(threading.enumerate()) - before:
            thread.join(30)
    finally:
        threading.excepthook = previous
    assert errors == []
