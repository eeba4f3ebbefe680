"""Sends per room, in order, with bounded handling of ``M_LIMIT_EXCEEDED`` (HTTP 429).

nio would retry a rate-limited request forever (``max_limit_exceeded=None``) and sleeps inside
whichever task made it. The adapter sets nio to give the 429 back at once and retries here:
each room has its own lock, so a room that waits out a rate limit keeps its own messages in
order without holding up the sends of any other room. How long a send keeps trying depends on
its :class:`Priority`: a final answer far longer than an ordinary send, a streamed edit not at
all (the next edit carries its text). Every 429 is reported to the account's pacer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
from nio import ErrorResponse

from .pacing import Priority

log = logging.getLogger(__name__)

R = TypeVar("R")

LIMIT_EXCEEDED = "M_LIMIT_EXCEEDED"


@dataclass(frozen=True)
class RetryPolicy:
    # Attempts in all (the first one included) before the 429 is returned to the caller.
    attempts: int = 8
    # The same for a final answer: at Synapse's default pace (one event per 5 s for the
    # account), 20 streaming rooms need minutes to get every final edit through.
    final_attempts: int = 200
    # When the server names no delay.
    default_wait: float = 1.0
    # The longest single wait: a server asking for minutes gets a shorter wait and a new try.
    max_wait: float = 30.0


def retry_after(response: object) -> float | None:
    """Seconds to wait when ``response`` is a rate-limit error, else None."""
    if not isinstance(response, ErrorResponse):
        return None
    transport = getattr(response, "transport_response", None)
    status = getattr(transport, "status", None)
    if response.status_code != LIMIT_EXCEEDED and status != 429:
        return None
    return (response.retry_after_ms or 0) / 1000


class RoomSendQueue:
    """Serializes sends per room and retries rate-limited ones a bounded number of times."""

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._policy = policy or RetryPolicy()
        self._sleep = sleep
        # Told of every retry (for metrics); set by the adapter's observe_retries.
        self.on_retry: Callable[[str], None] | None = None
        # Told of every 429 and the wait it asked for (the account's pacer).
        self.on_limited: Callable[[float], None] | None = None
        self._locks: dict[str, anyio.Lock] = {}

    def _lock(self, room_id: str) -> anyio.Lock:
        lock = self._locks.get(room_id)
        if lock is None:
            lock = self._locks[room_id] = anyio.Lock()
        return lock

    async def send(
        self,
        room_id: str,
        call: Callable[[], Awaitable[R]],
        priority: Priority = Priority.ORDINARY,
    ) -> R:
        """Run ``call`` (one request) for ``room_id`` after the room's earlier sends.

        Returns the last response: a success, another error, or the 429 after the last try.
        """
        async with self._lock(room_id):
            return await self.retrying(call, priority)

    def _attempts(self, priority: Priority) -> int:
        if priority is Priority.INTERMEDIATE:
            return 1
        if priority is Priority.FINAL:
            return max(self._policy.final_attempts, self._policy.attempts)
        return self._policy.attempts

    async def retrying(
        self, call: Callable[[], Awaitable[R]], priority: Priority = Priority.ORDINARY
    ) -> R:
        """Run ``call``, waiting out rate limits; no per-room ordering."""
        policy = self._policy
        attempts = self._attempts(priority)
        attempt = 1
        while True:
            response = await call()
            wait = retry_after(response)
            if wait is not None and self.on_limited is not None:
                self.on_limited(wait or policy.default_wait)
            if wait is None or attempt >= attempts:
                if wait is not None and priority is not Priority.INTERMEDIATE:
                    log.warning("still rate limited after %d attempts; giving up", attempt)
                return response
            wait = min(wait or policy.default_wait, policy.max_wait)
            log.info("rate limited by the homeserver; retrying in %.1f s", wait)
            if self.on_retry is not None:
                self.on_retry("429")
            await self._sleep(wait)
            attempt += 1
