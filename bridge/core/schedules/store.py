"""The schedules' rows: chat schedules, config schedules' first sighting, and one row per run.

A run is claimed by inserting ``(schedule_key, due)``, the table's primary key, with ``ON
CONFLICT DO NOTHING``: of two instances (or a restarted one, or one whose clock went back) that
both find the same run due, exactly one inserts the row and makes the run.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

from bridge.core.events import Author
from bridge.core.schedules.model import Schedule
from bridge.core.store.rows import Database, storable_text


class RunState(enum.StrEnum):
    STARTED = "started"  # its turn was handed to the thread
    SKIPPED = "skipped"  # missed by more than catch_up: the channel was told
    REFUSED = "refused"  # its author's access or budget: the channel was told
    FAILED = "failed"  # the bridge could not start it (the reason in the note)
    CLAIMED = "claimed"  # claimed, not started yet (or its instance stopped in between)


@dataclass(frozen=True)
class RunRow:
    due: int
    state: RunState
    note: str
    thread_key: str | None
    # Of the turn that took the run's message, when there was one.
    turn_state: str | None
    started_at: float | None
    ended_at: float | None
    tokens: int | None


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- the schedules --------------------------------------------------------------------

    async def add(self, schedule: Schedule, now: float | None = None) -> bool:
        """Store a chat schedule, or note when a config schedule was first seen (its row is
        kept as it was: no run is owed for a time before it). False: the key was taken."""
        author = schedule.author.model_dump_json() if schedule.author is not None else None
        changed = await self._db.execute(
            "INSERT INTO schedules (key, platform, channel, thread, cron, timezone, prompt,"
            " author_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key) DO NOTHING",
            (
                schedule.key,
                schedule.platform,
                schedule.channel,
                schedule.thread,
                schedule.cron,
                schedule.timezone,
                storable_text(schedule.prompt),
                author,
                time.time() if now is None else now,
            ),
        )
        return changed == 1

    async def remove(self, key: str) -> bool:
        return await self._db.execute("DELETE FROM schedules WHERE key = ?", (key,)) == 1

    async def created_at(self, key: str) -> float | None:
        rows = await self._db.fetch("SELECT created_at FROM schedules WHERE key = ?", (key,))
        return float(rows[0]["created_at"]) if rows else None

    async def chat_schedules(
        self, platform: str | None = None, channel: str | None = None
    ) -> list[Schedule]:
        sql = "SELECT * FROM schedules WHERE author_json IS NOT NULL"
        params: list[str] = []
        if platform is not None and channel is not None:
            sql += " AND platform = ? AND channel = ?"
            params = [platform, channel]
        rows = await self._db.fetch(sql + " ORDER BY created_at, key", params)
        return [
            Schedule(
                key=row["key"],
                platform=row["platform"],
                channel=row["channel"],
                thread=row["thread"],
                cron=row["cron"],
                timezone=row["timezone"],
                prompt=row["prompt"],
                author=Author.model_validate_json(row["author_json"]),
            )
            for row in rows
        ]

    # --- the runs -------------------------------------------------------------------------

    async def last_due(self, key: str) -> int | None:
        rows = await self._db.fetch(
            "SELECT MAX(due) AS due FROM schedule_runs WHERE schedule_key = ?", (key,)
        )
        return int(rows[0]["due"]) if rows and rows[0]["due"] is not None else None

    async def claim(self, key: str, due: int, instance: str, state: RunState) -> bool:
        """Take the run of ``key`` at ``due`` (Unix seconds); False: it was taken before."""
        changed = await self._db.execute(
            "INSERT INTO schedule_runs (schedule_key, due, state, instance, claimed_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (schedule_key, due) DO NOTHING",
            (key, due, state.value, instance, time.time()),
        )
        return changed == 1

    async def settle(
        self,
        key: str,
        due: int,
        state: RunState,
        note: str = "",
        thread_key: str | None = None,
        event_key: str | None = None,
    ) -> None:
        await self._db.execute(
            "UPDATE schedule_runs SET state = ?, note = ?, thread_key = ?, event_key = ?"
            " WHERE schedule_key = ? AND due = ?",
            (state.value, storable_text(note), thread_key, event_key, key, due),
        )

    async def runs(self, key: str, limit: int = 3) -> list[RunRow]:
        """The latest runs, with the outcome, times and tokens of the turn each started."""
        rows = await self._db.fetch(
            "SELECT r.due, r.state, r.note, r.thread_key, t.state AS turn_state,"
            " t.started_at, t.ended_at,"
            " (SELECT SUM(u.total_tokens) FROM usage_shares u WHERE u.turn_id = t.id) AS tokens"
            " FROM schedule_runs r"
            " LEFT JOIN inbox i ON i.event_key = r.event_key"
            " LEFT JOIN turns t ON t.id = i.turn_id"
            " WHERE r.schedule_key = ? ORDER BY r.due DESC LIMIT ?",
            (key, limit),
        )
        return [
            RunRow(
                due=int(row["due"]),
                state=RunState(row["state"]),
                note=row["note"] or "",
                thread_key=row["thread_key"],
                turn_state=row["turn_state"],
                started_at=row["started_at"],
                ended_at=row["ended_at"],
                tokens=int(row["tokens"]) if row["tokens"] is not None else None,
            )
            for row in rows
        ]

    async def thread_busy(self, thread_key: str) -> bool:
        """A turn runs in the thread, or messages wait there for one."""
        rows = await self._db.fetch(
            "SELECT 1 AS busy FROM turns WHERE thread_key = ? AND state = 'running'"
            " UNION ALL SELECT 1 AS busy FROM inbox WHERE thread_key = ? AND state = 'pending'"
            " LIMIT 1",
            (thread_key, thread_key),
        )
        return bool(rows)

    async def latest_run_in(self, thread_key: str) -> tuple[str, int] | None:
        """The schedule and time of the latest run posted in the thread."""
        rows = await self._db.fetch(
            "SELECT schedule_key, due FROM schedule_runs WHERE thread_key = ?"
            " ORDER BY due DESC LIMIT 1",
            (thread_key,),
        )
        return (rows[0]["schedule_key"], int(rows[0]["due"])) if rows else None
