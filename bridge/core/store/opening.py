"""Opening the store a URL names: SQLite (the default, one instance) or PostgreSQL (several).

Apart from :mod:`bridge.core.store` so that the store does not import the two backends (which
build on its rows and migrations, :mod:`bridge.core.store.rows` and
:mod:`bridge.core.store.schema`): this module is the only one that knows both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bridge.core.store import Store, is_shared
from bridge.core.store.rows import StoreError


@asynccontextmanager
async def open_store(where: str | Path) -> AsyncIterator[Store]:
    """Open (and migrate) the store at a ``sqlite:///…`` or ``postgresql://…`` URL, or a path.

    A path is a SQLite file. The PostgreSQL driver is imported only when one is configured.
    """
    url = str(where)
    if is_shared(url):
        from bridge.core.store.postgres import open_postgres

        async with open_postgres(url) as pg:
            yield Store(pg)
        return
    if url.startswith("sqlite://"):
        path = Path(url.removeprefix("sqlite://"))
    elif "://" in url:
        raise StoreError(
            f"unknown store URL {url.split('://')[0]}://…: use sqlite:///path or postgresql://…"
        )
    else:
        path = Path(url)
    from bridge.core.store.sqlite import open_sqlite

    async with open_sqlite(path) as db:
        yield Store(db)
