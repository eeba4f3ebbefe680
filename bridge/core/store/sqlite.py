"""The store's SQLite database through aiosqlite: one file under the data directory (WAL).

One connection serves every task, behind a lock: without it a write from one task would land
inside another task's open transaction (or BEGIN inside BEGIN would fail). ``BEGIN IMMEDIATE``
takes the database's write lock up front, so a transaction that reads and then changes rows
needs no row locks.

Every call into aiosqlite is a hop to its thread and back (a queue put, a wake-up, a callback on
the event loop), so the store makes as few as it can: a statement and its rows are one call
(``execute_fetchall``), and a single statement runs in SQLite's autocommit mode, where it is
its own transaction (its write lock taken at its start, as ``BEGIN IMMEDIATE`` would), instead
of three calls (``BEGIN``, the statement, ``COMMIT``).

Single statements written while another is on its way commit together (group commit): each
commit is a sync of the database file, the costliest part of a write on a disk, and in a
burst (many turns ending at once, a channel's messages arriving together) one sync can cover
dozens of writes. A caller still returns only once its own statement is committed.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

from bridge.core.store.aiosqlite_private import wait_for_worker
from bridge.core.store.rows import Row, StoreError
from bridge.core.store.schema import migrate

TYPES = {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL"}
WRITE_FAILED = "could not write to the store"
# The most single statements one commit covers: a group holds the database's lock for all of
# them (a few milliseconds at most), and reads and transactions wait behind it.
GROUP_LIMIT = 100


@dataclass(eq=False)
class _Write:
    """One caller's single statement, waiting to be committed with whatever else is waiting."""

    sql: str
    params: Sequence[Any]
    returning: bool
    wake: anyio.Event = field(default_factory=anyio.Event)
    done: bool = False
    # Handed the committer's role: commit the next group (this statement among them).
    lead: bool = False
    # The caller was cancelled while waiting: the statement still runs, but nobody is there
    # to commit the group after it.
    abandoned: bool = False
    rows: list[Row] = field(default_factory=list)
    count: int = 0
    error: StoreError | None = None

    def outcome(self) -> list[Row] | int:
        if self.error is not None:
            raise self.error
        return self.rows if self.returning else self.count


class SqliteTx:
    def __init__(self, conn: aiosqlite.Connection):
        self._conn = conn

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [dict(r) for r in await self._conn.execute_fetchall(sql, params)]

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = await self._conn.execute(sql, params)
        return max(cursor.rowcount, 0)

    async def notify(self, channel: str, payload: str) -> None:
        """One process is the only reader: the core wakes its own workers."""


class SqliteDatabase:
    types = TYPES
    for_update = ""
    shared = False

    def __init__(self, conn: aiosqlite.Connection, path: Path):
        self.conn = conn
        # fast_acquire: a free lock is taken without a pass through the event loop (anyio's
        # default yields there, once per store call); the call into aiosqlite right after
        # yields anyway, so no task is kept from running.
        self.lock = anyio.Lock(fast_acquire=True)
        self.where = f"sqlite:///{path}"
        self._waiting: deque[_Write] = deque()
        self._committing = False

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return await self._rows(sql, params, "could not read the store")

    async def _rows(self, sql: str, params: Sequence[Any], failure: str) -> list[Row]:
        async with self.lock:
            try:
                return [dict(r) for r in await self.conn.execute_fetchall(sql, params)]
            except sqlite3.Error as exc:
                raise StoreError(f"{failure}: {exc}") from exc

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        count = await self._write(_Write(sql, params, returning=False))
        assert isinstance(count, int)
        return count

    async def execute_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        rows = await self._write(_Write(sql, params, returning=True))
        assert isinstance(rows, list)
        return rows

    # --- group commit ------------------------------------------------------------------------
    # One caller at a time is the committer: it commits every statement waiting (up to
    # GROUP_LIMIT) in one transaction, then hands the role to the first caller still waiting,
    # whose statement is in the next group. The first of a quiet moment commits alone, in
    # autocommit (one call into aiosqlite, as before); the callers that arrive meanwhile form
    # the next group.

    async def _write(self, write: _Write) -> list[Row] | int:
        self._waiting.append(write)
        if self._committing:
            try:
                while not write.done and not write.lead:
                    await write.wake.wait()
                    write.wake = anyio.Event()
            except BaseException:
                # A cancelled caller handed the role must still commit the others.
                if write.lead:
                    await self._commit_groups(write)
                else:
                    write.abandoned = True
                raise
            if write.done:
                return write.outcome()
        self._committing = True
        await self._commit_groups(write)
        return write.outcome()

    async def _commit_groups(self, own: _Write) -> None:
        """Commit groups until ``own`` is committed, then hand the role on (or give it up)."""
        # Shielded: callers waiting on these groups depend on this task finishing them.
        with anyio.CancelScope(shield=True):
            try:
                while not own.done or (self._waiting and not self._successor()):
                    group = [
                        self._waiting.popleft() for _ in range(min(GROUP_LIMIT, len(self._waiting)))
                    ]
                    try:
                        await self._commit(group)
                    except Exception as exc:  # not SQLite's (a closed connection): all fail
                        for write in group:
                            write.error = StoreError(f"{WRITE_FAILED}: {exc}")
                            write.error.__cause__ = exc
                    for write in group:
                        write.done = True
                        write.wake.set()
            finally:
                successor = self._successor()
                if successor is None:
                    self._committing = False
                else:
                    successor.lead = True
                    successor.wake.set()

    def _successor(self) -> _Write | None:
        return next((w for w in self._waiting if not w.abandoned), None)

    async def _commit(self, group: list[_Write]) -> None:
        """Run and commit ``group``; each write's outcome is as if it had been alone."""
        async with self.lock:
            if len(group) > 1:
                try:
                    await self.conn.execute("BEGIN IMMEDIATE")
                    for write in group:
                        await self._run(write)
                        if not self.conn.in_transaction:
                            # The error rolled the whole transaction back (a full disk, an I/O
                            # error): what ran before it is gone too.
                            raise sqlite3.OperationalError("transaction rolled back")
                    await self.conn.commit()
                    return
                except sqlite3.Error:
                    await self._rollback()
                    # Nothing of the group is committed: each statement on its own decides
                    # its own outcome (one statement's fault must not fail the others).
                    for write in group:
                        write.error = None
            for write in group:
                await self._run(write)

    async def _run(self, write: _Write) -> None:
        try:
            if write.returning:
                write.rows = [
                    dict(r) for r in await self.conn.execute_fetchall(write.sql, write.params)
                ]
            else:
                cursor = await self.conn.execute(write.sql, write.params)
                write.count = max(cursor.rowcount, 0)
        except sqlite3.Error as exc:
            # Inside a group SQLite backs out just this statement (the transaction goes on).
            write.error = StoreError(f"{WRITE_FAILED}: {exc}")
            write.error.__cause__ = exc

    async def ping(self) -> bool:
        try:
            await self.fetch("SELECT 1")
            return True
        except StoreError:
            return False

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqliteTx]:
        async with self.lock:
            try:
                await self.conn.execute("BEGIN IMMEDIATE")
                yield SqliteTx(self.conn)
                await self.conn.commit()
            except sqlite3.Error as exc:
                await self._rollback()
                raise StoreError(f"{WRITE_FAILED}: {exc}") from exc
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._rollback()
                raise

    async def _rollback(self) -> None:
        try:
            await self.conn.rollback()
        except sqlite3.Error:
            pass


@asynccontextmanager
async def open_sqlite(path: Path) -> AsyncIterator[SqliteDatabase]:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = aiosqlite.connect(path, isolation_level=None)
    try:
        await conn
    except BaseException as exc:
        # aiosqlite stops its thread after a failed (or cancelled) connect without waiting for
        # it; the thread then answers this event loop, which must still be running (it closes
        # soon after a bridge that cannot open its store gives up).
        with anyio.CancelScope(shield=True):
            await wait_for_worker(conn)
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot open the store at {path}: {exc}") from exc
        raise
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        await conn.execute("PRAGMA busy_timeout=5000")
        db = SqliteDatabase(conn, path)
        await migrate(db)
        yield db
    finally:
        # Whole even when shutdown cancels us: aiosqlite's thread must answer a live event loop.
        with anyio.CancelScope(shield=True):
            await conn.close()
