"""At most ``max_processes`` live agy processes, shared fairly between threads.

A thread holds a slot while its process lives. When every slot is taken, a thread that needs
one asks the least recently used idle holder to close its process (it resumes by id later);
when no holder is idle, the thread waits in line and is told its place.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio


@dataclass
class _Holder:
    key: str
    idle: bool = False
    since: float = field(default_factory=time.monotonic)
    evict: anyio.Event = field(default_factory=anyio.Event)
    # Also told of an eviction (the worker's wake-up, so an idle worker needs no task of its
    # own waiting on ``evict``).
    on_evict: Callable[[], None] | None = None

    def ask_to_leave(self) -> None:
        self.evict.set()
        if self.on_evict is not None:
            self.on_evict()


@dataclass
class _Waiter:
    key: str
    granted: anyio.Event = field(default_factory=anyio.Event)


class ProcessSlots:
    def __init__(self, limit: int):
        self.limit = limit
        self._holders: dict[str, _Holder] = {}
        self._waiters: list[_Waiter] = []

    @property
    def live(self) -> int:
        return len(self._holders)

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def position(self, key: str) -> int | None:
        for index, waiter in enumerate(self._waiters, start=1):
            if waiter.key == key:
                return index
        return None

    def take_now(self, key: str, on_evict: Callable[[], None] | None = None) -> bool:
        """Take a slot for ``key`` if one is free with nobody in line (no waiting, no task);
        give it back with :meth:`give_back`. False: :meth:`hold` waits in line."""
        if len(self._holders) >= self.limit or self._waiters:
            return False
        self._holders[key] = _Holder(key, on_evict=on_evict)
        return True

    def give_back(self, key: str) -> None:
        self._holders.pop(key, None)
        self._grant()

    @asynccontextmanager
    async def hold(
        self,
        key: str,
        on_queued: Callable[[int], Awaitable[None]],
        on_evict: Callable[[], None] | None = None,
    ) -> AsyncIterator[_Holder]:
        """Hold a slot for ``key``; the holder's ``evict`` event (and ``on_evict``, when given)
        asks it to let go."""
        if len(self._holders) >= self.limit or self._waiters:
            waiter = _Waiter(key)
            self._waiters.append(waiter)
            try:
                self._evict_one()
                if not waiter.granted.is_set():
                    await on_queued(self.position(key) or len(self._waiters))
                await waiter.granted.wait()
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.granted.is_set():
                    # Granted while being cancelled: hand the slot on.
                    self._holders.pop(key, None)
                    self._grant()
                raise
        else:
            self._holders[key] = _Holder(key)
        holder = self._holders[key]
        holder.on_evict = on_evict
        try:
            yield holder
        finally:
            self._holders.pop(key, None)
            self._grant()

    def set_idle(self, key: str, idle: bool) -> None:
        holder = self._holders.get(key)
        if holder is not None:
            holder.idle = idle
            holder.since = time.monotonic()
            if idle and self._waiters:
                self._evict_one()

    def _evict_one(self) -> None:
        idle = [h for h in self._holders.values() if h.idle and not h.evict.is_set()]
        if idle and len(self._holders) >= self.limit:
            min(idle, key=lambda h: h.since).ask_to_leave()

    def _grant(self) -> None:
        while self._waiters and len(self._holders) < self.limit:
            waiter = self._waiters.pop(0)
            self._holders[waiter.key] = _Holder(waiter.key)
            waiter.granted.set()
        if self._waiters:
            self._evict_one()
