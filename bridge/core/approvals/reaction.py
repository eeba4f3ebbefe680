"""When a thread's approval requests were last posted or decided, to tell a bare typed answer
(no request named) that may have been written for another request: see the gate's
``REACTION_SECONDS``."""

from __future__ import annotations

import time
from datetime import datetime


class ReactionClock:
    """The last request event of one thread, by two clocks: the bridge's monotonic one (when
    the bridge handles an answer) and the wall clock (to compare with when the person sent it,
    by the chat's clock)."""

    def __init__(self) -> None:
        self._last = float("-inf")
        self._last_wall = float("-inf")

    def mark(self) -> None:
        """A request was posted (after the post returned: the chat had shown it by then) or
        decided."""
        self._last, self._last_wall = time.monotonic(), time.time()

    def too_soon(self, sent_at: datetime | None, window: float) -> bool:
        """Whether a bare answer came within ``window`` of the last event: when the bridge
        handles it, or when its author sent it. The second is an extra refusal, never a looser
        check: an answer handled late (a loaded host, a notification from another instance)
        may have been written before the request it would decide was shown. Without
        ``sent_at`` (a platform that gives none) only the first."""
        if time.monotonic() - self._last < window:
            return True
        return sent_at is not None and sent_at.timestamp() - self._last_wall < window
