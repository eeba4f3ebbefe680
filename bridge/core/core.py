"""The core, inbound: what a chat event is (an approval answer, a command, a message), stored,
then routed to the thread (:mod:`bridge.core.router`).

It implements :class:`bridge.core.events.Inbound` for the chat adapters. Each thread's work is
its actor's (:mod:`bridge.core.thread.actor`); restart recovery is :mod:`bridge.core.recovery`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio

from bridge.agy.process import ProcessOpener, open_agy
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core import recovery
from bridge.core import store as st
from bridge.core.approvals.hook_health import HookHealth, health_for
from bridge.core.approvals.replies import number_handle, parse_reply
from bridge.core.approvals.secrets import scrubber_for
from bridge.core.approvals.texts import not_approver_text
from bridge.core.capabilities import (
    HearsResets,
    KnowsMembers,
    OpensThreads,
    PostsWithoutPreviews,
    single_instance,
)
from bridge.core.cluster import Cluster
from bridge.core.commands import parse_command, run_command
from bridge.core.disk import disk_space
from bridge.core.edits import apply_change, withdrawn_text
from bridge.core.events import (
    ApprovalChoice,
    Author,
    ChangeOutcome,
    ChannelRef,
    ChatAdapter,
    DecideOutcome,
    IncomingMessage,
    MessageChange,
    SubmitOutcome,
    ThreadRef,
)
from bridge.core.leases import CommandTooLong, Leases, LocalLeases
from bridge.core.live import LiveHub
from bridge.core.marks import Marks
from bridge.core.pulls import has_forge
from bridge.core.pulls.seat import FORGE_TIMEOUT, Pulls, open_pulls
from bridge.core.router import NotHere, Router
from bridge.core.schedules.clock import Clock, WallClock
from bridge.core.schedules.scheduler import Scheduler
from bridge.core.scrubbed_chat import ScrubbedAdapter
from bridge.core.slots import ProcessSlots
from bridge.core.team.audit import AuditLog, prune_daily
from bridge.core.team.audited import audited
from bridge.core.team.controls import TeamControls
from bridge.core.thread import commands as c
from bridge.core.thread.actor import ThreadActor
from bridge.core.thread.parts import ThreadParts
from bridge.core.thread.turn_policy import Chain, TurnPolicy, policy_for
from bridge.core.thread.view import ThreadView
from bridge.core.workspaces import move_places
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

# How long running turns get to end on their own at shutdown before processes are stopped.
SHUTDOWN_GRACE = 10.0
# How long a thread moving to another key waits for its stopped turn, then for its actor to end.
MOVE_WAIT = 30.0
NO_REQUEST = "No request waits for approval in this thread now; nothing changed."


def opening_text(author: Author, text: str) -> str:
    """The root message of a thread the bridge opens: who asks, then what."""
    return f"**{author.label}** asks:\n\n{text}"


class Core:
    def __init__(
        self,
        config: Config,
        store: st.Store,
        runtime: AgyRuntime,
        adapters: Mapping[str, ChatAdapter],
        router: Router,
        slots: ProcessSlots,
        metrics: Metrics,
        task_group: anyio.abc.TaskGroup,
        team: TeamControls | None = None,
    ):
        self.config = config
        self.team = team
        self.store = store
        self.runtime = runtime
        self.adapters = adapters
        self.router = router
        self.cluster = router.cluster
        self.leases = router.cluster.leases
        self.slots = slots
        self.metrics = metrics
        self._tg = task_group
        # Adapters told when a thread's conversation is reset (they post nothing then).
        self.hearing: dict[str, HearsResets] = {}
        # Adapters that know who is in a channel, and that post without link previews.
        self.members: dict[str, KnowsMembers] = {}
        self.quiet: dict[str, PostsWithoutPreviews] = {}
        self.disk = disk_space(config)  # for !status (the threads' rules are in their parts)
        # Scheduled prompts (set by open_core; docs/schedules.md).
        self.scheduler: Scheduler | None = None
        # This instance's running turns as they happen, for watchers (the web console).
        self.live = LiveHub()
        # Pull requests of worktree threads (None: no forge configured; docs/pull-requests.md).
        self.pulls: Pulls | None = None
        # Threads held since their agy ran tools without the gate's hooks (set by open_core).
        self.hook_health: HookHealth | None = None

    @property
    def threads(self) -> Mapping[str, ThreadActor]:
        """The threads whose actor runs on this instance."""
        return self.router.threads

    # --- Inbound -----------------------------------------------------------------------------

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        if message.thread.platform not in self.adapters:
            raise ValueError(f"no chat adapter for platform {message.thread.platform!r}")
        if await self._approval_reply(message):
            return SubmitOutcome.COMMAND
        command = parse_command(message.text) if not message.attachments else None
        if command is not None:
            if await self.store.add_message(message, state=st.MessageState.COMMAND) is None:
                return SubmitOutcome.DUPLICATE
            if self.team is not None and command.name != "stop":  # core.stop records it
                await self.team.command(message.thread, message.author, command.name, command.arg)
            await run_command(self, message, command)
            return SubmitOutcome.COMMAND
        # The message and its thread's record as a conversation: one transaction.
        row_id = await self.store.add_message(message, record_thread=True)
        if row_id is None:
            return SubmitOutcome.DUPLICATE
        actor = await self.router.actor_for(message.thread)
        if not isinstance(actor, NotHere):  # else another instance runs it, or will
            actor.tell(c.MessageStored(message.message_id, row_id, bool(message.attachments)))
        return SubmitOutcome.ACCEPTED

    async def start_thread(
        self,
        place: ChannelRef,
        text: str,
        author: Author,
        *,
        model: str | None = None,
        event_id: str | None = None,
        workspace: str | None = None,
    ) -> ThreadRef:
        """A turn no chat message started (``author``: a schedule, a forge event, the bridge):
        a new thread in ``place``, opened by a root message saying who asks what, whose turn
        then runs as any other (it streams, asks approvals, obeys ``!stop``). The thread's key.

        Raises ValueError when the platform has no adapter or its adapter cannot open threads
        (:class:`bridge.core.capabilities.OpensThreads`). ``model``: the thread's model
        (``!model``) before its first turn; ``event_id``: the first message's key in the inbox
        (a scheduled run's, so that the run's turn can be found), else the root message's;
        ``workspace``: the path of the [[workspaces]] entry it works in, instead of the
        channel's."""
        chat = self.adapters.get(place.platform)
        if chat is None:
            raise ValueError(f"no chat adapter for platform {place.platform!r}")
        if not isinstance(chat, OpensThreads):
            raise ValueError(f"the {place.platform} adapter cannot open threads")
        opened = await chat.open_thread(place.channel, opening_text(author, text))
        if model or workspace:
            await self.store.ensure_thread(opened.thread)
        if model:
            await self.store.set_model(opened.thread.key, model)
        if workspace:
            await self.store.set_workspace(opened.thread.key, workspace)
        message = IncomingMessage(
            thread=opened.thread,
            event_id=event_id or opened.message_id,
            message_id=opened.message_id,
            author=author,
            text=text,
        )
        row_id = await self.store.add_message(message, record_thread=True)
        if row_id is not None:
            actor = await self.router.actor_for(opened.thread)
            if not isinstance(actor, NotHere):
                actor.tell(c.MessageStored(message.message_id, row_id))
        log.info("thread started by %s", author.label, extra={"chat_thread": opened.thread.key})
        return opened.thread

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        if self.team is not None:
            await self.team.command(thread, by, "stop")
        await self.router.stop(thread, c.Stop(by))

    async def decide(
        self,
        thread: ThreadRef,
        handle: str,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
    ) -> DecideOutcome:
        return await self._decide(thread, c.Decide(handle, choice, by, reason))

    async def _decide(self, thread: ThreadRef, command: c.Decide) -> DecideOutcome:
        try:
            return await self.router.decide(thread, command)
        except CommandTooLong:
            # Told here, in the thread: the adapter has nothing to add.
            await self.say(
                thread,
                f"{command.by.label}: that answer is too long to hand to the bridge instance "
                "running this thread; nothing changed. Shorten the reason and answer again.",
            )
            return DecideOutcome.DECIDED

    async def _approval_reply(self, message: IncomingMessage) -> bool:
        """A typed answer (``deny: reason``) to the request waiting in the thread, here or at
        the instance that runs the thread."""
        reply = parse_reply(message.text) if not message.attachments else None
        if reply is None:  # the regular expression first: most messages cost no query
            return False
        actor = self.router.local(message.thread.key)
        if actor is not None:
            if not actor.waiting_approval():
                return False
        elif not self.cluster.shared or not await self.store.waiting_approvals(message.thread.key):
            return False
        if await self.store.add_message(message, state=st.MessageState.COMMAND) is None:
            return True  # a redelivery of an answer already taken
        # Bound to the request it names (`approve 7`) or replies to (a Matrix reply to the
        # request's message); a bare answer decides only when nothing else could be meant.
        handle = number_handle(reply.number) if reply.number is not None else None
        if handle is None and message.reply_to is not None:
            replied = await self.store.approval_by_handle(message.thread.key, message.reply_to)
            handle = replied.handle if replied is not None else None
        outcome = await self._decide(
            message.thread,
            c.Decide(handle, reply.choice, message.author, reply.reason, sent_at=message.sent_at),
        )
        if outcome is DecideOutcome.NOT_APPROVER:
            await self.say(message.thread, not_approver_text(message.author))
        elif outcome is DecideOutcome.UNKNOWN:
            await self.say(message.thread, NO_REQUEST)
        return True

    async def move_thread(self, old: ThreadRef, new: ThreadRef, by: Author) -> bool:
        """The conversation carries on under another key (a Matrix room upgrade by ``by``):
        the old key's actor here ends first (its running turn stopped), then every row of the
        thread moves in one transaction (:mod:`bridge.core.store.moves`), its directories
        with it, and what waits starts under the new key. False when nothing moved."""
        if (actor := self.router.threads.get(old.key)) is not None:
            actor.tell(c.Drain())
            actor.tell(c.Stop(by))
            with anyio.move_on_after(MOVE_WAIT):
                await actor.wait_until(lambda state: not state.in_turn)
            actor.tell(c.EndLease())
            with anyio.move_on_after(MOVE_WAIT):
                await actor.wait_ended()
            if self.router.threads.get(old.key) is actor:
                return False  # it did not end: its rows and directories stay its own
        if not await self.store.move_thread(old, new, self.leases.owner):
            return False
        move_places(self.config, old, new)
        if await self.store.has_pending(new.key):
            if not isinstance(successor := await self.router.actor_for(new), NotHere):
                successor.tell(c.MessageStored())
        return True

    async def is_conversation(self, thread: ThreadRef) -> bool:
        return await self.store.known_thread(thread.key)

    async def retitle(self, thread: ThreadRef, title: str, by: Author) -> bool:
        if not title.strip() or not await self.store.known_thread(thread.key):
            return False
        await self.store.set_title(thread.key, title, by.label)
        return True

    async def seen_since(self, platform: str, since: float) -> dict[str, list[str]]:
        return await self.store.last_seen(platform, since)

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        key = f"task|{name}"
        claim = await self.leases.claim(key)
        try:
            yield claim.granted
        finally:
            if claim.granted:
                with anyio.CancelScope(shield=True):
                    await self.leases.release(key)

    async def change(self, change: MessageChange) -> ChangeOutcome:
        if change.thread.platform not in self.adapters:
            raise ValueError(f"no chat adapter for platform {change.thread.platform!r}")
        outcome, row_id = await apply_change(self.store, change)
        if outcome is ChangeOutcome.WITHDRAWN:
            await self.say(change.thread, withdrawn_text(change))
        elif outcome is ChangeOutcome.TOLD:
            # Handed over like a message: the running turn's next model call, or the next turn.
            actor = await self.router.actor_for(change.thread)
            if not isinstance(actor, NotHere):
                actor.tell(c.MessageStored(change.message_id, row_id))
        return outcome

    # --- what chat commands use (bridge/core/commands/) ----------------------------------------

    async def conversation_reset(self, thread: ThreadRef) -> None:
        """Tell the thread's adapter, if it keeps a view of the conversation, that it was
        reset."""
        chat = self.hearing.get(thread.platform)
        if chat is not None:
            await chat.conversation_reset(thread)

    async def say(self, thread: ThreadRef, text: str) -> None:
        await self.router.say(thread, text)

    # --- start and stop --------------------------------------------------------------------------

    async def recover(self) -> None:
        """After a restart: end leftover agy processes, report broken turns, resume the inbox;
        then the schedules start (the chats are connected: a run due at start can post)."""
        try:
            await self._recover()
        finally:
            if self.scheduler is not None:
                self.scheduler.ready.set()

    async def _recover(self) -> None:
        leases = self.leases
        if self.cluster.shared:
            # Only this instance's earlier runs: other instances run their own threads, and a
            # dead one's are taken over by the sweep, which starts now the chats are connected.
            name, owner = leases.name, leases.owner
            await recovery.reap(
                self.store,
                lambda row: (row.owner or "").split("#")[0] == name and row.owner != owner,
            )
            self._tg.start_soon(leases.run, self.router, name="leases")
            return
        await recovery.reap(self.store, lambda row: True)
        await recovery.expire_approvals(self.store, self.adapters, self.metrics)
        await recovery.report_restart(
            self.store,
            self.adapters,
            functools.partial(recovery.conversation_kept, self.store, self.runtime, self.config),
        )
        for key in await self.store.threads_with_pending():
            ref = ThreadRef.from_key(key)
            if ref.platform in self.adapters and key not in self.router.threads:
                self.router.start(ref).tell(c.MessageStored())

    async def shutdown(self) -> None:
        """Interrupt running turns (their threads are told) and let them end."""
        if self.cluster.shared:
            # Another instance can carry on: let turns finish first, then hand threads over.
            await self.router.drain(self.config.store.drain_seconds)
        await self.router.shutdown(SHUTDOWN_GRACE)


@asynccontextmanager
async def open_core(
    config: Config,
    store: st.Store,
    runtime: AgyRuntime,
    adapters: dict[str, ChatAdapter],
    mcp_servers: Callable[[ThreadView], dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
    leases: Leases | None = None,
    open_process: ProcessOpener = open_agy,
    turn_policy: TurnPolicy | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Core]:
    metrics = metrics or Metrics()
    policy = turn_policy if turn_policy is not None else policy_for(config)
    leases = leases or LocalLeases("local")
    # Every text posted outside a turn's stream is scrubbed here; approvals and posted files
    # reach the audit trail here (docs/team-controls.md).
    scrub = scrubber_for(config)
    audit = AuditLog(store.database, leases.name, scrub)
    team = TeamControls(store.database, config, audit, metrics)
    chats = audited(adapters, scrub, audit)
    if team.budgets.enabled:
        policy = Chain((policy, team.policy))
    slots = ProcessSlots(config.agy.max_processes)
    disk = disk_space(config)
    hook_health = health_for(config)
    await anyio.to_thread.run_sync(disk.keep_reserve)
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        marks = Marks(lambda thread: chats[thread.platform], tg)
        # The store's disk reserve, given out when the disk fills between turns too.
        tg.start_soon(disk.keep_reserve_forever, name="disk reserve")

        def parts_for(thread: ThreadRef) -> ThreadParts:
            return ThreadParts(
                config=config,
                store=store,
                runtime=runtime,
                slots=slots,
                adapter=chats[thread.platform],
                metrics=metrics,
                marks=marks,
                open_process=open_process,
                owner=leases.owner,
                instance=leases.name,
                mcp_servers=mcp_servers,
                team=team,
                policy=policy,
                disk=disk,
                hook_health=hook_health,
            )

        cluster = Cluster(
            leases,
            store,
            config.approvals.approvers,
            frozenset(name for name, adapter in adapters.items() if single_instance(adapter)),
        )
        router = Router(
            parts_for,
            cluster,
            store,
            chats,
            metrics,
            tg,
            limit=slots.limit,
        )
        core = Core(config, store, runtime, chats, router, slots, metrics, tg, team)
        for chat in chats.values():
            if isinstance(chat, ScrubbedAdapter):
                chat.live = core.live
        core.hook_health = hook_health
        core.hearing = {n: a for n, a in adapters.items() if isinstance(a, HearsResets)}
        core.members = {n: a for n, a in adapters.items() if isinstance(a, KnowsMembers)}
        core.quiet = {n: a for n, a in adapters.items() if isinstance(a, PostsWithoutPreviews)}
        tg.start_soon(prune_daily, audit, config.bridge.audit_days, name="audit-prune")
        # Scheduled prompts run on every instance; a run is claimed in the store, so one makes it.
        core.scheduler = Scheduler(core, clock or WallClock(), leases.name)
        tg.start_soon(core.scheduler.run, name="scheduler")
        if has_forge(config):
            import aiohttp  # only where a forge is configured

            # A forge that stops answering holds no step (or the CI follower) for long.
            timeout = aiohttp.ClientTimeout(total=FORGE_TIMEOUT)
            http = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
            core.pulls = open_pulls(config, store, router, runtime, leases, audit, http, scrub)
            tg.start_soon(core.pulls.follower.run, name="ci-follower")
        metrics.set_sources(live_processes=lambda: slots.live, queued_threads=lambda: slots.queued)
        try:
            yield core
            with anyio.CancelScope(shield=True):
                await core.shutdown()
        finally:
            tg.cancel_scope.cancel()
