"""The core's side of several instances: which threads this instance takes, and takeovers.

The core asks :class:`Cluster` for a thread's worker when a message is stored; the cluster
claims the thread's lease first (always granted on SQLite) and leaves the thread to the instance
that holds it otherwise: that one was woken by the store's ``NOTIFY``. The cluster also answers
the leases' events (a message stored elsewhere, a Stop or an approval decision sent from
elsewhere, a lease lost, a thread left without a live lease) and takes over a dead instance's
threads: its process groups on this host are ended, the approval requests it left waiting
expire, its cut-off turn is reported once, and when agy's state is not shared
the conversation starts again with the thread's history as context.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

import anyio

from bridge.agy.process import reap_group
from bridge.core.approvals.gate import may_approve
from bridge.core.events import ApprovalChoice, Author, DecideOutcome, ThreadRef
from bridge.core.leases import (
    SINGLE_INSTANCE,
    DecisionTooLong,
    ForwardedDecision,
    Lease,
    Leases,
    leader_key,
)
from bridge.core.prompt import history_context
from bridge.core.store import TurnState

if TYPE_CHECKING:
    from bridge.core.core import Core
    from bridge.core.thread import ThreadWorker

log = logging.getLogger(__name__)

TAKEOVER_NOTICE = (
    "⚠️ The bridge instance that was running this thread (`{previous}`) stopped answering "
    "while the agent was working, so that turn was interrupted and its answer is lost. "
    "Instance `{name}` has taken the thread over; messages written since are being picked up "
    "now. Repeat your last request if it still matters."
)
HANDOVER_NOTICE = (
    "ℹ️ This thread moved to bridge instance `{name}`, which cannot see the agent's earlier "
    "conversation (it is kept on `{previous}`). The agent starts a new conversation and is "
    "given this thread's history as context."
)


def not_approver_text(who: Author) -> str:
    return f"{who.label} may not answer approval requests in this thread; nothing changed."


class Cluster:
    def __init__(self, core: Core, leases: Leases):
        self.core = core
        self.leases = leases
        self.draining = False
        # Leader leases this instance holds (``leader|matrix``): their chats run here only.
        self.leading: dict[str, Lease] = {}
        # Claims and releases of one instance one at a time: a release must not remove the
        # lease a new claim for the same thread just renewed.
        self._lock = anyio.Lock()

    @property
    def shared(self) -> bool:
        return self.leases.shared

    # --- the submit path ------------------------------------------------------------------

    async def worker_for(self, thread: ThreadRef) -> ThreadWorker | None:
        """The thread's worker here, claiming it first; None when another instance runs it (or
        may: it was told through the store)."""
        worker = await self._claimed(thread, 0.0)
        if worker is None:
            await self.leases.announce(thread.key)
        return worker

    async def _claimed(self, thread: ThreadRef, waited: float) -> ThreadWorker | None:
        workers = self.core.workers
        if (worker := workers.get(thread.key)) is not None:
            return worker
        if self.draining or not self._serves(thread.platform):
            return None
        limit = self.core.deps.slots.limit
        # At its limit an instance leaves new threads to others; one left waiting for two
        # sweeps is taken anyway (every instance is full: it queues here).
        if self.shared and len(workers) >= limit and waited < 2 * self.leases.period:
            return None
        async with self._lock:
            if (worker := workers.get(thread.key)) is not None:
                return worker
            claim = await self.leases.claim(thread.key)
            if not claim.granted:
                return None
            lease = Lease(thread.key, claim.previous)
            if self.shared:
                if claim.previous is not None:
                    lease.report_takeover = functools.partial(
                        self._take_over, thread, claim.previous
                    )
                await self._check_conversation(thread, lease)
            return self.core._worker(thread, lease)

    async def _take_over(self, thread: ThreadRef, previous: str) -> None:
        store = self.core.store
        for row in await store.processes():
            if row.thread_key == thread.key and row.owner != self.leases.owner:
                # The marker check makes this safe on another host's pgid: it ends nothing.
                await reap_group(row.pgid, row.run_marker)
                await store.remove_process(row.pgid)
        name = previous.split("#")[0]
        # Its requests waited on an agy that is gone: they can never run. Only this thread's:
        # other instances' requests wait on their live agy.
        await self.core._expire_approvals(
            thread.key, f"instance {name} stopped while it waited, so it was not run"
        )
        for turn in await store.running_turns(thread.key):
            if turn.owner == self.leases.owner:
                continue
            # Told first, recorded second: the post can wait seconds for Slack's rate budget,
            # and an instance killed meanwhile must leave the turn to be reported again rather
            # than recorded as reported and never said.
            try:
                await self.core.deps.adapters[thread.platform].post_message(
                    thread, TAKEOVER_NOTICE.format(previous=name, name=self.leases.name)
                )
            except Exception:
                log.warning(
                    "could not report a cut-off turn; it is reported at the next takeover",
                    exc_info=True,
                    extra={"chat_thread": thread.key},
                )
                continue
            if await store.end_running_turn(
                turn.id, TurnState.INTERRUPTED, f"instance {name} stopped during this turn"
            ):
                log.info(
                    "took over a thread whose turn was cut off",
                    extra={"chat_thread": thread.key, "conversation": turn.conversation_id},
                )

    async def _check_conversation(self, thread: ThreadRef, lease: Lease) -> None:
        """agy's conversation lives on the instance that started it, unless its state is shared."""
        if self.core.deps.config.store.shared_agy_state:
            return
        row = await self.core.store.thread(thread.key)
        other = row.conversation_instance
        if not (row.conversation_id and other and other != self.leases.name):
            return
        await self.core.store.set_conversation(thread.key, None)
        lease.handover_from = other
        await self.core._say(thread, HANDOVER_NOTICE.format(name=self.leases.name, previous=other))
        lease.context = await history_context(self.core.store, thread.key)

    def released(self, worker: ThreadWorker) -> None:
        """A worker ended: give its lease back, unless a successor already runs the thread."""
        if not self.shared:
            return

        async def release() -> None:
            async with self._lock:
                if worker.key not in self.core.workers:
                    await self.leases.release(worker.key)

        self.core._spawn(release())

    # --- commands for a thread another instance runs ------------------------------------------

    async def forward(self, thread: ThreadRef, action: str, by: str) -> bool:
        """Send Stop / restart / new to the instance running the thread; False when none does."""
        if not self.shared or await self.leases.holder(thread.key) is None:
            return False
        await self.leases.send_control(thread.key, action, by)
        return True

    async def forward_decision(
        self,
        thread: ThreadRef,
        handle: str | None,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
    ) -> DecideOutcome:
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
            for row in await self.core.store.waiting_approvals(thread.key)
            if handle is None or row.handle in (handle, None)
        ]
        if not waiting:
            return DecideOutcome.UNKNOWN
        if not may_approve(self.core.deps.config.approvals.approvers, by):
            return DecideOutcome.NOT_APPROVER
        if await self.leases.holder(thread.key) is None:
            # Its instance is gone, and agy with it: the request expires at the takeover.
            return DecideOutcome.UNKNOWN
        # The oldest waiting one is the one shown now (the gate asks one at a time); its handle
        # goes along, so a late decision never answers the thread's next request.
        decision = ForwardedDecision(
            handle=handle or waiting[0].handle, choice=choice, by=by, reason=reason
        )
        try:
            await self.leases.send_decision(thread.key, decision)
        except DecisionTooLong:
            # Told here, in the thread: the adapter has nothing to add.
            await self.core._say(
                thread,
                f"{by.label}: that answer is too long to hand to the bridge instance running "
                "this thread; nothing changed. Shorten the reason and answer again.",
            )
            return DecideOutcome.DECIDED
        log.info(
            "sent an approval decision to the instance running the thread",
            extra={"chat_thread": thread.key},
        )
        return DecideOutcome.DECIDED

    async def status_line(self, thread: ThreadRef) -> str:
        if not self.shared or thread.key in self.core.workers:
            return f"• Instance: `{self.leases.name}`"
        holder = await self.leases.holder(thread.key)
        if holder is None:
            return f"• Instance: none runs this thread now (asked `{self.leases.name}`)"
        return f"• Instance: `{holder}` runs this thread (asked `{self.leases.name}`)"

    # --- LeaseEvents --------------------------------------------------------------------------

    def held(self) -> Collection[str]:
        return [*self.core.workers, *self.leading]

    def lost(self, key: str) -> None:
        if (worker := self.core.workers.get(key)) is not None:
            worker.lease.lost.set()
        if (lead := self.leading.get(key)) is not None:
            lead.lost.set()

    def _serves(self, platform: str) -> bool:
        """A chat that runs on one instance at a time has its threads run there too."""
        return (
            not self.shared
            or platform not in SINGLE_INSTANCE
            or leader_key(platform) in self.leading
        )

    def stored(self, key: str) -> None:
        if (worker := self.core.workers.get(key)) is not None:
            worker.message_stored()
        else:
            self._maybe_take(key, 0.0)

    def control(self, key: str, action: str, by: str) -> None:
        worker = self.core.workers.get(key)
        if worker is None:
            return
        ref = ThreadRef.from_key(key)

        async def stop() -> None:
            # As at this instance: a request waiting for approval is denied with the turn.
            if not await worker.stop_waiting(by) and not worker.interrupt(by):
                await self.core._say(ref, "Nothing is running in this thread.")

        async def new() -> None:
            if not await worker.stop_waiting(by):
                worker.interrupt(by)
            worker.request_restart()

        if action == "stop":
            self.core._spawn(stop())
        elif action == "new":
            self.core._spawn(new())
        elif action == "restart":
            worker.request_restart()

    def decided(self, key: str, decision: ForwardedDecision) -> None:
        worker = self.core.workers.get(key)
        if worker is None or worker.gate is None:
            return  # not this instance's thread (every instance hears every decision)
        gate = worker.gate
        ref = ThreadRef.from_key(key)

        async def resolve() -> None:
            outcome = await gate.resolve(
                decision.handle, decision.choice, decision.by, decision.reason
            )
            if outcome is DecideOutcome.NOT_APPROVER:
                await self.core._say(ref, not_approver_text(decision.by))
            elif outcome is DecideOutcome.UNKNOWN:
                log.info(
                    "a decision from another instance came after the request was settled",
                    extra={"chat_thread": key},
                )

        self.core._spawn(resolve())

    async def orphaned(self, keys: list[tuple[str, float]]) -> None:
        now = time.time()
        for key, since in keys:
            self._maybe_take(key, now - since)

    def _maybe_take(self, key: str, waited: float) -> None:
        try:
            ref = ThreadRef.from_key(key)
        except ValueError:
            return
        if ref.platform not in self.core.deps.adapters or key in self.core.workers:
            return

        async def take() -> None:
            worker = await self._claimed(ref, waited)
            if worker is not None:
                worker.notify()

        self.core._spawn(take())

    # --- start and stop -----------------------------------------------------------------------

    async def recover(self) -> None:
        """Shared store: end agy process groups an earlier run of this instance left here."""
        store = self.core.store
        for row in await store.processes():
            if row.owner and row.owner.split("#")[0] == self.leases.name:
                if row.owner != self.leases.owner and await reap_group(row.pgid, row.run_marker):
                    log.info(
                        "ended an agy process group left from an earlier run",
                        extra={"chat_thread": row.thread_key},
                    )
                if row.owner != self.leases.owner:
                    await store.remove_process(row.pgid)

    async def drain(self, deadline: float) -> None:
        """SIGTERM: take no new threads, let running turns finish, hand the rest over."""
        self.draining = True
        workers = self.core.workers
        for worker in workers.values():
            worker.lease.draining = True
        with anyio.move_on_after(deadline):
            # ``in_turn``, not ``busy``: a turn that has just taken its messages is not yet
            # busy, and ending its lease then would leave them taken and never answered.
            while any(w.in_turn for w in workers.values()):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        for worker in list(workers.values()):
            worker.lease.end()
        with anyio.move_on_after(deadline):
            while workers:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        with anyio.CancelScope(shield=True):
            await self.leases.release_all()
