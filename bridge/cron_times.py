"""Cron expressions, through cronsim (a well-kept library: Debian cron's semantics, time zones
and daylight-saving transitions as its documentation describes them).

Five fields only (minute hour day month weekday): cronsim also takes a seconds field, which a
schedule of chat prompts has no use for and which would let one expression start a turn every
second.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

_DURATION = re.compile(r"^\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m)?\s*(?:(\d+)\s*s)?\s*$", re.I)


class BadCron(ValueError):
    """An expression or time zone that cannot be used; the message says why, for a person."""


def check(expr: str, zone: str) -> None:
    """Raise :class:`BadCron` with a clear message unless ``expr`` in ``zone`` can be used."""
    tz = zone_of(zone)
    fields = expr.split()
    if len(fields) != 5:
        raise BadCron(
            f"`{expr}` is not a cron expression: it needs five fields (minute hour day month "
            f"weekday), for example `0 9 * * 1-5` (09:00 on weekdays); it has {len(fields)}"
        )
    try:
        CronSim(expr, datetime.now(tz))
    except CronSimError as exc:
        raise BadCron(f"`{expr}` is not a valid cron expression: {exc}") from None
    if next_after(expr, zone, datetime.now(UTC)) is None:
        raise BadCron(f"`{expr}` never matches a date (the day does not exist in that month)")


def zone_of(zone: str) -> ZoneInfo:
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadCron(f"unknown time zone `{zone}` (an IANA name such as Europe/Paris)") from None


def is_zone(word: str) -> bool:
    try:
        zone_of(word)
    except BadCron:
        return False
    return True


def latest_at_or_before(expr: str, zone: str, now: datetime) -> datetime | None:
    """The latest time ``expr`` names that is not after ``now`` (aware, in UTC)."""
    # cronsim's reverse iteration yields times strictly before its start, to the second: start
    # one second after ``now`` so that a time equal to ``now`` counts.
    start = now.astimezone(zone_of(zone)).replace(microsecond=0) + timedelta(seconds=1)
    try:
        return next(CronSim(expr, start, reverse=True)).astimezone(UTC)
    except (CronSimError, StopIteration):
        return None


def next_after(expr: str, zone: str, now: datetime) -> datetime | None:
    """The first time ``expr`` names after ``now`` (aware, in UTC)."""
    start = now.astimezone(zone_of(zone)).replace(microsecond=0)
    try:
        return next(CronSim(expr, start)).astimezone(UTC)
    except (CronSimError, StopIteration):
        return None


def explain(expr: str, zone: str) -> str:
    """In words, as cronsim says it: "At 09:00 on Monday through Friday (Europe/Paris)"."""
    try:
        return f"{CronSim(expr, datetime.now(zone_of(zone))).explain()} ({zone})"
    except (CronSimError, BadCron):
        return f"`{expr}` ({zone})"


def duration(value: str | float | int) -> float:
    """Seconds from a number of seconds or a text like ``1h``, ``90m``, ``1h30m``."""
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    match = _DURATION.match(value)
    if not value.strip() or match is None or not any(match.groups()):
        raise ValueError(f"`{value}` is not a duration (for example `1h`, `30m`, `1h30m`)")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return float(hours * 3600 + minutes * 60 + seconds)
