"""Where a Stop goes: to the thread's turn, running or on its way, wherever it runs; else the
thread is told that nothing runs. Never neither: the lease can be between instances, or between
a message's store and its claim, when the Stop comes.

Where the thread's actor is, it takes the Stop. A lease this instance holds without an actor (a
claim or a release of it is under way here) is looked at again once that is through; another
instance's lease gets the Stop sent to it alone (it does the same). With no lease, a message
that waits is about to be taken: this instance claims the thread and its new actor stops the
turn once it runs. An actor here leaving with nothing to do is told of a message that waits
(another instance stored it; its word is on the way) and keeps the Stop for its successor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bridge.core.cluster import Cluster
from bridge.core.events import ThreadRef
from bridge.core.not_here import NotHere
from bridge.core.thread import commands as c
from bridge.core.thread.actor import ThreadActor
from bridge.core.thread.machine import NOTHING_RUNNING

# How often a Stop is handed on between instances, or looked at again here, before the thread is
# told that nothing runs (leases that keep moving: each look follows a claim or a release).
MAX_HOPS = 4


class Routes(Protocol):
    """What the walk asks of the router (``bridge.core.router.Router``)."""

    @property
    def cluster(self) -> Cluster: ...
    @property
    def threads(self) -> Mapping[str, ThreadActor]: ...
    def reaches(self, key: str, command: c.Command) -> ThreadActor | None: ...
    def leaving_cleanly(self, key: str) -> bool: ...
    async def message_waits(self, key: str) -> bool: ...
    async def claimed(self, thread: ThreadRef, waited: float) -> ThreadActor | NotHere: ...
    async def say(self, thread: ThreadRef, text: str) -> None: ...


async def route_stop(router: Routes, thread: ThreadRef, stop: c.Stop, hops: int = 0) -> None:
    """Walk ``stop`` to the thread's turn (see the module's text); ``hops``: looks and hand-ons
    spent on it so far, here or at other instances."""
    key, me = thread.key, router.cluster.leases.owner
    while hops < MAX_HOPS:
        if (actor := router.reaches(key, stop)) is not None:
            actor.tell(stop)
            return
        if router.leaving_cleanly(key):
            if not await router.message_waits(key):
                break
            # Stored as the actor left, and the word of it (another instance's) not heard
            # yet: the actor remembers it, and the Stop, for its successor.
            if (actor := router.threads.get(key)) is not None:
                actor.tell(c.MessageStored())
            hops += 1
            continue
        owner = await router.cluster.owner_of(key)
        if owner is not None and owner != me:
            await router.cluster.send_to(owner, thread, stop, hops)
            return
        if owner == me:
            async with router.cluster.lock:
                pass  # the claim or release under way here is through
        elif await router.message_waits(key):
            taken = await router.claimed(thread, 0.0)
            if not isinstance(taken, NotHere):
                taken.tell(c.MessageStored())
                taken.tell(stop)
                return
            if taken is not NotHere.HELD:
                break  # left to another instance: the thread is told, as ever
        else:
            break
        hops += 1
    await router.say(thread, NOTHING_RUNNING)
