"""The tests' SQLite stores start as a copy of one the worker migrated (tests/store_template.py):
the copy must be the database the migrations make, and a store a test wrote must open as it
was written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import bridge.core.store.sqlite as sqlite_store
from bridge.core.store.opening import open_store
from bridge.core.store.rows import StoreError
from bridge.core.store.schema import SCHEMA_VERSION
from bridge.core.store.sqlite import open_sqlite as real_open_sqlite

pytestmark = pytest.mark.anyio


def described(path: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]], str]:
    """The schema (every table, index and trigger as written), ``meta``, the journal mode."""
    with sqlite3.connect(path) as db:
        schema = db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
        ).fetchall()
        meta = db.execute("SELECT key, value FROM meta ORDER BY key").fetchall()
        [(mode,)] = db.execute("PRAGMA journal_mode").fetchall()
    return schema, meta, mode


async def test_a_new_store_is_a_copy_of_the_migrated_one_and_the_same_database(
    tmp_path: Path,
) -> None:
    assert sqlite_store.open_sqlite is not real_open_sqlite, "the suite copies a template"
    found: list[str] = []  # the schema version open_sqlite found before it migrated
    migrate = sqlite_store.migrate

    async def checked(db: sqlite_store.SqliteDatabase) -> None:
        rows = await db.fetch("SELECT value FROM meta WHERE key = 'schema_version'")
        found.append(rows[0]["value"])
        await migrate(db)

    async with open_store(tmp_path / "first" / "store.sqlite3"):
        pass  # the worker's template is made by now
    async with real_open_sqlite(tmp_path / "migrated" / "store.sqlite3"):
        pass
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite_store, "migrate", checked)
        async with open_store(tmp_path / "copied" / "store.sqlite3") as store:
            await store.database.execute("SELECT 1")
    assert found == [str(SCHEMA_VERSION)]  # a copy, which open_sqlite still checked
    copied = described(tmp_path / "copied" / "store.sqlite3")
    assert copied == described(tmp_path / "migrated" / "store.sqlite3")
    assert ("schema_version", str(SCHEMA_VERSION)) in copied[1]
    assert copied[2] == "wal"
    assert [p.name for p in (tmp_path / "copied").iterdir() if p.name.startswith(".")] == []


async def test_a_store_a_test_wrote_opens_as_written(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    with pytest.raises(StoreError, match="newer"):
        async with open_store(path):
            pass
