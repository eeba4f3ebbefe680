"""The core's side of several instances: leases, and commands sent to the instance that runs a
thread.

A thread runs where its lease is held (always here, on SQLite). The router
(:mod:`bridge.core.router`) claims a thread's lease before it starts the thread's actor, and
sends a command for a thread another instance runs through :meth:`Cluster.send`; that instance
hears it through its leases' LISTEN and hands it to the thread (:mod:`bridge.core.thread.wire`
keeps the format). Nothing here knows the core or the threads' actors.
"""

from __future__ import annotations

import logging

import anyio

from bridge.core.approvals.gate import may_approve
from bridge.core.approvals.replies import number_handle
from bridge.core.events import DecideOutcome, ThreadRef
from bridge.core.leases import Claim, Lease, Leases, leader_key
from bridge.core.store import Store
from bridge.core.thread import commands as c
from bridge.core.thread import wire

log = logging.getLogger(__name__)


class Cluster:
    def __init__(
        self,
        leases: Leases,
        store: Store,
        approvers: list[str],
        single_instance: frozenset[str] = frozenset(),
    ):
        self.leases = leases
        self.store = store
        self.approvers = approvers
        # Platforms whose adapter runs on one instance at a time (the adapter declares it).
        self.single_instance = single_instance
        self.draining = False
        # Leader leases this instance holds (``leader|matrix``): their chats run here only.
        self.leading: dict[str, Lease] = {}
        # Claims and releases of one instance one at a time: a release must not remove the
        # lease a new claim for the same thread just renewed.
        self.lock = anyio.Lock()

    @property
    def shared(self) -> bool:
        return self.leases.shared

    @property
    def name(self) -> str:
        return self.leases.name

    def serves(self, platform: str) -> bool:
        """A chat that runs on one instance at a time has its threads run there too."""
        return (
            not self.shared
            or platform not in self.single_instance
            or leader_key(platform) in self.leading
        )

    async def claim(self, key: str) -> Claim:
        return await self.leases.claim(key)

    async def release(self, key: str) -> None:
        await self.leases.release(key)

    async def announce(self, key: str) -> None:
        await self.leases.announce(key)

    async def send(self, thread: ThreadRef, command: c.Forwarded) -> bool:
        """Send ``command`` to the instance running the thread; False when none does."""
        if not self.shared or await self.leases.holder(thread.key) is None:
            return False
        await self.leases.send_control(thread.key, wire.encode(thread.key, command))
        return True

    async def owner_of(self, key: str) -> str | None:
        return await self.leases.owner_of(key) if self.shared else None

    async def send_to(self, owner: str, thread: ThreadRef, command: c.Stop, hops: int) -> None:
        """Send ``command`` to the instance run ``owner`` alone (it hands it on if the thread
        is not its own any more)."""
        payload = wire.encode(thread.key, command, to=owner, hops=hops)
        await self.leases.send_control(thread.key, payload)

    async def send_decision(self, thread: ThreadRef, decide: c.Decide) -> DecideOutcome:
        """An answer to a request asked by the instance running the thread (``handle`` None:
        whichever waits now), sent to it through the store.

        The approvers are checked here, so the person is told at once, and again by the
        holder's gate with the same config; the gate takes one decision per request, so a
        decision sent twice, or after another, changes nothing.
        """
        if not self.shared:
            return DecideOutcome.UNKNOWN
        # A row's handle is noted just after its message is posted: a click can come first.
        waiting = [
            row
            for row in await self.store.waiting_approvals(thread.key)
            if decide.handle is None
            or row.handle in (decide.handle, None)
            or (row.number is not None and decide.handle == number_handle(row.number))
        ]
        if not waiting:
            return DecideOutcome.UNKNOWN
        if not may_approve(self.approvers, decide.by):
            return DecideOutcome.NOT_APPROVER
        if await self.leases.holder(thread.key) is None:
            # Its instance is gone, and agy with it: the request expires at the takeover.
            return DecideOutcome.UNKNOWN
        # A bare typed answer goes on bare: the running gate knows whether it could mean
        # another request (and says so); a click, a reply or a number stays bound to its own.
        pinned = c.Decide(
            decide.handle, decide.choice, decide.by, decide.reason, sent_at=decide.sent_at
        )
        # CommandTooLong (a very long reason) reaches the caller, which tells the thread.
        await self.leases.send_control(thread.key, wire.encode(thread.key, pinned))
        log.info(
            "sent an approval decision to the instance running the thread",
            extra={"chat_thread": thread.key},
        )
        return DecideOutcome.DECIDED

    async def status_line(self, thread: ThreadRef, runs_here: bool) -> str:
        if not self.shared or runs_here:
            return f"• Instance: `{self.leases.name}`"
        holder = await self.leases.holder(thread.key)
        if holder is None:
            return f"• Instance: none runs this thread now (asked `{self.leases.name}`)"
        return f"• Instance: `{holder}` runs this thread (asked `{self.leases.name}`)"
