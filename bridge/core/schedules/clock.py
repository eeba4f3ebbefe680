"""The scheduler's clock: the wall clock in production, one a test moves by hand."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

import anyio


class Clock(Protocol):
    def now(self) -> datetime:
        """The wall-clock time, aware, in UTC."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
