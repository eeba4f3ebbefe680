"""A throttled flush pump: one task shows a live reply's new state at most once per interval.

The turn only pokes the pump (``append`` and ``tool`` never wait for the chat server); the
pump calls the reply's ``flush`` when poked, then rests for the interval before the next call,
so any number of pokes in between coalesce into one flush. ``stop`` lets a flush in flight
finish and ends the pump; the reply then shows its final state itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

log = logging.getLogger(__name__)

# What a flush returns: None to rest the usual interval, or the seconds after which it wants
# to run again even without a poke (text held back briefly, a rate budget that refills).
Flush = Callable[[], Awaitable[float | None]]


class FlushPump:
    """Run :meth:`run` in a task group; :meth:`poke` on news; :meth:`stop` at the end.

    ``interval`` is asked before each rest, so a caller can slow the pump down (a rate budget
    running low) without restarting it.
    """

    def __init__(self, flush: Flush, interval: Callable[[], float], *, name: str = "") -> None:
        self._flush = flush
        self._interval = interval
        self._name = name
        self._wake = anyio.Event()
        self._stopping = False
        self._started = False
        self._done = anyio.Event()
        self._rest: anyio.CancelScope | None = None
        self.flushes = 0

    @property
    def stopping(self) -> bool:
        return self._stopping

    def poke(self) -> None:
        """Something changed: flush soon (at once if the pump has rested long enough)."""
        self._wake.set()

    async def run(self) -> None:
        self._started = True
        try:
            while not self._stopping:
                await self._wake.wait()
                if self._stopping:
                    return
                self._wake = anyio.Event()
                again: float | None = None
                try:
                    again = await self._flush()
                except Exception:
                    # One failed update must not end the pump (or the task group running it):
                    # the final state is shown by the reply itself anyway.
                    log.exception("a live update of %s failed", self._name or "a reply")
                self.flushes += 1
                with anyio.CancelScope() as scope:
                    self._rest = scope
                    if self._stopping:
                        scope.cancel()
                    await anyio.sleep(self._interval() if again is None else max(again, 0.0))
                self._rest = None
                if again is not None:
                    self._wake.set()
        finally:
            self._done.set()

    async def stop(self) -> None:
        """No flush after this one: wait for a flush in flight, then return."""
        self._stopping = True
        self._wake.set()
        if self._rest is not None:
            self._rest.cancel()
        if self._started:
            await self._done.wait()
