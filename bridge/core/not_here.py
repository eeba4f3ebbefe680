"""Why a thread's actor is not on this instance (the router's answer to "run it here")."""

from __future__ import annotations

import enum


class NotHere(enum.Enum):
    """Why a thread's actor is not on this instance."""

    DRAINING = "draining"  # this instance takes no new thread
    NOT_SERVED = "not served"  # its chat runs on the leader instance
    FULL = "full"  # at the process limit: another instance with room takes it
    HELD = "held"  # another instance holds its lease
