"""Which instance runs which thread: leases in the shared store, and the wake-ups between them.

With SQLite there is one instance and :class:`LocalLeases` grants every thread at once (no
queries, no tasks). With PostgreSQL, :class:`SharedLeases` keeps one row per active thread
(owner, expiry by the database's clock) in ``leases``:

- a thread is claimed by the instance that stored its message (or that heard of it and has room)
  with ``SELECT … FOR UPDATE SKIP LOCKED``: an instance busy changing the lease is simply not
  waited for; a lease whose expiry passed is taken over, and the taker learns whose it was;
- every lease an instance holds is renewed every third of the lease time; one it finds taken
  by another (it was too slow, the database was away) is reported lost and its worker stops;
- ``NOTIFY`` carries the thread key of a message stored for a thread the storing instance does
  not run (wake the holder, or let an instance with room claim it), and control requests (Stop,
  restart, an approval decision) to whichever instance holds the thread;
- a sweep at the same pace finds threads with waiting messages or a turn left running and no
  live lease (their instance died): those are taken over. A thread whose message was just
  stored by a live instance, before that instance claimed it, looks the same: the sweeping
  instance may run it (the storing one's claim then fails and it announces the message);
- each time listening (re)starts, a notification sent meanwhile may have been missed: the
  sweep runs, and this instance's own threads with a message waiting are woken.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from bridge.core.store import Store
from bridge.core.store.rows import MessageState, StoreError, TurnState

log = logging.getLogger(__name__)

CONTROL_CHANNEL = "agy_bridge_control"
# PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more.
NOTIFY_LIMIT = 7900
# The database's clock, in Unix seconds: instances on several hosts compare one clock.
_NOW = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


def leader_key(platform: str) -> str:
    return f"leader|{platform}"


def instance_name(configured: str) -> str:
    # The host by default: agy keeps its conversations under the host's home, so instances on
    # one host can resume each other's.
    return configured or socket.gethostname()


class CommandTooLong(ValueError):
    """The command does not fit in one notification (an approval with a very long reason)."""


@dataclass(frozen=True)
class Claim:
    granted: bool
    # The instance whose lease lapsed and was taken over (its turn may have been cut off).
    previous: str | None = None


@dataclass(eq=False)
class Lease:
    """A role held while its lease is (the leader of a single-instance chat): lost when another
    instance took it, or ended when this instance drains."""

    key: str
    lost: anyio.Event = field(default_factory=anyio.Event)
    _ending: bool = False

    def end(self) -> None:
        """Stop the worker (a drain): same as lost, but expected."""
        self._ending = True
        self.lost.set()

    @asynccontextmanager
    async def guard(self) -> AsyncIterator[None]:
        """Run the body while the lease is held; cancel it when the lease is lost (the body then
        ends early with ``lost`` set)."""
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await self.lost.wait()
                if not self._ending:
                    log.warning("lease lost to another instance", extra={"chat_thread": self.key})
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()


class LeaseEvents(Protocol):
    """What the leases tell the core."""

    def held(self) -> Collection[str]:
        """Threads this instance runs now."""
        ...

    def lost(self, key: str) -> None: ...

    def stored(self, key: str) -> None:
        """A message was stored for this thread by some instance."""
        ...

    def control(self, payload: str) -> None:
        """A command sent by another instance for a thread (:mod:`bridge.core.thread.wire`)."""
        ...

    async def orphaned(self, keys: list[tuple[str, float]]) -> None:
        """Threads with work and no live lease: (key, since when they wait)."""
        ...


class Leases(Protocol):
    name: str  # this instance, as ``!status`` names it
    owner: str  # this run of it, in the leases table
    shared: bool
    # How often leases are renewed and orphaned threads looked for (seconds).
    period: float

    async def claim(self, key: str) -> Claim: ...

    async def release(self, key: str) -> None: ...

    async def release_all(self) -> None: ...

    async def holder(self, key: str) -> str | None:
        """The instance whose live lease runs the thread (None: none does)."""
        ...

    async def owner_of(self, key: str) -> str | None:
        """The run of an instance (``owner``) whose live lease runs the thread."""
        ...

    async def send_control(self, key: str, payload: str) -> None:
        """Hand a command to whichever instance runs the thread (CommandTooLong: it does not
        fit in one notification)."""
        ...

    async def announce(self, key: str) -> None:
        """A message waits in a thread this instance does not run: wake its holder, or let an
        instance with room take it."""
        ...

    async def run(self, events: LeaseEvents) -> None:
        """Renew, listen and sweep until cancelled (returns at once where nothing is shared)."""
        ...


class LocalLeases:
    """One instance on SQLite: every thread is this instance's."""

    shared = False
    period = 0.0

    def __init__(self, name: str):
        self.name = name
        self.owner = name

    async def claim(self, key: str) -> Claim:
        return Claim(True)

    async def release(self, key: str) -> None:
        pass

    async def release_all(self) -> None:
        pass

    async def holder(self, key: str) -> str | None:
        return None

    async def owner_of(self, key: str) -> str | None:
        return None

    async def send_control(self, key: str, payload: str) -> None:
        raise RuntimeError("one instance has no other to send to")

    async def announce(self, key: str) -> None:
        pass

    async def run(self, events: LeaseEvents) -> None:
        return


class SharedLeases:
    shared = True

    def __init__(self, store: Store, name: str, lease_seconds: float):
        from bridge.core.store.postgres import PostgresDatabase

        db = store.database
        if not isinstance(db, PostgresDatabase):
            raise TypeError("shared leases need the PostgreSQL store")
        self._db = db
        self._store = store
        self.name = name
        # A run of the instance: a restarted instance waits for its old leases like any other.
        self.owner = f"{name}#{uuid.uuid4().hex[:8]}"
        self.ttl = lease_seconds
        self.period = lease_seconds / 3

    async def claim(self, key: str) -> Claim:
        async with self._db.transaction() as tx:
            rows = await tx.fetch(
                f"SELECT owner, expires_at < {_NOW} AS lapsed FROM leases WHERE thread_key = ?"
                " FOR UPDATE SKIP LOCKED",
                (key,),
            )
            if not rows:
                # No lease, or another instance is changing it right now: then it is theirs.
                added = await tx.fetch(
                    f"INSERT INTO leases (thread_key, owner, expires_at) VALUES (?, ?, {_NOW} + ?)"
                    " ON CONFLICT (thread_key) DO NOTHING RETURNING owner",
                    (key, self.owner, self.ttl),
                )
                return Claim(bool(added))
            owner, lapsed = rows[0]["owner"], rows[0]["lapsed"]
            if owner != self.owner and not lapsed:
                return Claim(False)
            await tx.execute(
                f"UPDATE leases SET owner = ?, expires_at = {_NOW} + ? WHERE thread_key = ?",
                (self.owner, self.ttl, key),
            )
        return Claim(True, None if owner == self.owner else owner)

    async def release(self, key: str) -> None:
        async with self._db.transaction() as tx:
            await tx.execute(
                "DELETE FROM leases WHERE thread_key = ? AND owner = ?", (key, self.owner)
            )
            # Whoever has room takes what still waits.
            await tx.execute(
                "SELECT pg_notify(?, thread_key) FROM inbox WHERE thread_key = ? AND state = ?"
                " LIMIT 1",
                (Store.INBOX_CHANNEL, key, MessageState.PENDING),
            )

    async def release_all(self) -> None:
        async with self._db.transaction() as tx:
            # A leader lease is left to lapse: whoever takes the role next learns whose it was.
            keys = await tx.fetch(
                "DELETE FROM leases WHERE owner = ? AND thread_key NOT LIKE 'leader|%'"
                " RETURNING thread_key",
                (self.owner,),
            )
            for row in keys:
                await tx.execute(
                    "SELECT pg_notify(?, thread_key) FROM inbox WHERE thread_key = ?"
                    " AND state = ? LIMIT 1",
                    (Store.INBOX_CHANNEL, row["thread_key"], MessageState.PENDING),
                )

    async def holder(self, key: str) -> str | None:
        owner = await self.owner_of(key)
        return owner.split("#")[0] if owner is not None else None

    async def owner_of(self, key: str) -> str | None:
        rows = await self._db.fetch(
            f"SELECT owner FROM leases WHERE thread_key = ? AND expires_at >= {_NOW}", (key,)
        )
        return str(rows[0]["owner"]) if rows else None

    async def send_control(self, key: str, payload: str) -> None:
        if len(payload.encode()) > NOTIFY_LIMIT:
            raise CommandTooLong(f"a command of {len(payload.encode())} bytes")
        async with self._db.transaction() as tx:
            await tx.notify(CONTROL_CHANNEL, payload)

    async def announce(self, key: str) -> None:
        async with self._db.transaction() as tx:
            await tx.notify(Store.INBOX_CHANNEL, key)

    # --- the background work ---------------------------------------------------------------

    async def run(self, events: LeaseEvents) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                self._db.listen,
                [Store.INBOX_CHANNEL, CONTROL_CHANNEL],
                lambda channel, payload: self._heard(events, channel, payload),
                lambda: self._caught_up(events),
            )
            renewed = time.monotonic()
            while True:
                await anyio.sleep(self.period)
                try:
                    self._lost(events, await self._renew(events.held()))
                    renewed = time.monotonic()
                    await self._sweep(events)
                except StoreError as exc:
                    log.warning("could not renew leases: %s", exc)
                    if time.monotonic() - renewed > self.ttl:
                        # Others may be running these threads by now: stop ours.
                        self._lost(events, set(events.held()))

    async def _renew(self, held: Collection[str]) -> set[str]:
        """Renew the leases of ``held``; the keys another instance holds now."""
        keys = sorted(held)
        if not keys:
            return set()
        async with self._db.transaction() as tx:
            rows = await tx.fetch(
                "INSERT INTO leases (thread_key, owner, expires_at)"
                f" SELECT k, ?, {_NOW} + ? FROM unnest(CAST(? AS TEXT[])) AS k"
                " ON CONFLICT (thread_key) DO UPDATE SET owner = excluded.owner,"
                " expires_at = excluded.expires_at"
                f" WHERE leases.owner = excluded.owner OR leases.expires_at < {_NOW}"
                " RETURNING thread_key",
                (self.owner, self.ttl, keys),
            )
        return set(keys) - {r["thread_key"] for r in rows}

    def _lost(self, events: LeaseEvents, keys: set[str]) -> None:
        for key in keys:
            events.lost(key)

    async def _sweep(self, events: LeaseEvents) -> None:
        live = (
            f"SELECT 1 FROM leases l WHERE l.thread_key = x.thread_key AND l.expires_at >= {_NOW}"
        )
        rows = await self._db.fetch(
            "SELECT thread_key, MIN(since) AS since FROM ("
            " SELECT thread_key, received_at AS since FROM inbox WHERE state = ?"
            " UNION ALL"
            " SELECT thread_key, started_at AS since FROM turns WHERE state = ?"
            f") AS x WHERE NOT EXISTS ({live}) GROUP BY thread_key ORDER BY MIN(since)",
            (MessageState.PENDING, TurnState.RUNNING),
        )
        if rows:
            await events.orphaned([(r["thread_key"], float(r["since"])) for r in rows])

    async def _caught_up(self, events: LeaseEvents) -> None:
        """Listening (again): what was missed while not. Threads nobody holds are swept; a
        wake-up sent meanwhile for one of this instance's own threads is lost, so each of them
        with a message waiting is told now (else an idle one would wait for its idle timeout)."""
        await self._sweep(events)
        keys = sorted(events.held())
        if not keys:
            return
        rows = await self._db.fetch(
            "SELECT DISTINCT thread_key FROM inbox WHERE state = ?"
            " AND thread_key = ANY(CAST(? AS TEXT[]))",
            (MessageState.PENDING, keys),
        )
        for row in rows:
            events.stored(row["thread_key"])

    def _heard(self, events: LeaseEvents, channel: str, payload: str) -> None:
        if channel == Store.INBOX_CHANNEL:
            events.stored(payload)
            return
        events.control(payload)


def open_leases(store: Store, configured_name: str, lease_seconds: float) -> Leases:
    name = instance_name(configured_name)
    if not store.database.shared:
        return LocalLeases(name)
    return SharedLeases(store, name, lease_seconds)
