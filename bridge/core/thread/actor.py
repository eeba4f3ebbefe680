"""One task per thread: it carries out what the thread's state machine decides.

Whoever has news for the thread calls :meth:`ThreadActor.tell` with a command; the transition
is made there and then (pure, no wait), the effects that need no I/O are done at once, and the
rest go into the actor's mailbox, which its one task carries out in order. The long pieces (the
process slot, agy itself, a turn, the idle timer) run as the actor's own tasks and report back
with commands of their own. :mod:`bridge.core.thread.parts` builds what the effects use.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

import anyio
from anyio.abc import TaskGroup

from bridge.agy.process import AgyStartError
from bridge.agy.turn import TurnStatus
from bridge.core.events import DecideOutcome, Reaction, ThreadRef
from bridge.core.thread import commands as c
from bridge.core.thread import effects as e
from bridge.core.thread.machine import Phase, State, handle
from bridge.core.thread.parts import ThreadParts
from bridge.core.thread.work import ThreadWork

log = logging.getLogger(__name__)

INTERNAL_ERROR = (
    "the bridge hit an internal error in this thread (see its log); send your message again"
)


class ThreadActor:
    def __init__(
        self,
        ref: ThreadRef,
        parts: ThreadParts,
        on_exit: Callable[[ThreadActor], None],
        report_takeover: Callable[[bool | None], Awaitable[None]] | None = None,
    ):
        self.ref = ref
        self.key = ref.key
        held = parts.hook_health is not None and parts.hook_health.held(ref.key)
        self.state = State(unhooked=held)
        self._policy = parts.policy
        self._on_exit = on_exit
        # The mailbox: effects in order, and a wake-up for the actor's task when it waits.
        self._mailbox: deque[e.Queued] = deque()
        self._arrived = anyio.Event()
        # The idle spell's timer: when it rings, and which spell it is for.
        self._idle: tuple[float, int] | None = None
        self.work = ThreadWork(ref, parts, self.tell, report_takeover)
        self._tg: TaskGroup | None = None
        # Set at the next transition, for whoever waits on one (made only when someone does).
        self._changed: anyio.Event | None = None
        # Set once the actor's task has ended and the router has let it go.
        self._ended: anyio.Event | None = None
        self._over = False

    # --- what the rest of the bridge sees ---------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.state.busy

    @property
    def in_turn(self) -> bool:
        return self.state.in_turn

    @property
    def proc(self) -> Any:
        return self.work.proc

    @property
    def place(self) -> Any:
        return self.work.place

    @property
    def gate(self) -> Any:
        return self.work.gate

    def tell(self, command: c.Command) -> None:
        """Hand the thread a command: the transition now, its effects at once or in order."""
        self.state, effects = handle(self.state, command, self._policy)
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        for effect in effects:
            if isinstance(effect, e.Immediate):
                self._now(effect)
            else:
                self._post(effect)

    def _post(self, effect: e.Queued) -> None:
        self._mailbox.append(effect)
        self._arrived.set()

    async def wait_until(self, predicate: Callable[[State], bool]) -> None:
        """Until the thread's state satisfies ``predicate`` (it changes only in :meth:`tell`,
        and when the actor ends)."""
        while not predicate(self.state):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def wait_ended(self) -> None:
        """Until the actor's task has ended (its session closed, the router told)."""
        if self._over:
            return
        if self._ended is None:
            self._ended = anyio.Event()
        await self._ended.wait()

    async def decide(self, command: c.Decide) -> DecideOutcome:
        """An approval answer, to the gate that holds the request."""
        gate = self.work.gate
        if gate is None or self.state.gone:
            return DecideOutcome.UNKNOWN
        return await gate.resolve(
            command.handle, command.choice, command.by, command.reason, sent_at=command.sent_at
        )

    def waiting_approval(self) -> bool:
        return self.state.asking

    # --- the task ---------------------------------------------------------------------------

    async def run(self) -> None:
        log.info("thread worker started", extra={"chat_thread": self.key})
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self.tell(c.Begin())
                try:
                    await self._loop()
                finally:
                    self.work.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.work.close()
            if not self.state.gone:
                # Cancelled from outside (the bridge stops): nothing may start a successor.
                self.state = State(phase=Phase.GONE)
            self._mailbox.clear()  # gone: no transition has effects any more
            self._on_exit(self)
            self._over = True
            for event in (self._changed, self._ended):
                if event is not None:
                    event.set()
            log.info("thread worker stopped", extra={"chat_thread": self.key})

    async def _next(self) -> e.Queued:
        """The next effect; meanwhile, the idle timer rings when its time comes (here, so that
        an idle thread costs no task of its own)."""
        while not self._mailbox:
            self._arrived = anyio.Event()
            timer = self._idle
            if timer is None:
                await self._arrived.wait()
                continue
            with anyio.move_on_after(timer[0] - anyio.current_time()):
                await self._arrived.wait()
            if not self._mailbox and self._idle is timer and anyio.current_time() >= timer[0]:
                self._idle = None
                log.info("closing idle agy", extra={"chat_thread": self.key})
                self.tell(c.IdleTimeout(timer[1]))
        return self._mailbox.popleft()

    async def _loop(self) -> None:
        while True:
            effect = await self._next()
            if isinstance(effect, e.Exit):
                return
            try:
                await self._carry_out(effect)
            except Exception:
                # One thread's failure must not take the bridge (and every other thread) down.
                log.exception("thread worker failed", extra={"chat_thread": self.key})
                self.tell(c.Failed(INTERNAL_ERROR))

    def _spawn(self, body: Callable[[], Awaitable[object]], name: str) -> None:
        assert self._tg is not None

        async def guarded() -> None:
            with self.work.scope():
                try:
                    await body()
                except AgyStartError as exc:
                    self.tell(c.StartFailed(await self.work.start_failed(exc)))
                except Exception:
                    log.exception("thread worker failed", extra={"chat_thread": self.key})
                    self.tell(c.Failed(INTERNAL_ERROR))

        self._tg.start_soon(guarded, name=f"{name} {self.key}")

    # --- effects: every one of effects.Effect, checked by the type checker --------------------

    def _now(self, effect: e.Immediate) -> None:
        work = self.work
        match effect:
            case e.Answer(verdict):
                work.answer(verdict)
            case e.FlagHook():
                work.flag_hook()
            case e.MarkQueued(message_id):
                work.mark(message_id, Reaction.QUEUED)
            case e.Interrupt(by):
                if not work.interrupt(by):
                    # The machine asks only while a turn runs, and the runner runs it then.
                    log.warning("no turn to interrupt", extra={"chat_thread": self.key})
            case e.SetIdle(idle):
                work.slot.set_idle(idle)
            case e.RunTurn():
                work.start_turn()
            case e.StartIdleTimer(spell):
                self._idle = (anyio.current_time() + work.idle_timeout, spell)
                self._arrived.set()  # the waiting task looks at the new time
            case e.StopIdleTimer():
                self._idle = None
            case e.ForgetAllowList():
                if work.gate is not None:
                    work.gate.forget_allow_list()
            case e.CancelWork(lost):
                if lost:
                    log.warning("lease lost to another instance", extra={"chat_thread": self.key})
                work.cancel()
            case _:
                assert_never(effect)

    async def _carry_out(self, effect: e.Queued) -> None:
        work = self.work
        match effect:
            case e.Prepare():
                self.tell(await work.prepare())
            case e.CheckInbox():
                self.tell(c.InboxChecked(await work.has_pending()))
            case e.AcquireSlot():
                if work.slot.take_now():
                    self.tell(c.SlotGranted())
                else:
                    self._spawn(work.slot.hold, "slot")
            case e.ReleaseSlot():
                work.slot.release()
            case e.StartProcess():
                self._spawn(work.run_process, "agy")
            case e.CloseProcess():
                work.close_process()
            case e.FetchAttachments(row_id):
                self._spawn(lambda: work.fetch_in_background(row_id), "files")
            case e.DropConversation():
                await work.drop_conversation()
            case e.ReportStartFailure():
                await work.report_start_failure()
            case e.DenyAndInterrupt(by):
                if not await work.deny_and_interrupt(by):
                    self.tell(c.NoRequestWaited(by))  # answered meanwhile: the machine decides
            case e.Say(text):
                await work.say(text)
            case e.FailPending(reason):
                with anyio.CancelScope(shield=True):
                    await work.fail_pending(reason)
            case e.Exit():
                pass  # the loop ends on it before it gets here
            case _:
                assert_never(effect)


__all__ = ["ThreadActor", "TurnStatus"]
