"""The SQLite database under the store (bridge/core/store_sqlite.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio

from bridge.core.store_sqlite import open_sqlite


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
