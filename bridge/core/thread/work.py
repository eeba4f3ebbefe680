"""The I/O a thread's actor carries out: its directories, slot, agy process and turns.

Each method does one effect of :mod:`bridge.core.thread.effects` and tells the actor what came
of it (a command); none of them decides what happens next (the state machine does).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from bridge.agy.plugin import RuleTooLarge
from bridge.agy.process import AgyHandle, AgyStartError
from bridge.agy.session import AgySession, ToolCall, ToolVerdict, server_name
from bridge.core.approvals import policy
from bridge.core.approvals.gate import ApprovalGate
from bridge.core.approvals.hook_watch import HookWatch
from bridge.core.approvals.secrets import scrubber_for, secret_paths
from bridge.core.events import Author, ChatAdapter, Reaction, ThreadRef
from bridge.core.guidance import build_guidance
from bridge.core.store.rows import StoredMessage, TurnState
from bridge.core.thread import commands as c
from bridge.core.thread import failures
from bridge.core.thread.continuity import Continuity
from bridge.core.thread.parts import ThreadParts
from bridge.core.thread.place import (
    bring_branch_back,
    cleanup_workdir,
    ensure_saved,
    hidden_paths,
    prepare_workdir,
)
from bridge.core.thread.slot import ThreadSlot
from bridge.core.thread.turn_policy import Ask, Verdict
from bridge.core.turn import TurnResult, TurnRunner
from bridge.core.workspaces import Place, place_for
from bridge.core.worktrees import WorktreeError

log = logging.getLogger(__name__)


class ThreadWork:
    def __init__(
        self,
        ref: ThreadRef,
        parts: ThreadParts,
        tell: Callable[[c.Command], None],
        report_takeover: Callable[[bool | None], Awaitable[None]] | None,
    ):
        self.ref = ref
        self.key = ref.key
        self.parts = parts
        self.adapter: ChatAdapter = parts.adapter
        self._tell = tell
        self._report_takeover = report_takeover
        self.scrub = scrubber_for(parts.config)
        self.place: Place | None = None
        self.proc: AgyHandle | None = None
        self.gate: ApprovalGate | None = None
        self.hooks = hook_watch(parts, self.key, tell)
        self._session: AgySession | None = None
        self._runner: TurnRunner | None = None
        self._scopes: set[anyio.CancelScope] = set()
        self.slot = ThreadSlot(self.key, parts.slots, tell, self._tell_queued)
        # The running process's turn requests (closed: let agy go).
        self._turns: MemoryObjectSendStream[None] | None = None
        self._start_error: AgyStartError | None = None

    # --- the actor's tasks -------------------------------------------------------------------

    @contextmanager
    def scope(self) -> Iterator[None]:
        """A task of this thread's work: ended by :meth:`cancel`."""
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)

    def cancel(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    async def close(self) -> None:
        """The actor ends: the session's listener, then (when so configured) the worktree."""
        self.slot.give_back_if_taken()
        if self._session is not None:
            await self._session.close()
        await cleanup_workdir(self.place, self.parts.runtime.isolation.sandbox, self.key)

    # --- preparing ---------------------------------------------------------------------------

    async def prepare(self) -> c.Command:
        try:
            await self._prepare()
        except WorktreeError as exc:
            return c.Failed(f"cannot set up this thread's git worktree: {exc}")
        except RuleTooLarge as exc:
            return c.Failed(f"the agent's rules are too long: {exc}")
        except OSError as exc:
            return c.Failed(f"cannot prepare the thread's directories: {exc}")
        if self._report_takeover is not None:
            # The takeover's notice says whether the conversation is kept.
            await self._report_takeover(await self._continuity().reachable())
        return c.Prepared()

    def _continuity(self) -> Continuity:
        assert self.place is not None
        taken_over = self._report_takeover is not None
        return Continuity(self.key, self.parts, self.place.session_dir, taken_over, self.say)

    async def _prepare(self) -> None:
        parts, config = self.parts, self.parts.config
        row = await parts.store.thread(self.ref.key)
        self.place = place = place_for(config, self.ref, row.workspace)
        notice = await prepare_workdir(place, parts.runtime.isolation.sandbox)
        if notice is not None:
            await self.say(notice)
        # The chat tools read the thread through this object (a ThreadView).
        mcp_servers = parts.mcp_servers(self) if parts.mcp_servers else None
        approvals = config.approvals
        if approvals.mode != "off":
            self.gate = gate_for(
                self.ref,
                self.adapter,
                parts,
                place,
                mcp_servers,
                lambda: self._runner.requester() if self._runner is not None else None,
                lambda waiting: self._tell(c.Asking(waiting)),
            )
            await self.gate.load()
        self._session = await parts.runtime.prepare(
            place.session_dir,
            inject=self._take_injections,
            lost=self._injection_lost,
            mcp_servers=mcp_servers,
            guidance=build_guidance(config.agy.guidance),
            notes=place.notes,
            decide=self._decide_tool if self.gate is not None else None,
            approval_timeout=approvals.timeout,
        )
        self._runner = TurnRunner(
            self.ref,
            self.adapter,
            parts.store,
            parts.metrics,
            self._session,
            parts.marks,
            turn_timeout=config.agy.turn_timeout,
            owner=parts.owner,
            save=self._ensure_saved,
            began=self._turn_began,
            ask_inject=lambda ask: self._tell(c.InjectAsked(ask)),
            finishing=lambda: self._tell(c.TurnFinishing()),
            requeued=lambda: self._tell(c.MessageStored()),
            scrub=self.scrub,
            team=parts.team,
            settle=self._bring_branch_back,
            disk=parts.disk,
            workdir=place.workdir,
        )

    async def _bring_branch_back(self) -> list[str]:
        return await bring_branch_back(self.place, self.parts.runtime.isolation.sandbox, self.key)

    async def has_pending(self) -> bool:
        return await self.parts.store.has_pending(self.key)

    # --- the process ----------------------------------------------------------------------

    async def run_process(self) -> None:
        """Start agy and run its turns, one at a time, as they are asked for, until closed."""
        parts, place = self.parts, self.place
        assert place is not None
        assert self._runner is not None
        await self._continuity().carry_on(self._runner)
        thread = await parts.store.thread(self.key)
        # Off the event loop: building the sandbox reads files the agent wrote (``.git``).
        spec = await anyio.to_thread.run_sync(
            functools.partial(
                parts.runtime.spec,
                place.session_dir,
                place.workdir,
                model=thread.model or parts.config.agy.model or None,
                conversation=thread.conversation_id,
                repo=place.repo,
            )
        )
        async with parts.open_process(spec, self._bad_line) as proc:
            await parts.store.add_process(
                proc.pid, self.key, parts.runtime.run_marker, owner=parts.owner
            )
            try:
                self.proc = proc
                if self._runner is not None:
                    self._runner.usage = thread.usage  # what the turn policy is shown
                self.hooks.new_process(proc.conversation_id)
                if proc.conversation_id != thread.conversation_id:
                    await parts.store.set_conversation(
                        self.key, proc.conversation_id, instance=parts.instance
                    )
                log.info(
                    "agy ready",
                    extra={"chat_thread": self.key, "conversation": proc.conversation_id},
                )
                # Turns run in this task: one task holds agy for its whole life.
                self._turns, requests = anyio.create_memory_object_stream[None](math.inf)
                self._tell(c.ProcessReady())
                with requests:
                    async for _ in requests:
                        self._tell(await self.run_turn())
            finally:
                self.proc = None
                with anyio.CancelScope(shield=True):
                    await parts.store.remove_process(proc.pid)
        self._tell(c.ProcessClosed())

    @property
    def idle_timeout(self) -> float:
        return self.parts.config.agy.idle_timeout

    def start_turn(self) -> None:
        assert self._turns is not None
        self._turns.send_nowait(None)

    def close_process(self) -> None:
        if self._turns is not None:
            self._turns.close()
            self._turns = None

    async def start_failed(self, exc: AgyStartError) -> bool:
        """Keep why agy did not start; whether a fresh conversation is worth a try."""
        self._start_error = exc
        return await failures.conversation_unknown(exc, self.parts.store, self.key)

    async def drop_conversation(self) -> None:
        assert self._start_error is not None and self._runner is not None
        self._runner.context = await failures.drop_conversation(
            self._start_error, self.parts.store, self.key, self.scrub, self.say
        )

    async def report_start_failure(self) -> None:
        assert self._start_error is not None
        text = await failures.start_failure_text(
            self._start_error, self.parts.store, self.key, self.scrub
        )
        await self.fail_pending(text)

    # --- turns --------------------------------------------------------------------------------

    async def run_turn(self) -> c.TurnEnded:
        proc, runner = self.proc, self._runner
        assert runner is not None
        if proc is None or not proc.alive:
            return c.TurnEnded(taken=False, after=c.After.GONE)
        if self.gate is not None:
            result = await self.hooks.turn(proc, runner.run, self.say)
        else:
            result = await runner.run(proc)
        if self.gate is not None:
            await self.gate.abandon()  # agy is past any request it made
        return c.TurnEnded(taken=result is not None, after=await after_turn(proc, result))

    def answer(self, verdict: Verdict) -> None:
        """The turn policy's verdict, for the turn that asked (it waits on it)."""
        if self._runner is not None:
            self._runner.answer(verdict)

    def interrupt(self, by: str) -> bool:
        return self._runner is not None and self._runner.interrupt(by)

    async def deny_and_interrupt(self, by: str) -> bool:
        """Deny the waiting request with the turn interrupted first; False when none waited."""
        return self.gate is not None and await self.gate.stop(by, lambda: self.interrupt(by))

    def _turn_began(self, ask: Ask) -> None:
        if self.gate is not None and self.hooks.wanted(self.proc):
            self.flag_hook()  # its first hook call must reach the listener (hook_watch)
        self._tell(c.TurnBegan(ask))

    def flag_hook(self) -> None:
        if self._session is not None:
            self._session.mark_pending()

    def mark(self, message_id: str, reaction: Reaction) -> None:
        if reaction is Reaction.QUEUED:
            self.parts.metrics.queued(self.ref.platform)
        self.parts.marks.put(self.ref, message_id, reaction)

    async def _take_injections(self, conversation_id: str) -> list[str]:
        self.hooks.heard()
        if self._runner is None:
            return []
        return await self._runner.take_injections(conversation_id)

    async def _injection_lost(self) -> None:
        if self._runner is not None:
            await self._runner.injection_lost()

    async def _decide_tool(self, call: ToolCall) -> ToolVerdict:
        self.hooks.tool_call(call.name, call.step_idx, call.conversation_id)
        if self.gate is None:
            return ToolVerdict(allow=True)
        return await self.gate.decide(call)

    # --- messages -----------------------------------------------------------------------------

    async def fetch_in_background(self, row_id: int) -> None:
        """Save a busy thread's new attachments now, so the hook can inject the message."""
        pending = {m.id: m for m in await self.parts.store.pending(self.key)}
        message = pending.get(row_id)
        if message is not None and not message.ready:
            await self._ensure_saved(message)
            self.flag_hook()  # now it can be injected

    async def _ensure_saved(self, message: StoredMessage) -> StoredMessage:
        assert self.place is not None
        limit = self.parts.config.bridge.max_attachment_bytes
        return await ensure_saved(message, self.adapter, self.parts.store, self.place, limit)

    async def history(self, limit: int) -> list[tuple[float, str, str]]:
        return await self.parts.store.history(self.key, limit)

    async def fail_pending(self, reason: str) -> None:
        p = self.parts
        await failures.fail_pending(self.ref, p.store, p.marks, p.metrics, self.say, reason)

    async def say(self, text: str) -> None:
        try:
            await self.adapter.post_message(self.ref, text)
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": self.key})

    async def _tell_queued(self, position: int) -> None:
        await self.say(queued_text(self.parts.slots.limit, position))

    def _bad_line(self, reason: str) -> None:
        self.parts.metrics.bad_line()
        log.warning("unreadable line from agy: %s", reason, extra={"chat_thread": self.key})


def hook_watch(parts: ThreadParts, key: str, tell: Callable[[c.Command], None]) -> HookWatch:
    """The thread's watch on agy's hooks. When agy ran (or would have run) a tool without the
    gate, the thread is held, in its machine and for the thread's next actors."""
    health = parts.hook_health

    def bypassed() -> None:
        if health is not None:
            health.hold(key)
        tell(c.HooksBypassed())

    approvals = parts.config.approvals
    return HookWatch(approvals.hook_proof_seconds, bypassed, approvals.hook_step_grace)


def queued_text(limit: int, position: int) -> str:
    return (
        f"All {limit} agent slots are busy; this thread is number {position} in line and "
        "starts as soon as one is free."
    )


async def after_turn(proc: AgyHandle, result: TurnResult | None) -> c.After:
    if result is not None and result.exit_wait and proc.alive:
        # agy is on its way out (an error result, a SIGINT): let it go before the next
        # turn rather than hand that turn to a dying process.
        with anyio.move_on_after(result.exit_wait):
            await proc.drain()
        if result.state is TurnState.INTERRUPTED:
            # Exited: carry on with a new process, same conversation. One that ignored
            # SIGINT is wedged: closing it ends its process group.
            return c.After.WEDGED if proc.alive else c.After.RESTART
    return c.After.CARRIES_ON if proc.alive else c.After.GONE


def gate_for(
    ref: ThreadRef,
    adapter: ChatAdapter,
    parts: ThreadParts,
    place: Place,
    mcp_servers: dict[str, Any] | None,
    requester: Callable[[], Author | None],
    asking: Callable[[bool], None],
) -> ApprovalGate:
    """The thread's approval gate ([approvals] mode is not "off"), for its place."""
    config = parts.config
    return ApprovalGate(
        ref,
        adapter,
        parts.store,
        parts.metrics,
        config.approvals,
        policy.Place(
            place.workdir.resolve(),
            frozenset(server_name(name) for name in mcp_servers or {}),
            hidden=hidden_paths(config, parts.runtime.isolation),
            secrets=secret_paths(config),
        ),
        requester,
        asking,
    )
