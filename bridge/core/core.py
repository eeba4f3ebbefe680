"""The core, inbound: what a chat event is (an approval answer, a command, a message), stored,
then routed to the thread (:mod:`bridge.core.router`).

It implements :class:`bridge.core.events.Inbound` for the chat adapters. Each thread's work is
its actor's (:mod:`bridge.core.thread.actor`); restart recovery is :mod:`bridge.core.recovery`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from bridge.agy.process import ProcessOpener, open_agy
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core import recovery, retry
from bridge.core import store as st
from bridge.core.approvals.replies import parse_reply
from bridge.core.approvals.texts import not_approver_text
from bridge.core.changes import apply_change, withdrawn_text
from bridge.core.cluster import Cluster
from bridge.core.commands import HELP, Command, parse_command
from bridge.core.events import (
    ApprovalChoice,
    Author,
    ChangeOutcome,
    ChatAdapter,
    DecideOutcome,
    IncomingMessage,
    MessageChange,
    SubmitOutcome,
    ThreadRef,
)
from bridge.core.leases import CommandTooLong, Leases, LocalLeases
from bridge.core.router import NotHere, Routed, Router
from bridge.core.scrub import Scrubber
from bridge.core.scrubbed import scrubbed
from bridge.core.signals import Marks
from bridge.core.slots import ProcessSlots
from bridge.core.status import approvals_text, status_text
from bridge.core.thread import commands as c
from bridge.core.thread.actor import ThreadActor
from bridge.core.thread.machine import NOTHING_RUNNING
from bridge.core.thread.parts import ThreadParts
from bridge.core.thread.view import ThreadView
from bridge.core.workspaces import move_places
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

# How long running turns get to end on their own at shutdown before processes are stopped.
SHUTDOWN_GRACE = 10.0
# How long a thread moving to another key waits for its stopped turn, then for its actor to end.
MOVE_WAIT = 30.0
NO_REQUEST = "No request waits for approval in this thread now; nothing changed."


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
    ):
        self.config = config
        self.store = store
        self.runtime = runtime
        self.adapters = adapters
        self.router = router
        self.cluster = router.cluster
        self.leases = router.cluster.leases
        self.slots = slots
        self.metrics = metrics
        self._tg = task_group
        self._commands: dict[str, Callable[[IncomingMessage, Command], Awaitable[None]]] = {
            "stop": lambda m, _: self.stop(m.thread, m.author),
            "help": lambda m, _: self._say(m.thread, HELP),
            "model": self._model,
            "new": self._new,
            "status": self._status,
            "approvals": self._approvals,
            "retry": self._retry,
        }

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
            await self._commands.get(command.name, self._unknown)(message, command)
            return SubmitOutcome.COMMAND
        # The message and its thread's record as a conversation: one transaction.
        row_id = await self.store.add_message(message, record_thread=True)
        if row_id is None:
            return SubmitOutcome.DUPLICATE
        actor = await self.router.actor_for(message.thread)
        if not isinstance(actor, NotHere):  # else another instance runs it, or will
            actor.tell(c.MessageStored(message.message_id, row_id, bool(message.attachments)))
        return SubmitOutcome.ACCEPTED

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        if await self.router.send(thread, c.Stop(by)) is Routed.NOWHERE:
            await self._say(thread, NOTHING_RUNNING)

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
            await self._say(
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
        outcome = await self._decide(
            message.thread, c.Decide(None, reply.choice, message.author, reply.reason)
        )
        if outcome is DecideOutcome.NOT_APPROVER:
            await self._say(message.thread, not_approver_text(message.author))
        elif outcome is DecideOutcome.UNKNOWN:
            await self._say(message.thread, NO_REQUEST)
        return True

    async def move_thread(self, old: ThreadRef, new: ThreadRef, by: Author) -> bool:
        """The conversation carries on under another key (a Matrix room upgrade by ``by``):
        the old key's actor here ends first (its running turn stopped), then every row of the
        thread moves in one transaction (:mod:`bridge.core.store_moves`), its directories
        with it, and what waits starts under the new key. False when nothing moved."""
        if (actor := self.router.threads.get(old.key)) is not None:
            actor.tell(c.Drain())
            actor.tell(c.Stop(by))
            with anyio.move_on_after(MOVE_WAIT):
                while actor.in_turn:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            actor.tell(c.EndLease())
            with anyio.move_on_after(MOVE_WAIT):
                while self.router.threads.get(old.key) is actor:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
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
            await self._say(change.thread, withdrawn_text(change))
        elif outcome is ChangeOutcome.TOLD:
            # Handed over like a message: the running turn's next model call, or the next turn.
            actor = await self.router.actor_for(change.thread)
            if not isinstance(actor, NotHere):
                actor.tell(c.MessageStored(change.message_id, row_id))
        return outcome

    # --- commands ------------------------------------------------------------------------------

    async def _unknown(self, message: IncomingMessage, command: Command) -> None:
        await self._say(message.thread, f"Unknown command `!{command.word}`.\n{HELP}")

    async def _approvals(self, message: IncomingMessage, command: Command) -> None:
        thread, arg = message.thread, command.arg
        if arg.lower() == "reset":
            removed = await self.store.clear_allowed(thread.key)
            await self.router.send(thread, c.ForgetAllowList())
            await self._say(
                thread,
                f"This thread's allow list is cleared ({removed} pattern(s) removed); "
                "those commands ask again.",
            )
        elif arg:
            await self._say(thread, "`!approvals` lists; `!approvals reset` clears the list.")
        else:
            mode = self.config.approvals.mode
            await self._say(thread, await approvals_text(self.store, thread.key, mode))

    async def _model(self, message: IncomingMessage, command: Command) -> None:
        thread, model = message.thread, command.arg
        if not model:
            row = await self.store.thread(thread.key)
            current = row.model or self.config.agy.model or "agy's default model"
            await self._say(thread, f"Model for this thread: `{current}`.")
            return
        if any(ch.isspace() for ch in model) or len(model) > 200:
            await self._say(thread, "A model id is one word, as `agy models` lists it.")
            return
        await self.store.ensure_thread(thread)
        await self.store.set_model(thread.key, model)
        await self.router.send(thread, c.SetModel(model, message.author))
        await self._say(
            thread, f"Model for this thread is now `{model}` (same conversation, from next turn)."
        )

    async def _new(self, message: IncomingMessage, _: Command) -> None:
        await self.store.reset_conversation(message.thread.key)
        await self.router.send(message.thread, c.NewConversation(message.author))
        await self._say(message.thread, "Starting a fresh conversation from the next message.")

    async def _retry(self, message: IncomingMessage, _: Command) -> None:
        """The request a restart or failover cut off, sent again on a person's word, once."""
        thread, by = message.thread, message.author
        again = await retry.messages_again(self.store, message)
        if isinstance(again, str):
            await self._say(thread, again)
            return
        turn_id, stored = again
        log.info(
            "a cut-off request was sent again (!retry) by %s",
            by.label,
            extra={"chat_thread": thread.key, "turn": turn_id},
        )
        await self._say(thread, retry.sent_text(by, len(stored)))
        actor = await self.router.actor_for(thread)
        if not isinstance(actor, NotHere):
            for message_id, row_id in stored:
                actor.tell(c.MessageStored(message_id, row_id))

    async def _status(self, message: IncomingMessage, _: Command) -> None:
        thread = message.thread
        actor = self.router.local(thread.key)
        text = await status_text(
            self.store,
            thread.key,
            actor,
            self.slots,
            await self.cluster.status_line(thread, actor is not None),
            self.config.agy.model,
            self.runtime.isolation_status(),
            self.config.approvals,
            functools.partial(
                recovery.conversation_kept, self.store, self.runtime, self.config, thread
            ),
        )
        await self._say(thread, text)

    async def _say(self, thread: ThreadRef, text: str) -> None:
        await self.router.say(thread, text)

    # --- start and stop --------------------------------------------------------------------------

    async def recover(self) -> None:
        """After a restart: end leftover agy processes, report broken turns, resume the inbox."""
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
) -> AsyncIterator[Core]:
    metrics = metrics or Metrics()
    leases = leases or LocalLeases("local")
    # Every text posted outside a turn's stream is scrubbed here.
    chats = scrubbed(adapters, Scrubber(config.secret_values()))
    slots = ProcessSlots(config.agy.max_processes)
    async with anyio.create_task_group() as tg:
        marks = Marks(lambda thread: chats[thread.platform], tg)

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
            )

        cluster = Cluster(leases, store, config.approvals.approvers)
        router = Router(
            parts_for,
            cluster,
            store,
            chats,
            metrics,
            tg,
            limit=slots.limit,
        )
        core = Core(config, store, runtime, chats, router, slots, metrics, tg)
        metrics.set_sources(live_processes=lambda: slots.live, queued_threads=lambda: slots.queued)
        try:
            yield core
            with anyio.CancelScope(shield=True):
                await core.shutdown()
        finally:
            tg.cancel_scope.cancel()
