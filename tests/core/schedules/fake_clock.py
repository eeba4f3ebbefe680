"""A clock a test moves by hand: the scheduler's loop ticks once each time it is moved."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio


def utc(text: str) -> datetime:
    """``"2027-01-04 09:00"`` as an aware UTC time."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class FakeClock:
    def __init__(self, at: datetime) -> None:
        self.at = at
        self.slept: list[float] = []
        self._wake = anyio.Event()
        self._asleep = anyio.Event()

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        wake = self._wake
        self._asleep.set()
        await wake.wait()

    async def idle(self) -> None:
        """Until the loop has finished a tick and sleeps."""
        with anyio.fail_after(30):
            await self._asleep.wait()

    async def move_to(self, at: datetime) -> None:
        """Set the time (forwards or back), and wait for the tick that reads it to finish."""
        await self.idle()
        self._asleep = anyio.Event()
        self.at = at
        wake, self._wake = self._wake, anyio.Event()
        wake.set()
        await self.idle()
