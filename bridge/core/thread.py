"""The life of one thread's agy: its directories, its process slot, its process, idling.

One ``ThreadWorker`` per active thread runs in the core's task group and owns that thread's
agy process (a context manager held across turns). The turns themselves, and the hand-off of
messages into a running turn, are the :class:`bridge.core.turn.TurnRunner`'s; the worker decides
when a process starts, when it is closed (idle, evicted for another thread, a restart asked
for) and what the thread is told when agy cannot start.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

import anyio

from bridge.agy.plugin import RuleTooLarge
from bridge.agy.process import AgyHandle, AgyStartError
from bridge.agy.sandbox import ATTACHMENTS_DIR
from bridge.agy.session import AgySession, ToolCall, ToolVerdict, server_name
from bridge.agy.start_failure import StartFailure, classify
from bridge.agy.turn import TurnStatus
from bridge.core.approvals import policy
from bridge.core.approvals.gate import ApprovalGate
from bridge.core.attachments import save_attachments
from bridge.core.deps import CoreDeps
from bridge.core.events import Reaction, ThreadRef
from bridge.core.guidance import build_guidance
from bridge.core.leases import Lease
from bridge.core.prompt import history_context
from bridge.core.scrub import Scrubber
from bridge.core.signals import Marks, Wakeup
from bridge.core.store import MessageState, StoredMessage, StoreError, TurnState
from bridge.core.turn import TurnRunner
from bridge.core.workspaces import Place, place_for
from bridge.core.worktrees import WorktreeError, ensure_worktree, is_repository, remove_worktree

log = logging.getLogger(__name__)


class ThreadWorker:
    def __init__(
        self,
        ref: ThreadRef,
        deps: CoreDeps,
        marks: Marks,
        on_exit: Callable[[ThreadWorker, bool], None],
        lease: Lease | None = None,
    ):
        self.ref = ref
        self.key = ref.key
        self.deps = deps
        self.adapter = deps.adapters[ref.platform]
        self.marks = marks
        self.wakeup = Wakeup()
        self.scrub = Scrubber(deps.config.secret_values())
        self.place: Place | None = None
        self.proc: AgyHandle | None = None
        self._on_exit = on_exit
        self._session: AgySession | None = None
        self._runner: TurnRunner | None = None
        self._restart_requested = False
        self.gate: ApprovalGate | None = None
        # This instance runs the thread while it holds the lease (always, on SQLite).
        self.lease = lease or Lease(ref.key)

    # --- signals from the core ------------------------------------------------------------

    def notify(self) -> None:
        """New work may be waiting (a message, a command)."""
        self.wakeup.set()

    def message_stored(self) -> None:
        """A message joined the inbox: a running turn's next hook call may take it."""
        # Only a turn makes hook calls; between turns the next turn takes the message (and a
        # turn about to start counts as running from before it takes its messages).
        if self._session is not None and self._runner is not None and self._runner.in_turn:
            self._session.mark_pending()
        self.notify()

    @property
    def busy(self) -> bool:
        return self._runner is not None and self._runner.busy

    @property
    def in_turn(self) -> bool:
        """A turn is under way, counted from before it takes its messages from the inbox
        (``busy`` only once it runs)."""
        return self._runner is not None and self._runner.in_turn

    def interrupt(self, by: str) -> bool:
        """!stop / Stop button: SIGINT the running turn. False when nothing runs."""
        return self._runner is not None and self._runner.interrupt(by)

    async def stop_waiting(self, by: str) -> bool:
        """!stop while an approval waits: deny it and interrupt the turn. False when none
        waited (then nothing was interrupted)."""
        return self.gate is not None and await self.gate.stop(by, lambda: self.interrupt(by))

    def request_restart(self) -> None:
        """Restart the process when idle (a model switch, a new conversation)."""
        self._restart_requested = True
        self.notify()

    def _hidden_paths(self) -> tuple[Path, ...]:
        """Where no sandbox hides them, the paths the agent's read tools are refused: the
        config file (it holds the chat tokens) and the data directory."""
        if self.deps.runtime.isolation.isolated:
            return ()
        config = self.deps.config
        paths = [config.bridge.data_dir.resolve()]
        if config.source is not None:
            paths.append(config.source.resolve())
        return tuple(paths)

    # --- the worker -----------------------------------------------------------------------

    async def run(self) -> None:
        log.info("thread worker started", extra={"chat_thread": self.key})
        clean = False
        try:
            self.place = place_for(self.deps.config, self.ref)
            await self._prepare_workdir(self.place)
            mcp_servers = self.deps.mcp_servers(self) if self.deps.mcp_servers else None
            approvals = self.deps.config.approvals
            if approvals.mode != "off":
                self.gate = ApprovalGate(
                    self.ref,
                    self.deps,
                    policy.Place(
                        self.place.workdir.resolve(),
                        frozenset(server_name(name) for name in mcp_servers or {}),
                        hidden=self._hidden_paths(),
                    ),
                    lambda: self._runner.requester() if self._runner is not None else None,
                )
                await self.gate.load()
            self._session = await self.deps.runtime.prepare(
                self.place.session_dir,
                inject=self._take_injections,
                lost=self._injection_lost,
                mcp_servers=mcp_servers,
                guidance=build_guidance(self.deps.config.agy.guidance),
                notes=self.place.notes,
                decide=self._decide_tool if self.gate is not None else None,
                approval_timeout=approvals.timeout,
            )
            self._runner = TurnRunner(
                self.ref, self.deps, self._session, self.marks, self._ensure_saved, self.notify
            )
            self._runner.context = self.lease.context
            async with self.lease.guard():
                if self.lease.report_takeover is not None:
                    await self.lease.report_takeover()
                while True:
                    self.wakeup.clear()
                    # A draining or stopping instance starts no new process: what waits stays
                    # pending (for another instance, or this one's next start).
                    if self.lease.draining or not await self.deps.store.has_pending(self.key):
                        break
                    await self._serve()
            clean = not self.lease.lost.is_set()
        except WorktreeError as exc:
            await self._fail_pending(f"cannot set up this thread's git worktree: {exc}")
        except RuleTooLarge as exc:
            await self._fail_pending(f"the agent's rules are too long: {exc}")
        except OSError as exc:
            await self._fail_pending(f"cannot prepare the thread's directories: {exc}")
        except Exception:
            # One thread's failure must not take the bridge (and every other thread) down.
            log.exception("thread worker failed", extra={"chat_thread": self.key})
            with anyio.CancelScope(shield=True):
                await self._fail_pending(
                    "the bridge hit an internal error in this thread (see its log); "
                    "send your message again"
                )
        finally:
            with anyio.CancelScope(shield=True):
                if self._session is not None:
                    await self._session.close()
                await self._cleanup_workdir()
            # Only a worker that ran out of work may hand a late message to a successor; one
            # that was cancelled (shutdown) must not start another.
            self._on_exit(self, clean)
            log.info("thread worker stopped", extra={"chat_thread": self.key})

    async def _take_injections(self, conversation_id: str) -> list[str]:
        if self._runner is None:
            return []
        return await self._runner.take_injections(conversation_id)

    async def _decide_tool(self, call: ToolCall) -> ToolVerdict:
        if self.gate is None:
            return ToolVerdict(allow=True)
        return await self.gate.decide(call)

    async def _injection_lost(self) -> None:
        if self._runner is not None:
            await self._runner.injection_lost()

    async def _serve(self) -> None:
        """Hold a process slot and run turns until idle, evicted, or agy is gone."""
        async with self.deps.slots.hold(self.key, self._tell_queued, self.notify) as slot:
            fresh_retry = True
            while True:
                try:
                    again = await self._with_process(slot.evict)
                except AgyStartError as exc:
                    if fresh_retry and await self._drop_conversation_after(exc):
                        fresh_retry = False
                        continue
                    await self._start_failed(exc)
                    return
                if not again:
                    return

    async def _with_process(self, evict: anyio.Event) -> bool:
        """One agy process. Returns True to start another at once (after !stop, a restart)."""
        assert self.place is not None
        thread = await self.deps.store.thread(self.key)
        # Off the event loop: building the sandbox reads files the agent wrote (``.git``).
        spec = await anyio.to_thread.run_sync(
            functools.partial(
                self.deps.runtime.spec,
                self.place.session_dir,
                self.place.workdir,
                model=thread.model or self.deps.config.agy.model or None,
                conversation=thread.conversation_id,
            )
        )
        self._restart_requested = False
        async with self.deps.open_process(spec, self._bad_line) as proc:
            await self.deps.store.add_process(
                proc.pid, self.key, self.deps.runtime.run_marker, owner=self.deps.leases.owner
            )
            try:
                self.proc = proc
                if proc.conversation_id != thread.conversation_id:
                    await self.deps.store.set_conversation(
                        self.key, proc.conversation_id, instance=self.deps.leases.name
                    )
                log.info(
                    "agy ready",
                    extra={"chat_thread": self.key, "conversation": proc.conversation_id},
                )
                return await self._turns(proc, evict)
            finally:
                self.proc = None
                with anyio.CancelScope(shield=True):
                    await self.deps.store.remove_process(proc.pid)

    async def _turns(self, proc: AgyHandle, evict: anyio.Event) -> bool:
        assert self._runner is not None
        # What the worker knows of its inbox saves reading it. Every way a message becomes
        # pending wakes the worker (stored, put back by the runner, another instance's notice),
        # so after a turn nobody woke it during, nothing waits; after a wake-up from idle (or
        # on a new process) something most likely does, and the turn's own transaction finds
        # out. Only a wake-up during a turn is worth a read: what it announced may already have
        # been taken (injected), and then a read is cheaper than a turn's write transaction.
        woken = True
        while True:
            if not proc.alive:
                return False
            if self._restart_requested:
                return True
            signalled = self.wakeup.is_set
            self.wakeup.clear()
            self.deps.slots.set_idle(self.key, False)
            waiting = woken or (
                signalled
                and not self.lease.draining
                and await self.deps.store.has_pending(self.key)
            )
            # A draining instance starts no new turn. Looked at after the read above and with
            # no pause before the turn counts as running (``in_turn``): a drain that began
            # meanwhile either sees this turn running and waits for it, or is seen here.
            if self.lease.draining:
                waiting = False
            woken = False
            result = await self._runner.run(proc) if waiting else None
            if self.gate is not None:
                await self.gate.abandon()  # agy is past any request it made
            if result is not None:
                if result.exit_wait == 0 or not proc.alive:
                    continue
                # agy is on its way out (an error result, a SIGINT): let it go before the next
                # turn rather than hand that turn to a dying process.
                with anyio.move_on_after(result.exit_wait):
                    await proc.drain()
                if result.state is TurnState.INTERRUPTED:
                    # Carry on with a new process, same conversation (unless the instance
                    # drains or stops: then nothing new starts). One that ignored SIGINT is
                    # wedged: closing it ends its process group.
                    return not proc.alive and not self.lease.draining
                continue
            self.deps.slots.set_idle(self.key, True)
            if not await self._idle(evict):
                return False
            woken = True

    async def _idle(self, evict: anyio.Event) -> bool:
        """Wait for work. False when the process should close (idle too long, or evicted)."""
        # An eviction wakes the worker too (``slots.hold(..., on_evict=self.notify)``), so one
        # wait covers both, with no task per idle spell.
        with anyio.move_on_after(self.deps.config.agy.idle_timeout) as idle:
            if not evict.is_set():
                await self.wakeup.wait()
        if idle.cancelled_caught or evict.is_set():
            log.info(
                "closing agy for another thread" if evict.is_set() else "closing idle agy",
                extra={"chat_thread": self.key},
            )
            return False
        return True

    # --- directories ------------------------------------------------------------------------

    async def _prepare_workdir(self, place: Place) -> None:
        if place.repo is None or place.branch is None:
            place.workdir.mkdir(parents=True, exist_ok=True)
            return
        if not await is_repository(place.repo):
            raise WorktreeError(f"{place.repo} is not a git repository (worktree = true)")
        sandbox = self.deps.runtime.isolation.sandbox
        if await ensure_worktree(place.repo, place.workdir, place.branch, sandbox=sandbox):
            await self._say(
                f"This thread works on its own branch `{place.branch}` (a git worktree of "
                f"`{place.repo}`), so other threads do not touch its files."
            )

    async def _cleanup_workdir(self) -> None:
        place = self.place
        if (
            place is None
            or place.repo is None
            or place.workspace is None
            or place.workspace.worktree_cleanup != "remove"
        ):
            return
        try:
            await remove_worktree(
                place.repo, place.workdir, sandbox=self.deps.runtime.isolation.sandbox
            )
        except OSError:
            log.warning(
                "could not remove a worktree", exc_info=True, extra={"chat_thread": self.key}
            )

    # --- attachments ------------------------------------------------------------------------

    async def fetch_in_background(self, message_id: int) -> None:
        """Save a busy thread's new attachments now, so the hook can inject the message."""
        pending = {m.id: m for m in await self.deps.store.pending(self.key)}
        message = pending.get(message_id)
        if message is not None and not message.ready:
            await self._ensure_saved(message)
            if self._session is not None:
                self._session.mark_pending()  # now it can be injected

    async def _ensure_saved(self, message: StoredMessage) -> StoredMessage:
        if message.ready:
            return message
        assert self.place is not None
        saved = await save_attachments(
            self.adapter,
            message.attachments,
            self.place.session_dir / ATTACHMENTS_DIR,
            f"{message.id:06d}",
            self.deps.config.bridge.max_attachment_bytes,
            # The sessions' folder is the bridge's own (hidden from every sandbox).
            root=self.place.session_dir.parent,
        )
        await self.deps.store.set_saved(message.id, saved)
        return message.model_copy(update={"saved": saved})

    # --- when agy cannot start --------------------------------------------------------------

    async def _drop_conversation_after(self, exc: AgyStartError) -> bool:
        """agy no longer knows the conversation it was to resume: drop the id and start fresh
        (once). Any other failure (signed out, quota, ...) keeps the id, so the thread has its
        context again once the operator has fixed agy."""
        thread = await self.deps.store.thread(self.key)
        if classify(exc) is not StartFailure.CONVERSATION_UNKNOWN or not thread.conversation_id:
            return False
        await self.deps.store.set_conversation(self.key, None)
        detail = self.scrub(exc.exit.stderr_tail.strip()) if exc.exit else ""
        context = await history_context(self.deps.store, self.key)
        if self._runner is not None:
            self._runner.context = context
        await self._say(
            "⚠️ agy could not resume this thread's conversation"
            + (f" ({detail})" if detail else "")
            + ". Starting a fresh conversation"
            + (
                ", given this thread's history as context."
                if context
                else "; earlier context is not available to the agent."
            )
        )
        return True

    async def _start_failed(self, exc: AgyStartError) -> None:
        failure = classify(exc)
        text = self.scrub(
            f"agy refused to start: {exc.message}" if exc.kind == "error_result" else exc.message
        )
        if failure is not StartFailure.OTHER:
            text += f"\n{failure.advice}"
        if failure is StartFailure.MODEL and (await self.deps.store.thread(self.key)).model:
            # A model agy refuses (a result before init) must not wedge the thread.
            await self.deps.store.set_model(self.key, None)
            text += "\nThis thread's model was reset to the default."
        await self._fail_pending(text)

    async def _fail_pending(self, reason: str) -> None:
        """agy could not take these messages: say so, and leave the thread usable."""
        self.deps.metrics.error("agy_start")
        try:
            failed = await self.deps.store.take_pending(
                self.key, MessageState.FAILED, None, ready_only=False
            )
        except StoreError as exc:
            log.error("could not mark messages failed: %s", exc, extra={"chat_thread": self.key})
            failed = []
        for message in failed:
            self.marks.put(self.ref, message.message_id, Reaction.FAILED)
        await self._say(f"⚠️ {reason}")

    # --- helpers ----------------------------------------------------------------------------

    async def _tell_queued(self, position: int) -> None:
        limit = self.deps.slots.limit
        await self._say(
            f"All {limit} agent slots are busy; this thread is number {position} in line and "
            "starts as soon as one is free."
        )

    async def _say(self, text: str) -> None:
        try:
            await self.adapter.post_message(self.ref, text)
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": self.key})

    def _bad_line(self, reason: str) -> None:
        self.deps.metrics.bad_line()
        log.warning("unreadable line from agy: %s", reason, extra={"chat_thread": self.key})


__all__ = ["ThreadWorker", "TurnStatus"]
