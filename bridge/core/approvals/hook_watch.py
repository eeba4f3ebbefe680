"""A gate that notices when agy does not run its hooks.

Some agy builds load the bridge's plugin but never run its hooks (reported for logins by API
key; plugin hooks not loaded on some builds). Then every tool call runs without the gate.
Two watches catch them:

- **No hook at all.** agy calls the ``PreInvocation`` hook, and waits for its answer, before
  every model call, so before the model can ask for any tool. Two proofs, the first of which
  comes stops the process at once:

  - a model's answer in the stream (an ``agent_response`` or a tool step of the session)
    while no hook call of the process has reached the listener: the model was called without
    the hook. This needs no clock;
  - no hook call within ``seconds`` of agy's first line of the turn: the model's answer, and
    so its tool calls, may be on its way, and the process is stopped before it arrives. The
    window counts from agy's first line, not from the bridge's write: on a loaded host agy may
    read its turn late, and that wait is not its hooks' (a window from the write stopped
    healthy agy processes on a busy machine).
- **No PreToolUse.** A build may run ``PreInvocation`` and still skip ``PreToolUse``. Every tool
  step of the stream is matched to a ``PreToolUse`` call (:mod:`.step_match`). A step that
  ended ``DONE`` undecided, or that has waited ``grace`` seconds since it was announced with no
  hook call, stops agy's whole process group. No hook announces a tool before it starts, so a
  tool quicker than the bridge's read of the stream has run by then: what is guaranteed is
  that nothing of that process runs past that point (no later model call, no later tool).

Either way the thread is told why and what to check, and ``bypassed`` tells the thread's state
machine: no new turn starts in that thread until an agy that runs the hooks is back
(:mod:`.hook_health`).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

from bridge.agy import wire
from bridge.agy.process import AgyHandle, AgyOutput, AgyProcess
from bridge.core.approvals.step_match import Seen, StepLedger, ToolStep, gated_step

log = logging.getLogger(__name__)

T = TypeVar("T")
Say = Callable[[str], Awaitable[None]]
PROOF_SECONDS = 2.0
# How long an announced tool step may wait for its PreToolUse call: the hook's handler starts
# right after agy announces the step, and its call reaches the listener in milliseconds; the
# margin is for a loaded machine (a step whose tool ends first is judged at its end anyway).
MIN_STEP_GRACE = 10.0

CHECK = (
    "Check the login kind (hooks have been reported not to run for logins by API key), "
    "agy's version (`agy --version`), and run `agy-bridge doctor --live`. New turns in this "
    "thread start only with an agy that runs the hooks."
)


def unhooked_text(seconds: float) -> str:
    return (
        "🛑 agy did not run the bridge's hooks: its turn started, but no hook call reached the "
        f"bridge within {seconds:g} seconds, so its tool calls would have run without "
        f"approval. agy was stopped before it could run any. {CHECK}"
    )


def undecided_text(step: ToolStep, ran: bool) -> str:
    how = (
        "it ran to its end before the bridge could stop it"
        if ran
        else "it was stopped while it ran"
    )
    return (
        f"🛑 agy ran a tool call the bridge's gate never decided (`{step.name}`, step "
        f"{step.index}): this agy runs the bridge's session hooks but not its `PreToolUse` "
        f"hook, so its tool calls skip approval. agy and everything it started were stopped; "
        f"{how}. {CHECK}"
    )


class HookWatch:
    """Whether the thread's running agy reaches the listener through its hooks."""

    def __init__(
        self,
        seconds: float = PROOF_SECONDS,
        bypassed: Callable[[], None] = lambda: None,
        grace: float | None = None,
    ) -> None:
        self.seconds = seconds
        self.bypassed = bypassed  # the thread is held (see the module's text)
        # [approvals] hook_step_grace, when set (the tests' shorter wait); else the margin.
        self.grace = grace if grace is not None else max(MIN_STEP_GRACE, 5 * seconds)
        self._seen = anyio.Event()
        self._began = anyio.Event()  # agy's first line of the turn being watched
        self.proven = False
        self.stopped = False
        self.ledger = StepLedger()
        self._conversation = ""

    def new_process(self, conversation_id: str = "") -> None:
        """A new agy process: it has to prove its hooks again."""
        self._seen = anyio.Event()
        self.proven = False
        self.stopped = False
        self.ledger = StepLedger()
        self._conversation = conversation_id

    def wanted(self, proc: AgyHandle | None) -> bool:
        """Whether ``proc`` must still prove its hooks. Only an agy process has any: a handle
        that is not one (the tests' scripted doubles) is not watched."""
        return isinstance(proc, AgyProcess) and not self.proven

    def heard(self) -> None:
        """A hook call of this session reached the listener."""
        self._seen.set()

    def tool_call(self, name: str, step_idx: int | None, conversation_id: str) -> None:
        """A ``PreToolUse`` call reached the gate (before it is decided: a person may take
        minutes). A subagent's, under its own conversation, has no step in the stream."""
        self.heard()
        if not conversation_id or not self._conversation or conversation_id == self._conversation:
            self.ledger.decided(name, step_idx)

    async def turn(
        self,
        proc: AgyHandle,
        run: Callable[[AgyHandle], Awaitable[T]],
        say: Say,
    ) -> T:
        """Run one turn on ``proc``; stop it when its hooks do not run."""
        if not isinstance(proc, AgyProcess):
            return await run(proc)
        async with anyio.create_task_group() as tg:
            stop = _Stopper(self, proc, say, self.bypassed)
            self._began = anyio.Event()
            if self.wanted(proc):
                tg.start_soon(self._deadline, stop)
            result = await run(_Watched(proc, lambda outs: self._look(outs, stop, tg)))
            tg.cancel_scope.cancel()
        if stop.untold is not None:
            await say(stop.untold)
        if self.wanted(proc) and not self._seen.is_set() and not self.stopped:
            # The turn ended (a text-only answer) before the deadline, and no hook ran.
            await stop(unhooked_text(self.seconds))
        return result

    def _look(self, outputs: list[AgyOutput], stop: _Stopper, tg: TaskGroup) -> None:
        for out in outputs:
            self._began.set()
            if not isinstance(out, wire.StepUpdateEvent):
                continue
            if self._unproven_answer(out.step_update):
                stop.now(unhooked_text(self.seconds))
            step = gated_step(out.step_update, self._conversation)
            if step is None:
                continue
            seen = self.ledger.seen(step)
            if seen is Seen.BYPASSED:
                stop.now(undecided_text(step, ran=True))
            elif seen is Seen.WAIT:
                tg.start_soon(self._step_deadline, step, stop)

    def _unproven_answer(self, step: wire.StepUpdate) -> bool:
        """A model's answer of the session while no hook call of this process was heard: the
        hook runs, and is answered, before the model call that made it. (A subagent's steps
        are left out: the simulator announces one before its parent's first model call.)"""
        if self.proven or self._seen.is_set():
            return False
        theirs = step.conversation_id and self._conversation
        mine = not theirs or step.conversation_id == self._conversation
        answer = step.step_type == "agent_response" or gated_step(step, self._conversation)
        return bool(mine and answer)

    async def _step_deadline(self, step: ToolStep, stop: _Stopper) -> None:
        await anyio.sleep(self.grace)
        if self.ledger.undecided(step):
            stop.now(undecided_text(step, ran=False))

    async def _deadline(self, stop: _Stopper) -> None:
        await self._began.wait()
        with anyio.move_on_after(self.seconds):
            await self._seen.wait()
            self.proven = True
            return
        await stop(unhooked_text(self.seconds))


class _Stopper:
    """Stops one agy process for good, once, and tells the thread and its machine."""

    def __init__(
        self,
        watch: HookWatch,
        proc: AgyProcess,
        say: Say,
        bypassed: Callable[[], None],
    ) -> None:
        self.watch, self.proc, self.say, self.bypassed = watch, proc, say, bypassed
        self.untold: str | None = None

    def now(self, text: str) -> None:
        """Kill at once (in the stream reader's own step); the thread is told when the turn
        has ended (it ends now: its agy is gone)."""
        if self._kill(text):
            self.untold = text

    async def __call__(self, text: str) -> None:
        if self._kill(text):
            await self.say(text)

    def _kill(self, why: str) -> bool:
        if self.watch.stopped:
            return False
        self.watch.stopped = True
        log.error("agy bypassed the gate's hooks: stopping it (%s)", why.split(":", 1)[0])
        try:
            # agy leads its own process group: it and whatever it started end now.
            os.killpg(self.proc.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.bypassed()
        return True


class _Watched:
    """``proc`` as the turn reads it, every batch of its stream looked at first."""

    def __init__(self, proc: AgyProcess, look: Callable[[list[AgyOutput]], None]) -> None:
        self._proc, self._look = proc, look

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def conversation_id(self) -> str:
        return self._proc.conversation_id

    @property
    def alive(self) -> bool:
        return self._proc.alive

    async def send_turn(self, blocks: list[str]) -> None:
        await self._proc.send_turn(blocks)

    async def next(self) -> AgyOutput:
        out = await self._proc.next()
        self._look([out])
        return out

    async def next_batch(self) -> list[AgyOutput]:
        batch = await self._proc.next_batch()
        self._look(batch)
        return batch

    async def drain(self) -> None:
        await self._proc.drain()

    def interrupt(self) -> None:
        self._proc.interrupt()

    async def after_turn(self, *, interrupted: bool) -> list[str]:
        return await self._proc.after_turn(interrupted=interrupted)
