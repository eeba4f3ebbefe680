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
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

from bridge.core.store import Row, StoreError, migrate

TYPES = {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL"}


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

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return await self._rows(sql, params, "could not read the store")

    async def _rows(self, sql: str, params: Sequence[Any], failure: str) -> list[Row]:
        async with self.lock:
            try:
                return [dict(r) for r in await self.conn.execute_fetchall(sql, params)]
            except sqlite3.Error as exc:
                raise StoreError(f"{failure}: {exc}") from exc

    # A single write statement: autocommit makes it a transaction of its own, committed (and
    # synced) when it completes; the lock keeps it out of another task's open transaction.

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self.lock:
            try:
                cursor = await self.conn.execute(sql, params)
                return max(cursor.rowcount, 0)
            except sqlite3.Error as exc:
                raise StoreError(f"could not write to the store: {exc}") from exc

    async def execute_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        # All rows read: the statement is complete, so it is committed.
        return await self._rows(sql, params, "could not write to the store")

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
                raise StoreError(f"could not write to the store: {exc}") from exc
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
    try:
        conn = await aiosqlite.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store at {path}: {exc}") from exc
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
