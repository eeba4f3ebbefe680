"""Thread key -> the thread's actor here, or the instance that runs the thread.

Every command for a thread goes through :meth:`Router.send` (an approval answer through
:meth:`Router.decide`), whether it comes from this instance's chat or from another instance:
here it is told to the thread's actor; where another instance holds the thread's lease it is
sent there, and arrives through :meth:`Router.control` as the same command. The router starts
actors (claiming the lease first), gives the lease back when one ends, and drains them.
"""

from __future__ import annotations

import enum
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from bridge.core import recovery
from bridge.core.approvals.texts import not_approver_text
from bridge.core.cluster import Cluster
from bridge.core.events import ChatAdapter, DecideOutcome, ThreadRef
from bridge.core.not_here import NotHere
from bridge.core.stop_route import route_stop
from bridge.core.store import Store
from bridge.core.thread import commands as c
from bridge.core.thread import wire
from bridge.core.thread.actor import ThreadActor
from bridge.core.thread.machine import NOTHING_RUNNING
from bridge.core.thread.parts import ThreadParts
from bridge.metrics import Metrics

log = logging.getLogger(__name__)


class Routed(enum.Enum):
    HERE = "here"  # told to the thread's actor on this instance
    SENT = "sent"  # sent to the instance that runs the thread
    NOWHERE = "nowhere"  # no instance runs the thread


class Router:
    def __init__(
        self,
        parts_for: Callable[[ThreadRef], ThreadParts],
        cluster: Cluster,
        store: Store,
        adapters: Mapping[str, ChatAdapter],
        metrics: Metrics,
        task_group: TaskGroup,
        *,
        limit: int,
    ):
        self._parts_for = parts_for
        self.cluster = cluster
        self.store = store
        self.adapters = adapters
        self.metrics = metrics
        self._tg = task_group
        self._limit = limit
        self.threads: dict[str, ThreadActor] = {}
        # Threads whose lease is being claimed here: the commands another instance sent them
        # meanwhile (it may see the lease before this instance's actor exists).
        self._claiming: dict[str, list[c.Command]] = {}

    def local(self, key: str) -> ThreadActor | None:
        """The thread's actor here, unless it is on its way out."""
        actor = self.threads.get(key)
        return actor if actor is not None and not actor.state.gone else None

    # --- commands -----------------------------------------------------------------------------

    def reaches(self, key: str, command: c.Command) -> ThreadActor | None:
        """The actor here that ``command`` is for: a Stop also reaches one on its way out that
        will hand it to its successor (a message landed as it left)."""
        actor = self.threads.get(key)
        if actor is not None and isinstance(command, c.Stop) and actor.state.respawn:
            return actor
        return self.local(key)

    async def send(self, thread: ThreadRef, command: c.Forwarded) -> Routed:
        if (actor := self.reaches(thread.key, command)) is not None:
            actor.tell(command)
            return Routed.HERE
        if await self.cluster.send(thread, command):
            return Routed.SENT
        return Routed.NOWHERE

    async def decide(self, thread: ThreadRef, command: c.Decide) -> DecideOutcome:
        if (actor := self.local(thread.key)) is not None:
            return await actor.decide(command)
        # Another instance may run the thread: its gate holds the request.
        return await self.cluster.send_decision(thread, command)

    def background(self, coro: Awaitable[Any]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.warning("background chat call failed", exc_info=True)

        self._tg.start_soon(guarded)

    async def say(self, thread: ThreadRef, text: str) -> None:
        try:
            await self.adapters[thread.platform].post_message(thread, text)
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": thread.key})

    # --- actors -------------------------------------------------------------------------------

    async def actor_for(self, thread: ThreadRef) -> ThreadActor | NotHere:
        """The thread's actor here, claiming the thread first; else why not (another instance
        runs it, or may: it was told through the store)."""
        actor = await self.claimed(thread, 0.0)
        if isinstance(actor, NotHere):
            await self.cluster.announce(thread.key)
        return actor

    async def claimed(self, thread: ThreadRef, waited: float) -> ThreadActor | NotHere:
        if (actor := self.threads.get(thread.key)) is not None:
            return actor
        cluster = self.cluster
        if cluster.draining:
            return NotHere.DRAINING
        if not cluster.serves(thread.platform):
            return NotHere.NOT_SERVED
        # At its limit an instance leaves new threads to others; one left waiting for two
        # sweeps is taken anyway (every instance is full: it queues here).
        period = cluster.leases.period
        if cluster.shared and len(self.threads) >= self._limit and waited < 2 * period:
            return NotHere.FULL
        async with cluster.lock:
            if (actor := self.threads.get(thread.key)) is not None:
                return actor
            self._claiming[thread.key] = []
            try:
                claim = await cluster.claim(thread.key)
            finally:
                early = self._claiming.pop(thread.key)
            if not claim.granted:
                return NotHere.HELD
            report = None
            if cluster.shared and claim.previous is not None:
                # Whether the conversation is kept is known once the thread's place is.
                report = functools.partial(
                    recovery.take_over,
                    self.store,
                    self.adapters[thread.platform],
                    self.metrics,
                    thread,
                    claim.previous,
                    cluster.leases.owner,
                    cluster.name,
                )
            actor = self.start(thread, report)
            for command in early:
                actor.tell(command)
            return actor

    def start(
        self,
        thread: ThreadRef,
        report_takeover: Callable[[bool | None], Awaitable[None]] | None = None,
    ) -> ThreadActor:
        actor = ThreadActor(thread, self._parts_for(thread), self._exited, report_takeover)
        self.threads[thread.key] = actor
        self._tg.start_soon(actor.run, name=f"thread {thread.key}")
        return actor

    def _exited(self, actor: ThreadActor) -> None:
        if self.threads.get(actor.key) is not actor:
            return
        del self.threads[actor.key]
        if actor.state.respawn:
            # A message landed while the actor was leaving: a new one takes it.
            successor = self.start(actor.ref)
            successor.tell(c.MessageStored())
            if actor.state.stop_by is not None:
                successor.tell(c.StopHandedOn(actor.state.stop_by))
        elif self.cluster.shared:
            self.background(self._release(actor.key))

    async def _release(self, key: str) -> None:
        """Give the lease back, unless a successor already runs the thread."""
        async with self.cluster.lock:
            if key not in self.threads:
                await self.cluster.release(key)

    # --- what the leases tell (LeaseEvents) ---------------------------------------------------

    def held(self) -> Collection[str]:
        return [*self.threads, *self.cluster.leading]

    def lost(self, key: str) -> None:
        if (actor := self.threads.get(key)) is not None:
            actor.tell(c.LeaseLost())
        if (lead := self.cluster.leading.get(key)) is not None:
            lead.lost.set()

    def stored(self, key: str) -> None:
        # Also an actor on its way out: it remembers the message, and a successor takes it.
        if (actor := self.threads.get(key)) is not None:
            actor.tell(c.MessageStored())
        else:
            self._maybe_take(key, 0.0)

    def control(self, payload: str) -> None:
        """A command another instance sent for a thread: the same path as one from here."""
        heard = wire.decode(payload)
        if isinstance(heard, wire.Unreadable):
            self._refuse(heard)
            return
        command = heard.command
        if heard.to is not None and heard.to != self.cluster.leases.owner:
            return  # sent to another instance alone (it hands it on if need be)
        actor = self.reaches(heard.thread, command)
        if actor is None:
            early = self._claiming.get(heard.thread)
            if early is not None and not isinstance(command, c.Decide):
                early.append(command)  # its actor starts here once the claim is through
            elif isinstance(command, c.Stop) and heard.to is not None:
                # Sent here as the holder, and the thread's actor is not here (not yet, or
                # not any more): the Stop is handed on, never dropped.
                self._hand_on(heard.thread, command, heard.hops + 1)
            elif isinstance(command, c.Stop) and self.leaving_cleanly(heard.thread):
                # Sent here as the holder, whose actor is leaving with nothing to do: the
                # sender was told nothing, so this instance answers.
                self.background(self.say(ThreadRef.from_key(heard.thread), NOTHING_RUNNING))
            return  # else not this instance's thread (every instance hears every command)
        if isinstance(command, c.Decide):
            self.background(self._decided(actor, command))
        else:
            actor.tell(command)

    def _hand_on(self, key: str, stop: c.Stop, hops: int) -> None:
        try:
            ref = ThreadRef.from_key(key)
        except ValueError:
            return
        self.background(self.stop(ref, stop, hops))

    async def stop(self, thread: ThreadRef, stop: c.Stop, hops: int = 0) -> None:
        """Stop the thread's turn, running or on its way, wherever it runs; else tell the thread
        that nothing runs (:mod:`bridge.core.stop_route`)."""
        await route_stop(self, thread, stop, hops)

    async def message_waits(self, key: str) -> bool:
        """A message waits in the thread (with one instance, its actor was told of it at once)."""
        return self.cluster.shared and await self.store.has_pending(key)

    def leaving_cleanly(self, key: str) -> bool:
        """The thread's actor here has ended with nothing to do, and its lease is still ours
        (not one that lost it to another instance)."""
        actor = self.threads.get(key)
        return actor is not None and actor.state.gone and actor.state.clean

    async def _decided(self, actor: ThreadActor, command: c.Decide) -> None:
        outcome = await actor.decide(command)
        if outcome is DecideOutcome.NOT_APPROVER:
            await self.say(actor.ref, not_approver_text(command.by))
        elif outcome is DecideOutcome.UNKNOWN:
            log.info(
                "a decision from another instance came after the request was settled",
                extra={"chat_thread": actor.key},
            )

    def _refuse(self, heard: wire.Unreadable) -> None:
        self.metrics.error("unknown_command")
        log.warning("refused a command from another instance: %s", heard.reason)
        if heard.thread is not None and self.local(heard.thread) is not None:
            ref = ThreadRef.from_key(heard.thread)
            self.background(
                self.say(
                    ref,
                    f"⚠️ Bridge instance `{self.cluster.name}` runs this thread and could not "
                    f"read a command another instance sent it ({heard.reason}); nothing "
                    "changed. Instances of different versions may be running: try again "
                    "once they match.",
                )
            )

    async def orphaned(self, keys: list[tuple[str, float]]) -> None:
        now = time.time()
        for key, since in keys:
            self._maybe_take(key, now - since)

    def _maybe_take(self, key: str, waited: float) -> None:
        try:
            ref = ThreadRef.from_key(key)
        except ValueError:
            return
        if ref.platform not in self.adapters or key in self.threads:
            return

        async def take() -> None:
            actor = await self.claimed(ref, waited)
            if not isinstance(actor, NotHere):
                actor.tell(c.MessageStored())

        self.background(take())

    # --- stopping -----------------------------------------------------------------------------

    async def drain(self, deadline: float) -> None:
        """SIGTERM with others to carry on: take no new threads, let running turns finish,
        hand the rest over."""
        self.cluster.draining = True
        for actor in list(self.threads.values()):
            actor.tell(c.Drain())
        with anyio.move_on_after(deadline):
            # ``in_turn``, not ``busy``: a turn that has just taken its messages is not yet
            # busy, and ending its lease then would leave them taken and never answered.
            while turns := [a for a in self.threads.values() if a.in_turn]:
                await turns[0].wait_until(lambda state: not state.in_turn)
        for actor in list(self.threads.values()):
            actor.tell(c.EndLease())
        with anyio.move_on_after(deadline):
            while self.threads:
                await next(iter(self.threads.values())).wait_ended()
        with anyio.CancelScope(shield=True):
            await self.cluster.leases.release_all()

    async def shutdown(self, grace: float) -> None:
        """Interrupt running turns (their threads are told) and give them ``grace`` to end.
        What still waits stays pending for the next start."""
        actors = list(self.threads.values())
        for actor in actors:
            actor.tell(c.Shutdown())
        with anyio.move_on_after(grace):
            while busy := [a for a in actors if a.busy]:
                await busy[0].wait_until(lambda state: not state.busy)
