"""A new SQLite store in a test starts as a copy of one the worker migrated itself.

Every bridge a test opens in its own process opens a new SQLite store, and a new store runs
every migration from the first: 43 statements and 15 version updates, each a hop to
aiosqlite's thread, 10 ms of CPU (1.8 ms to open a store already at :data:`SCHEMA_VERSION`),
hundreds of times a run. The worker migrates one store from nothing with the real code,
closes it (SQLite folds its write-ahead log into the file), and from then on a store opened
where no file is yet starts as a copy of that file; ``open_sqlite`` itself then finds the
schema current and migrates nothing. What the tests see is the same database: the same code
made it.

``bridge.core.store.sqlite.open_sqlite`` as imported elsewhere (``tests/core/test_store_sqlite.py``
tests it directly) is the real one, and a store whose file a test wrote (an older or newer
schema) opens as written. Only ``open_store``'s lookup of the module's attribute, at each
call, sees the copying one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path

import bridge.core.store.sqlite as sqlite_store
from bridge.core.store.sqlite import SqliteDatabase

Opener = Callable[[Path], AbstractAsyncContextManager[SqliteDatabase]]


@contextmanager
def migrated_once(folder: Path) -> Iterator[None]:
    """While this lasts, a store opened where no file is yet is a copy of one migrated once in
    ``folder`` (made at the first such open)."""
    real: Opener = sqlite_store.open_sqlite
    template = folder / "migrated.sqlite3"

    async def made() -> Path:
        if not template.exists():
            building = folder / f"building-{uuid.uuid4().hex}"
            async with real(building / "store.sqlite3"):
                pass
            os.replace(building / "store.sqlite3", template)
            shutil.rmtree(building, ignore_errors=True)
        return template

    @asynccontextmanager
    async def open_sqlite(path: Path) -> AsyncIterator[SqliteDatabase]:
        if not path.exists():
            await _copy(await made(), path)
        async with real(path) as db:
            yield db

    sqlite_store.open_sqlite = open_sqlite
    try:
        yield
    finally:
        sqlite_store.open_sqlite = real


async def _copy(template: Path, path: Path) -> None:
    """``template`` to ``path`` unless a file got there first; a folder the test made
    unwritable is left to ``open_sqlite``, whose error the test expects."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # as open_sqlite does first
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    try:
        os.close(fd)
        shutil.copyfile(template, partial)
        os.link(partial, path)  # not over a file another open made meanwhile
    except OSError:
        pass
    finally:
        os.unlink(partial)
