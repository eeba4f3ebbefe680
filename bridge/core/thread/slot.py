"""A thread's hold on one of the bridge's process slots (:mod:`bridge.core.slots`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from bridge.core.slots import ProcessSlots
from bridge.core.thread import commands as c


class ThreadSlot:
    def __init__(
        self,
        key: str,
        slots: ProcessSlots,
        tell: Callable[[c.Command], None],
        tell_queued: Callable[[int], Awaitable[None]],
    ):
        self._key = key
        self._slots = slots
        self._tell = tell
        self._tell_queued = tell_queued
        self._release = anyio.Event()
        self._taken = False  # taken at once (given back by hand), not held by a task

    def take_now(self) -> bool:
        """A free slot taken at once (most of the time): no task waits in line for it."""
        self._taken = self._slots.take_now(self._key, lambda: self._tell(c.Evicted()))
        return self._taken

    async def hold(self) -> None:
        """Wait in line for a slot, and hold it until released."""
        self._release = release = anyio.Event()
        evicted = lambda: self._tell(c.Evicted())  # noqa: E731
        async with self._slots.hold(self._key, self._tell_queued, evicted):
            self._tell(c.SlotGranted())
            await release.wait()

    def release(self) -> None:
        if self._taken:
            self._taken = False
            self._slots.give_back(self._key)
        else:
            self._release.set()

    def give_back_if_taken(self) -> None:
        """The actor ends (maybe cancelled while it held a slot taken at once)."""
        if self._taken:
            self._taken = False
            self._slots.give_back(self._key)

    def set_idle(self, idle: bool) -> None:
        self._slots.set_idle(self._key, idle)
