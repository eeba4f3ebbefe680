"""Thread leases on PostgreSQL: claimed once, renewed, taken over when lapsed, lost, released."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.core.events import ApprovalChoice, Author
from bridge.core.leases import (
    CONTROL_CHANNEL,
    CommandTooLong,
    LocalLeases,
    SharedLeases,
    open_leases,
)
from bridge.core.store import Store
from bridge.core.store.opening import open_store
from bridge.core.store.postgres import PostgresDatabase
from bridge.core.thread import wire
from bridge.core.thread.commands import Decide, Stop
from tests.pg import Postgres

pytestmark = pytest.mark.anyio
KEY = "slack|C1|1.0"


async def lapse(store: Store) -> None:
    async with store.database.transaction() as tx:
        await tx.execute("UPDATE leases SET expires_at = 0")


async def test_a_lease_is_held_by_one_instance_and_taken_over_once_lapsed(
    postgres: Postgres,
) -> None:
    url = postgres.new_database()
    async with open_store(url) as store_a, open_store(url) as store_b:
        a, b = SharedLeases(store_a, "a", 30), SharedLeases(store_b, "b", 30)
        first = await a.claim(KEY)
        assert first.granted and first.previous is None
        assert not (await b.claim(KEY)).granted, "a live lease is not taken"
        assert (await a.claim(KEY)).granted, "the holder renews its own"
        assert await b.holder(KEY) == "a"

        await lapse(store_a)
        assert await a.holder(KEY) is None
        taken = await b.claim(KEY)
        assert taken.granted and taken.previous == a.owner
        assert await a._renew([KEY]) == {KEY}, "a learns it lost the thread"
        assert await b._renew([KEY]) == set()

        await a.release(KEY)
        assert await a.holder(KEY) == "b", "releasing someone else's lease does nothing"
        await b.release(KEY)
        assert await a.holder(KEY) is None


async def test_renewal_puts_back_a_lease_removed_under_its_holder(postgres: Postgres) -> None:
    async with open_store(postgres.new_database()) as store:
        a = SharedLeases(store, "a", 30)
        assert (await a.claim(KEY)).granted
        async with store.database.transaction() as tx:
            await tx.execute("DELETE FROM leases")
        assert await a._renew([KEY]) == set()
        assert await a.holder(KEY) == "a"


async def test_a_restarted_instance_waits_for_its_old_leases_like_any_other(
    postgres: Postgres,
) -> None:
    async with open_store(postgres.new_database()) as store:
        old, new = SharedLeases(store, "a", 30), SharedLeases(store, "a", 30)
        assert old.owner != new.owner and old.name == new.name
        assert (await old.claim(KEY)).granted
        assert not (await new.claim(KEY)).granted


@asynccontextmanager
async def two_instances(
    url: str,
    channels: list[str],
    on_message: Callable[[SharedLeases], Callable[[str, str], None]],
) -> AsyncIterator[tuple[SharedLeases, SharedLeases]]:
    """Instances a and b on one database; a listens on ``channels`` (``on_message(a)`` hears
    each notification) from before the block starts until it ends."""
    listening = anyio.Event()

    async def ready() -> None:
        listening.set()

    async with open_store(url) as store_a, open_store(url) as store_b:
        a, b = SharedLeases(store_a, "a", 30), SharedLeases(store_b, "b", 30)
        db = store_a.database
        assert isinstance(db, PostgresDatabase)
        async with anyio.create_task_group() as tg:
            tg.start_soon(db.listen, channels, on_message(a), ready)
            await listening.wait()
            yield a, b
            tg.cancel_scope.cancel()


async def test_control_requests_reach_the_listening_instance(postgres: Postgres) -> None:
    heard: list[tuple[str, str]] = []
    async with two_instances(
        postgres.new_database(),
        [CONTROL_CHANNEL, Store.INBOX_CHANNEL],
        lambda a: lambda channel, payload: heard.append((channel, payload)),
    ) as (a, b):
        await b.send_control(KEY, wire.encode(KEY, Stop(Author(id="U0BOB"))))
        await b.announce(KEY)
        with anyio.fail_after(10):
            while len(heard) < 2:
                await anyio.sleep(0.02)
    assert heard[0][0] == CONTROL_CHANNEL and '"kind": "stop"' in heard[0][1]
    assert heard[1] == (Store.INBOX_CHANNEL, KEY)
    assert a.name == "a"


async def test_sqlite_means_one_instance_and_no_lease_queries(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/db.sqlite3") as store:
        leases = open_leases(store, "solo", 30)
        assert isinstance(leases, LocalLeases) and not leases.shared
        assert (await leases.claim(KEY)).granted
        assert await leases.holder(KEY) is None


class Heard:
    """The lease events of one instance, recorded."""

    def __init__(self) -> None:
        self.controls: list[str] = []

    def held(self) -> list[str]:
        return []

    def lost(self, key: str) -> None:
        pass

    def stored(self, key: str) -> None:
        pass

    def control(self, payload: str) -> None:
        self.controls.append(payload)

    async def orphaned(self, keys: Any) -> None:
        pass


async def test_an_approval_decision_reaches_the_other_instance_whole(postgres: Postgres) -> None:
    bob = Author(id="U0BOB", display_name="Bob", org="T1")
    decision = Decide("1.5", ApprovalChoice.DENY, bob, "use the staging db")
    heard = Heard()
    async with two_instances(
        postgres.new_database(),
        [CONTROL_CHANNEL],
        lambda a: lambda channel, payload: a._heard(heard, channel, payload),
    ) as (_, b):
        await b.send_control(KEY, wire.encode(KEY, decision))
        with anyio.fail_after(10):
            while not heard.controls:
                await anyio.sleep(0.02)
        [payload] = heard.controls
        assert wire.decode(payload) == wire.Envelope(KEY, decision)
        # A command too long for one notification is refused before anything is sent.
        long = Decide("1.5", ApprovalChoice.DENY, bob, "x" * 8000)
        with pytest.raises(CommandTooLong):
            await b.send_control(KEY, wire.encode(KEY, long))
