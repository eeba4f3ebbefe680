"""The one place the bridge reads a private name of aiosqlite: ``Connection._thread``.

After a connect that failed (or was cancelled), aiosqlite stops its worker thread without
waiting for it, and the thread's last act is to answer the event loop it was started from. If
that loop has closed by then (a bridge that cannot open its store gives up soon after), the
thread fails with "Event loop is closed". Waiting for the thread is the only cure, and
aiosqlite offers no public way: since it stopped being a ``Thread`` itself, its thread is the
private ``_thread``, and calling ``stop()`` again would queue work that thread never runs.
When aiosqlite waits for its thread in a failed connect (or exposes it), this module goes.
"""

from __future__ import annotations

import aiosqlite
import anyio.to_thread


async def wait_for_worker(conn: aiosqlite.Connection) -> None:
    """Until ``conn``'s worker thread has ended (it ends as soon as a failed connect's stop is
    handled)."""
    await anyio.to_thread.run_sync(conn._thread.join)
