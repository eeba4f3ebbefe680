"""A gate that notices when agy does not run its hooks.

Some agy builds load the bridge's plugin but never run its hooks (reported for logins by API
key; plugin hooks not loaded on some builds). Then every tool call runs without the gate.
agy calls the ``PreInvocation`` hook before every model call, so before the model can ask for
any tool: a turn whose process has not reached the listener within ``seconds`` of the turn's
start has no working hooks. That process is stopped at once (before the model's answer, and
so its tool calls, can arrive), and the thread is told why and what to check. A process that
has reached the listener once is proven; each new process proves itself again, so no turn of
the thread runs tools unasked until an agy that runs the hooks is back.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from bridge.agy.process import AgyHandle, AgyProcess

log = logging.getLogger(__name__)

T = TypeVar("T")
Say = Callable[[str], Awaitable[None]]
PROOF_SECONDS = 2.0


def unhooked_text(seconds: float) -> str:
    return (
        "🛑 agy did not run the bridge's hooks: its turn started, but no hook call reached the "
        f"bridge within {seconds:g} seconds, so its tool calls would have run without "
        "approval. agy was stopped before it could run any. Check the login kind (hooks have "
        "been reported not to run for logins by API key), agy's version (`agy --version`), "
        "and run `agy-bridge doctor --live`. New turns in this thread start only with an agy "
        "that runs the hooks."
    )


class HookWatch:
    """Whether the thread's running agy has reached the listener through a hook."""

    def __init__(self, seconds: float = PROOF_SECONDS) -> None:
        self.seconds = seconds
        self._seen = anyio.Event()
        self.proven = False
        self.stopped = False

    def new_process(self) -> None:
        """A new agy process: it has to prove its hooks again."""
        self._seen = anyio.Event()
        self.proven = False
        self.stopped = False

    def wanted(self, proc: AgyHandle | None) -> bool:
        """Whether ``proc`` must still prove its hooks. Only an agy process has any: a handle
        that is not one (the tests' scripted doubles) is not watched."""
        return isinstance(proc, AgyProcess) and not self.proven

    def heard(self) -> None:
        """A hook call of this session reached the listener."""
        self._seen.set()

    async def turn(
        self,
        proc: AgyHandle,
        run: Callable[[], Awaitable[T]],
        say: Callable[[str], Awaitable[None]],
    ) -> T:
        """Run one turn; stop ``proc`` when no hook call comes in time."""
        if not self.wanted(proc):
            return await run()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._deadline, proc, say)
            result = await run()
            tg.cancel_scope.cancel()
        if not self._seen.is_set() and not self.stopped:
            # The turn ended (a text-only answer) before the deadline, and no hook ran.
            await self._stop(proc, say)
        return result

    async def _deadline(self, proc: AgyHandle, say: Say) -> None:
        with anyio.move_on_after(self.seconds):
            await self._seen.wait()
            self.proven = True
            return
        await self._stop(proc, say)

    async def _stop(self, proc: AgyHandle, say: Say) -> None:
        self.stopped = True
        log.error("agy ran no hook within %.1f s of a turn's start: stopping it", self.seconds)
        if isinstance(proc, AgyProcess):
            try:
                # agy leads its own process group: it and whatever it started end now.
                os.killpg(proc.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        await say(unhooked_text(self.seconds))
