"""One send budget for the whole account: Synapse limits messages per account, not per room.

Synapse's ``rc_message`` (default 0.2 events/s, burst 10) counts every event the bot sends, in
all rooms together. So the pace of the streamed edits of one reply depends on how many replies
stream at once, and on what the homeserver allows, which the bot learns from its 429s (the
``retry_after_ms`` of a limited send is about one event's share of the rate).

Three kinds of send share the budget:

- **final**: a reply's last state and the notices; they wait out any limit, patiently;
- **ordinary**: reactions, posted messages and files;
- **intermediate**: streamed edits; they are dropped at the first 429 (the next one carries
  the text anyway), pause while the account is limited or a final waits, and slow down as
  more replies stream.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio


class Priority(enum.Enum):
    FINAL = "final"
    ORDINARY = "ordinary"
    INTERMEDIATE = "intermediate"


@dataclass(frozen=True)
class PacingTuning:
    # The edit interval of a reply when nothing limits the account.
    edit_interval: float = 1.0
    # The share of the learned rate left to streamed edits (the rest: finals, new messages).
    intermediate_share: float = 0.5
    # A learned limit is forgotten after this long without a 429.
    forget_after: float = 600.0
    # The longest pause between two streamed edits of one reply.
    max_edit_interval: float = 120.0


class AccountPacer:
    """Shared by every reply and send of one adapter."""

    def __init__(self, tuning: PacingTuning | None = None) -> None:
        self._tuning = tuning or PacingTuning()
        self.streaming = 0
        self._finals_waiting = 0
        self._limited_until = -math.inf
        self._last_limit = -math.inf
        # Events per second the homeserver allows this account, once a 429 told us.
        self._rate: float | None = None

    def limited(self, retry_after: float) -> None:
        """A send was refused with a 429 asking to wait ``retry_after`` seconds."""
        now = anyio.current_time()
        wait = max(retry_after, 0.2)
        self._limited_until = max(self._limited_until, now + wait)
        self._last_limit = now
        rate = 1.0 / wait
        self._rate = rate if self._rate is None else min(self._rate, rate)

    def _known_rate(self) -> float | None:
        if self._rate is None:
            return None
        if anyio.current_time() - self._last_limit > self._tuning.forget_after:
            self._rate = None
        return self._rate

    def edit_interval(self) -> float:
        """How long a streaming reply rests between two rounds of edits."""
        tuning = self._tuning
        rate = self._known_rate()
        if rate is None:
            return tuning.edit_interval
        share = rate * tuning.intermediate_share
        interval = max(self.streaming, 1) / share
        return min(max(tuning.edit_interval, interval), tuning.max_edit_interval)

    def intermediate_wait(self) -> float:
        """Seconds before a streamed edit may go (0: now)."""
        now = anyio.current_time()
        if now < self._limited_until:
            return self._limited_until - now
        if self._finals_waiting:
            return self.edit_interval()
        return 0.0

    @contextmanager
    def final(self) -> Iterator[None]:
        """While a final send waits, streamed edits give way."""
        self._finals_waiting += 1
        try:
            yield
        finally:
            self._finals_waiting -= 1

    @contextmanager
    def stream(self) -> Iterator[None]:
        """A reply streams for the length of the block."""
        self.streaming += 1
        try:
            yield
        finally:
            self.streaming -= 1
