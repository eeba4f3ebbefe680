"""Calendar periods in the bridge's time zone: a day, a week (from Monday) or a month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

PeriodName = Literal["day", "week", "month"]


@dataclass(frozen=True, slots=True)
class Period:
    name: PeriodName
    start: float  # Unix time, inclusive
    end: float  # Unix time, exclusive
    key: str  # "day:2026-12-01", "week:2026-11-30", "month:2026-12"
    zone: str

    def previous(self) -> Period:
        return period_of(self.name, self.start - 1, self.zone)

    def resets(self) -> str:
        """When the next period begins, as people read it."""
        at = datetime.fromtimestamp(self.end, ZoneInfo(self.zone))
        return at.strftime("%Y-%m-%d %H:%M ") + (at.tzname() or self.zone)

    @property
    def label(self) -> str:
        return {"day": "today", "week": "this week", "month": "this month"}[self.name]


def period_of(name: PeriodName, now: float, zone: str) -> Period:
    """The calendar period ``name`` holding the moment ``now``."""
    tz = ZoneInfo(zone)
    local = datetime.fromtimestamp(now, tz)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if name == "day":
        begin, after = midnight, midnight + timedelta(days=1)
        key = f"day:{begin:%Y-%m-%d}"
    elif name == "week":
        begin = midnight - timedelta(days=local.weekday())
        after = begin + timedelta(days=7)
        key = f"week:{begin:%Y-%m-%d}"
    else:
        begin = midnight.replace(day=1)
        after = (begin + timedelta(days=32)).replace(day=1)
        key = f"month:{begin:%Y-%m}"
    # Wall-clock arithmetic across a daylight-saving change: the boundaries are local
    # midnights, each converted with its own offset.
    start = begin.replace(tzinfo=None).replace(tzinfo=tz).timestamp()
    end = after.replace(tzinfo=None).replace(tzinfo=tz).timestamp()
    return Period(name, start, end, key, zone)
