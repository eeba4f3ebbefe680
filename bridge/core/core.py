"""The core: the inbox in front of every thread's worker, commands, limits and recovery.

It implements :class:`bridge.core.events.Inbound` for the chat adapters and owns one
:class:`ThreadWorker` per active thread in its task group.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from bridge.agy.process import ProcessOpener, open_agy, reap_group
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core import store as st
from bridge.core.approvals import texts as approval_texts
from bridge.core.approvals.gate import request_of
from bridge.core.approvals.replies import parse_reply
from bridge.core.approvals.rules import shown_row
from bridge.core.cluster import Cluster, not_approver_text
from bridge.core.commands import HELP, Command, parse_command
from bridge.core.deps import CoreDeps, ThreadView
from bridge.core.events import (
    ApprovalChoice,
    ApprovalResult,
    Author,
    ChatAdapter,
    DecideOutcome,
    IncomingMessage,
    Reaction,
    SubmitOutcome,
    ThreadRef,
)
from bridge.core.leases import Lease, Leases
from bridge.core.scrub import Scrubber
from bridge.core.scrubbed import scrubbed
from bridge.core.signals import Marks
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.thread import ThreadWorker
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

RESTART_NOTICE = (
    "⚠️ The bridge restarted while the agent was working on this thread, so that turn was "
    "interrupted and its answer is lost. Messages written since then are being picked up now; "
    "repeat your last request if it still matters."
)
# How long running turns get to end on their own at shutdown before processes are stopped.
SHUTDOWN_GRACE = 10.0


class Core:
    def __init__(self, deps: CoreDeps):
        self.deps = deps
        self.store = deps.store
        self.workers: dict[str, ThreadWorker] = {}
        self.marks = Marks(self._adapter, deps.task_group)
        # Several instances on one store: which threads run here.
        self.cluster = Cluster(self, deps.leases)

    # --- Inbound -----------------------------------------------------------------------------

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        if message.thread.platform not in self.deps.adapters:
            raise ValueError(f"no chat adapter for platform {message.thread.platform!r}")
        if await self._approval_reply(message):
            return SubmitOutcome.COMMAND
        command = parse_command(message.text) if not message.attachments else None
        if command is not None:
            if await self.store.add_message(message, state=st.MessageState.COMMAND) is None:
                return SubmitOutcome.DUPLICATE
            await self._command(message, command)
            return SubmitOutcome.COMMAND
        # The message and its thread's record as a conversation: one transaction.
        row_id = await self.store.add_message(message, record_thread=True)
        if row_id is None:
            return SubmitOutcome.DUPLICATE
        worker = await self.cluster.worker_for(message.thread)
        if worker is None:
            return SubmitOutcome.ACCEPTED  # another instance runs it: the store woke that one
        if worker.busy:
            self.deps.metrics.queued(message.thread.platform)
            self.marks.put(message.thread, message.message_id, Reaction.QUEUED)
            if message.attachments:
                self._spawn(worker.fetch_in_background(row_id))
        worker.message_stored()
        return SubmitOutcome.ACCEPTED

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        worker = self.workers.get(thread.key)
        if worker is None and await self.cluster.forward(thread, "stop", by.label):
            return
        # A request waiting for approval is denied, with the turn interrupted before agy
        # reads the deny, so agy never runs it and cannot finish the turn first.
        if worker is not None and await worker.stop_waiting(by.label):
            return
        if worker is None or not worker.interrupt(by.label):
            await self._say(thread, "Nothing is running in this thread.")

    async def decide(
        self,
        thread: ThreadRef,
        handle: str,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
    ) -> DecideOutcome:
        worker = self.workers.get(thread.key)
        if worker is None:
            # Another instance may run the thread: its gate holds the request.
            return await self.cluster.forward_decision(thread, handle, choice, by, reason)
        if worker.gate is None:
            return DecideOutcome.UNKNOWN
        return await worker.gate.resolve(handle, choice, by, reason)

    async def _approval_reply(self, message: IncomingMessage) -> bool:
        """A typed answer (``deny: reason``) to the request waiting in the thread."""
        worker = self.workers.get(message.thread.key)
        if worker is None:
            return await self._forwarded_reply(message)
        if worker.gate is None or worker.gate.waiting is None:
            return False
        reply = parse_reply(message.text)
        if reply is None or message.attachments:
            return False
        if await self.store.add_message(message, state=st.MessageState.COMMAND) is None:
            return True  # a redelivery of an answer already taken
        outcome = await worker.gate.resolve(None, reply.choice, message.author, reply.reason)
        if outcome is DecideOutcome.NOT_APPROVER:
            await self._say(message.thread, not_approver_text(message.author))
        return True

    async def _forwarded_reply(self, message: IncomingMessage) -> bool:
        """A typed answer where another instance runs the thread (and asked)."""
        if not self.cluster.shared or message.attachments:
            return False
        reply = parse_reply(message.text)
        # The regular expression first: most messages are no answer and cost no query.
        if reply is None or not await self.store.waiting_approvals(message.thread.key):
            return False
        if await self.store.add_message(message, state=st.MessageState.COMMAND) is None:
            return True  # a redelivery of an answer already taken
        outcome = await self.cluster.forward_decision(
            message.thread, None, reply.choice, message.author, reply.reason
        )
        if outcome is DecideOutcome.NOT_APPROVER:
            await self._say(message.thread, not_approver_text(message.author))
        elif outcome is DecideOutcome.UNKNOWN:
            await self._say(
                message.thread, "No request waits for approval in this thread now; nothing changed."
            )
        return True

    async def is_conversation(self, thread: ThreadRef) -> bool:
        return await self.store.known_thread(thread.key)

    # --- commands ------------------------------------------------------------------------------

    async def _command(self, message: IncomingMessage, command: Command) -> None:
        thread = message.thread
        if command.name == "stop":
            await self.stop(thread, message.author)
        elif command.name == "help":
            await self._say(thread, HELP)
        elif command.name == "model":
            await self._model(thread, command.arg)
        elif command.name == "new":
            await self._new(thread, message.author)
        elif command.name == "status":
            await self._say(thread, await self._status(thread))
        elif command.name == "approvals":
            await self._approvals(thread, command.arg)
        else:
            await self._say(thread, f"Unknown command `!{command.word}`.\n{HELP}")

    async def _approvals(self, thread: ThreadRef, arg: str) -> None:
        if arg.lower() == "reset":
            removed = await self.store.clear_allowed(thread.key)
            worker = self.workers.get(thread.key)
            if worker is not None and worker.gate is not None:
                worker.gate.forget_allow_list()
            await self._say(
                thread,
                f"This thread's allow list is cleared ({removed} pattern(s) removed); "
                "those commands ask again.",
            )
            return
        if arg:
            await self._say(thread, "`!approvals` lists; `!approvals reset` clears the list.")
            return
        mode = self.deps.config.approvals.mode
        waiting = await self.store.waiting_approvals(thread.key)
        allowed = await self.store.allow_list(thread.key)
        lines = [f"• Approvals mode: `{mode}`"]
        if waiting:
            lines.append("• Waiting for approval:")
            lines += [f"  – `{w.summary}` ({w.tool})" for w in waiting]
        else:
            lines.append("• Nothing waits for approval.")
        if allowed:
            lines.append("• Allowed always in this thread:")
            lines += [f"  – `{shown_row(p)}`" for p in allowed]
        else:
            lines.append("• This thread's allow list is empty.")
        await self._say(thread, "\n".join(lines))

    async def _model(self, thread: ThreadRef, model: str) -> None:
        row = await self.store.thread(thread.key)
        if not model:
            current = row.model or self.deps.config.agy.model or "agy's default model"
            await self._say(thread, f"Model for this thread: `{current}`.")
            return
        if any(ch.isspace() for ch in model) or len(model) > 200:
            await self._say(thread, "A model id is one word, as `agy models` lists it.")
            return
        await self.store.ensure_thread(thread)
        await self.store.set_model(thread.key, model)
        worker = self.workers.get(thread.key)
        if worker is not None:
            worker.request_restart()
        else:
            await self.cluster.forward(thread, "restart", "")
        await self._say(
            thread, f"Model for this thread is now `{model}` (same conversation, from next turn)."
        )

    async def _new(self, thread: ThreadRef, by: Author) -> None:
        await self.store.reset_conversation(thread.key)
        worker = self.workers.get(thread.key)
        if worker is not None:
            if not await worker.stop_waiting(by.label):
                worker.interrupt(by.label)
            worker.request_restart()
        else:
            await self.cluster.forward(thread, "new", by.label)
        await self._say(thread, "Starting a fresh conversation from the next message.")

    async def _status(self, thread: ThreadRef) -> str:
        row = await self.store.thread(thread.key)
        worker = self.workers.get(thread.key)
        pending = await self.store.pending(thread.key)
        if worker is None or worker.proc is None:
            process = "no agy process (one starts with the next message)"
        elif worker.busy:
            process = f"agy running a turn (pid {worker.proc.pid})"
        else:
            process = f"agy idle (pid {worker.proc.pid})"
        slots = self.deps.slots
        lines = [
            await self.cluster.status_line(thread),
            f"• Process: {process}",
            f"• Conversation: `{row.conversation_id or 'none yet'}`",
            f"• Model: `{row.model or self.deps.config.agy.model or 'default'}`",
            f"• Waiting messages: {len(pending)}",
            f"• Agent slots: {slots.live}/{slots.limit} in use, {slots.queued} thread(s) in line",
            self.deps.runtime.isolation_status(),
        ]
        if (place := slots.position(thread.key)) is not None:
            lines.append(f"• This thread is number {place} in line")
        if row.usage is not None:
            u = row.usage
            lines.append(
                f"• Usage so far: {u.input_tokens:,} input, {u.output_tokens:,} output "
                f"tokens ({u.total_tokens:,} in all)"
            )
        return "\n".join(lines)

    # --- workers -------------------------------------------------------------------------------

    def _worker(self, thread: ThreadRef, lease: Lease | None = None) -> ThreadWorker:
        worker = self.workers.get(thread.key)
        if worker is None:
            worker = ThreadWorker(thread, self.deps, self.marks, self._forget, lease)
            self.workers[thread.key] = worker
            self.deps.task_group.start_soon(worker.run, name=f"thread {thread.key}")
        return worker

    def _forget(self, worker: ThreadWorker, clean: bool) -> None:
        if self.workers.get(worker.key) is worker:
            del self.workers[worker.key]
            if clean and worker.wakeup.is_set:
                # A message landed while the worker was leaving: start a new one for it.
                self._worker(worker.ref, worker.lease).notify()
            else:
                self.cluster.released(worker)

    def _adapter(self, thread: ThreadRef) -> ChatAdapter:
        return self.deps.adapters[thread.platform]

    async def _say(self, thread: ThreadRef, text: str) -> None:
        try:
            await self._adapter(thread).post_message(thread, text)
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": thread.key})

    def _spawn(self, coro: Any) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.warning("background chat call failed", exc_info=True)

        self.deps.task_group.start_soon(guarded)

    # --- start and stop --------------------------------------------------------------------------

    async def recover(self) -> None:
        """After a restart: end leftover agy processes, report broken turns, resume the inbox."""
        if self.cluster.shared:
            # Other instances run their own threads; a dead one's are taken over by the sweep,
            # which starts now that the chats are connected.
            await self.cluster.recover()
            self.deps.task_group.start_soon(self.deps.leases.run, self.cluster, name="leases")
            return
        for row in await self.store.processes():
            if await reap_group(row.pgid, row.run_marker):
                log.info(
                    "ended an agy process group left from an earlier run",
                    extra={"chat_thread": row.thread_key},
                )
            await self.store.remove_process(row.pgid)
        await self._expire_approvals()
        for turn in await self.store.running_turns():
            ref = ThreadRef.from_key(turn.thread_key)
            if ref.platform not in self.deps.adapters:
                continue  # that chat is not configured now: report it when it is
            try:
                await self._adapter(ref).post_message(ref, RESTART_NOTICE)
            except Exception:
                # Left "running": the report is tried again at the next start.
                log.warning("could not report an interrupted turn", exc_info=True)
                continue
            await self.store.finish_turn(
                turn.id, st.TurnState.INTERRUPTED, error="the bridge restarted during this turn"
            )
        for key in await self.store.threads_with_pending():
            ref = ThreadRef.from_key(key)
            if ref.platform in self.deps.adapters:
                self._worker(ref).notify()

    async def _expire_approvals(
        self,
        thread_key: str | None = None,
        reason: str = "the bridge restarted while it waited, so it was not run",
    ) -> None:
        """Requests that waited when the bridge (or, with several instances, the one running
        ``thread_key``) went down: agy is gone, so they expired."""
        for row in await self.store.waiting_approvals(thread_key):
            ref = ThreadRef.from_key(row.thread_key)
            if ref.platform not in self.deps.adapters:
                continue
            if not await self.store.settle_approval(
                row.id, st.ApprovalState.EXPIRED, reason=reason
            ):
                continue
            self.deps.metrics.approval(st.ApprovalState.EXPIRED.value)
            result = ApprovalResult(
                state=st.ApprovalState.EXPIRED.value,
                reason=reason,
                text=approval_texts.result_text(
                    row.summary, st.ApprovalState.EXPIRED, None, reason
                ),
            )
            try:
                if row.handle is None:
                    # Killed between posting the request and noting its message: say it anew.
                    await self._adapter(ref).post_message(ref, result.text)
                else:
                    await self._adapter(ref).settle_approval(
                        request_of(row, ref), row.handle, result
                    )
            except Exception:
                log.warning("could not mark a request expired", exc_info=True)

    async def shutdown(self) -> None:
        """Interrupt running turns (their threads are told) and let them end."""
        if self.cluster.shared:
            # Another instance can carry on: let turns finish first, then hand threads over.
            await self.cluster.drain(self.deps.config.store.drain_seconds)
        # No worker starts another turn from here on: what still waits stays pending for the
        # next start, instead of being taken by a turn the end of the grace would cut off.
        for worker in self.workers.values():
            worker.lease.draining = True
        busy = [w for w in self.workers.values() if w.busy]
        for worker in busy:
            worker.interrupt("the bridge shutting down")
        with anyio.move_on_after(SHUTDOWN_GRACE):
            while any(w.busy for w in busy):  # noqa: ASYNC110
                await anyio.sleep(0.05)


@asynccontextmanager
async def open_core(
    config: Config,
    store: Store,
    runtime: AgyRuntime,
    adapters: dict[str, ChatAdapter],
    mcp_servers: Callable[[ThreadView], dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
    leases: Leases | None = None,
    open_process: ProcessOpener = open_agy,
) -> AsyncIterator[Core]:
    metrics = metrics or Metrics()
    async with anyio.create_task_group() as tg:
        deps = CoreDeps(
            metrics=metrics,
            config=config,
            store=store,
            runtime=runtime,
            slots=ProcessSlots(config.agy.max_processes),
            # Every text posted outside a turn's stream is scrubbed here.
            adapters=scrubbed(adapters, Scrubber(config.secret_values())),
            task_group=tg,
            mcp_servers=mcp_servers,
            open_process=open_process,
        )
        if leases is not None:
            deps.leases = leases
        core = Core(deps)
        metrics.set_sources(
            live_processes=lambda: deps.slots.live, queued_threads=lambda: deps.slots.queued
        )
        try:
            yield core
            with anyio.CancelScope(shield=True):
                await core.shutdown()
        finally:
            tg.cancel_scope.cancel()
