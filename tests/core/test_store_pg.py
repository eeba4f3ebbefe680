"""The PostgreSQL database under cancellation: a task cancelled while its statement runs (a
worker whose lease is lost, a bridge stopping) leaves a healthy connection in the pool.

psycopg answers a cancelled await by cancelling the query on the server and waiting for that;
anyio cancels again at every await, so that wait is interrupted too, and psycopg then closes the
connection ("query cancellation interrupted") and the pool throws it away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import pytest

from bridge.core.store import postgres as store_pg
from bridge.core.store.postgres import PostgresDatabase, open_postgres
from bridge.core.store.rows import StoreError
from tests.pg import Postgres

pytestmark = pytest.mark.anyio

SLOW = "SELECT pg_sleep(0.5)"


async def running_on_the_server(db: PostgresDatabase, sql: str) -> None:
    """Until ``sql`` runs on the server (its task is then inside the statement)."""
    with anyio.fail_after(30):
        while not await db.fetch(
            # Only this test's database: other workers' tests share the server.
            "SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND query = ?"
            " AND datname = current_database()",
            (sql,),
        ):
            await anyio.sleep(0.01)


def lost(db: PostgresDatabase) -> int:
    return int(db._pool.get_stats().get("connections_lost", 0))


@pytest.mark.parametrize("in_transaction", [False, True], ids=["statement", "transaction"])
async def test_a_statement_cancelled_midway_ends_cleanly_and_keeps_its_connection(
    postgres: Postgres, caplog: pytest.LogCaptureFixture, in_transaction: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="psycopg")
    async with open_postgres(postgres.new_database()) as db:
        await db.execute("CREATE TABLE marks (n INTEGER)")
        done: list[str] = []

        async def slow() -> None:
            if in_transaction:
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO marks VALUES (1)")
                    await tx.fetch(SLOW)
                    done.append("after the statement")  # not reached: cancelled
            else:
                await db.fetch(SLOW)
                done.append("after the statement")

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await running_on_the_server(db, SLOW)
            tg.cancel_scope.cancel()

        assert done == []
        assert "query cancellation interrupted" not in caplog.text
        assert "discarding closed connection" not in caplog.text
        assert lost(db) == 0
        # A cancelled transaction is rolled back, and the connection serves the next one.
        assert await db.fetch("SELECT n FROM marks") == []
        assert await db.ping()


async def test_a_statement_the_server_does_not_finish_is_given_up_on(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_pg, "STATEMENT_GRACE", 0.3)
    async with open_postgres(postgres.new_database()) as db:
        with pytest.raises(StoreError, match=r"did not answer within 0\.3 s"):
            await db.fetch("SELECT pg_sleep(5)")
        assert await db.ping(), "the pool serves the next statement"


async def test_notifications_are_heard_before_and_after_the_listening_connection_is_lost(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listening connection sleeps until the server sends (no 0.1 s wake-ups of psycopg's
    # notifies()): a notification wakes it, and so does the connection's loss.
    monkeypatch.setattr(store_pg, "RELISTEN_DELAY", 0.05)
    heard: list[str] = []
    listening = 0

    def on_notify(channel: str, payload: str) -> None:
        heard.append(f"{channel}:{payload}")

    async def on_listening() -> None:
        nonlocal listening
        listening += 1

    async def until(condition: Callable[[], bool]) -> None:
        with anyio.fail_after(30):
            while not condition():
                await anyio.sleep(0.01)

    async with open_postgres(postgres.new_database()) as db, anyio.create_task_group() as tg:
        tg.start_soon(db.listen, ["wake"], on_notify, on_listening)
        await until(lambda: listening == 1)
        await db.execute("SELECT pg_notify('wake', 'one')")
        await until(lambda: heard == ["wake:one"])
        await db.execute(
            # Only this test's database: other workers' tests listen on the same server.
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
            " AND datname = current_database()"
        )
        await until(lambda: listening == 2)
        await db.execute("SELECT pg_notify('wake', 'two')")
        await until(lambda: heard == ["wake:one", "wake:two"])
        tg.cancel_scope.cancel()
