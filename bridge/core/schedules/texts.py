"""What the schedules say in the chat."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.core.schedules.model import Schedule
from bridge.core.schedules.store import RunRow, RunState
from bridge.core.team.texts import tokens_text
from bridge.cron_times import next_after, zone_of


def when(at: datetime | float, zone: str) -> str:
    """``2026-12-02 09:00 Europe/Paris``."""
    moment = datetime.fromtimestamp(at, UTC) if isinstance(at, (int, float)) else at
    return f"{moment.astimezone(zone_of(zone)):%Y-%m-%d %H:%M} {zone}"


def who(schedule: Schedule) -> str:
    return "the bridge" if schedule.author is None else schedule.author.label


def skipped_text(schedule: Schedule, due: datetime, now: datetime) -> str:
    upcoming = next_after(schedule.cron, schedule.timezone, now)
    later = f" Next run: {when(upcoming, schedule.timezone)}." if upcoming else ""
    return (
        f"**{schedule.label}** did not run at {when(due, schedule.timezone)}: the bridge was "
        f"not running then, and it is now more than {duration_text(schedule.catch_up)} late "
        f"(its catch-up), so that run is skipped.{later}"
    )


def refused_text(schedule: Schedule, due: datetime, reason: str) -> str:
    at = when(due, schedule.timezone)
    return f"**{schedule.label}** ({who(schedule)}) did not run at {at}: {reason}"


def moved_text(schedule: Schedule) -> str:
    return (
        f"**{schedule.label}** is due, but a turn is running in this thread: this run opens "
        "a new thread in the channel instead (no collision with the turn here)."
    )


def waiting_text(schedule: Schedule) -> str:
    return (
        f"**{schedule.label}** is due, but a turn is running here: it starts when that turn "
        "ends (it does not join it)."
    )


def duration_text(seconds: float) -> str:
    seconds = int(seconds)
    if seconds % 3600 == 0 and seconds:
        hours = seconds // 3600
        return f"{hours} hour" + ("s" if hours != 1 else "")
    if seconds % 60 == 0 and seconds:
        minutes = seconds // 60
        return f"{minutes} minute" + ("s" if minutes != 1 else "")
    return f"{seconds} s"


def run_line(run: RunRow, zone: str) -> str:
    at = when(run.due, zone)
    if run.state is not RunState.STARTED:
        note = f": {run.note}" if run.note else ""
        return f"{at}: {run.state.value}{note}"
    if run.turn_state is None:
        return f"{at}: started, waiting for its turn"
    parts = [run.turn_state]
    if run.started_at is not None and run.ended_at is not None:
        parts.append(f"{run.ended_at - run.started_at:.0f} s")
    if run.tokens is not None:
        parts.append(f"{tokens_text(run.tokens)} tokens")
    return f"{at}: " + ", ".join(parts)


def next_text(schedule: Schedule, now: datetime) -> str:
    upcoming = next_after(schedule.cron, schedule.timezone, now)
    return when(upcoming, schedule.timezone) if upcoming else "never"


def list_entry(schedule: Schedule, runs: list[RunRow], now: datetime) -> str:
    where = "this thread" if schedule.thread else "a new thread each run"
    lines = [
        f"• `{schedule.id}` `{schedule.cron}` ({schedule.timezone}), by {who(schedule)}, in "
        f"{where}: {short(schedule.prompt)}",
        f"  next run: {next_text(schedule, now)}",
    ]
    lines += [f"  last: {run_line(run, schedule.timezone)}" for run in runs]
    return "\n".join(lines)


def short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
