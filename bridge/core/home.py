"""What a person's home page in a chat shows (Slack's App Home tab), in neutral types.

A chat adapter that has such a page gets :class:`HomeSources` from the app: the core's facts
about a person (their active threads, the approvals waiting for them), always there, and one
optional provider per further section: usage against budgets, schedules, the bridge's health
for admins. A section appears only when its provider is wired, so the features that fill them
(usage and budgets, schedules) plug in by passing a provider, without the page changing.

Nothing here knows a chat SDK: the adapter renders these lines in its own blocks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.core.events import ThreadRef
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.store.rows import ApprovalRow, TurnState

# How far back a person's threads count as active, and how many the page lists.
ACTIVE_DAYS = 7.0
MAX_THREADS = 10
MAX_WAITING = 10
# Inbox rows read to find a person's threads (newest first): a bound, not a filter.
_SCAN_ROWS = 2000
_TITLE_LIMIT = 80


@dataclass(frozen=True)
class ThreadLine:
    thread: ThreadRef
    title: str
    working: bool  # a turn runs in it now
    last_at: float  # the person's latest message there (Unix time)


@dataclass(frozen=True)
class WaitingLine:
    thread: ThreadRef
    tool: str
    summary: str  # what would run
    requested_by: str  # who asked for the turn (a label; "" when unknown)
    requested_at: float


@dataclass(frozen=True)
class UsageLine:
    """One measure of a person's usage this period, against its budget when one is set."""

    label: str  # "tokens this month", "turns today"
    used: int
    budget: int | None = None


@dataclass(frozen=True)
class ScheduleLine:
    thread: ThreadRef | None
    when: str  # as a person reads it: "every weekday at 09:00"
    what: str
    next_at: float | None = None


class PersonFacts(Protocol):
    """The core's own facts about a person (always wired)."""

    async def active_threads(self, platform: str, user_id: str) -> list[ThreadLine]: ...

    async def waiting_for(self, platform: str, user_id: str) -> list[WaitingLine]: ...


class UsageProvider(Protocol):
    """Usage this period against the person's budgets (the usage and budgets feature)."""

    async def usage_for(self, platform: str, user_id: str) -> list[UsageLine]: ...


class ScheduleProvider(Protocol):
    """Scheduled prompts the person sees (the schedules feature)."""

    async def schedules_for(self, platform: str, user_id: str) -> list[ScheduleLine]: ...


class HealthProvider(Protocol):
    """The bridge's health, for admins only: one line each."""

    async def health(self) -> list[str]: ...


@dataclass(frozen=True)
class HomeSources:
    facts: PersonFacts
    usage: UsageProvider | None = None
    schedules: ScheduleProvider | None = None
    health: HealthProvider | None = None


class StoreFacts:
    """:class:`PersonFacts` read from the store.

    A person's threads are those where they wrote in the last :data:`ACTIVE_DAYS`, newest
    first. What waits for them: with ``approvers`` configured, every waiting request if they
    are one (else none); without, the requests of their own threads and of turns they asked
    for (anyone the thread serves may answer those).
    """

    def __init__(self, store: Store, approvers: Sequence[str] = ()) -> None:
        self._store = store
        self._approvers = frozenset(approvers)

    async def active_threads(self, platform: str, user_id: str) -> list[ThreadLine]:
        latest = await self._threads_of(platform, user_id)
        lines = []
        for key, last_at in list(latest.items())[:MAX_THREADS]:
            lines.append(
                ThreadLine(
                    thread=ThreadRef.from_key(key),
                    title=await self._title(key),
                    working=await self._working(key),
                    last_at=last_at,
                )
            )
        return lines

    async def waiting_for(self, platform: str, user_id: str) -> list[WaitingLine]:
        if self._approvers and user_id not in self._approvers:
            return []
        rows = [
            r
            for r in await self._store.waiting_approvals()
            if ThreadRef.from_key(r.thread_key).platform == platform
        ]
        if not self._approvers:
            mine = await self._threads_of(platform, user_id)
            rows = [r for r in rows if r.thread_key in mine or _asked_by(r, user_id)]
        return [
            WaitingLine(
                thread=ThreadRef.from_key(r.thread_key),
                tool=r.tool,
                summary=r.summary,
                requested_by=r.requested_by.label if r.requested_by else "",
                requested_at=r.requested_at,
            )
            for r in rows[:MAX_WAITING]
        ]

    async def _threads_of(self, platform: str, user_id: str) -> dict[str, float]:
        """Thread key -> the person's latest message there, newest first."""
        since = time.time() - ACTIVE_DAYS * 86400
        rows = await self._store.database.fetch(
            "SELECT inbox.thread_key, inbox.author_json, inbox.received_at FROM inbox"
            " JOIN threads ON threads.key = inbox.thread_key"
            " WHERE threads.platform = ? AND inbox.received_at > ?"
            " ORDER BY inbox.id DESC LIMIT ?",
            (platform, since, _SCAN_ROWS),
        )
        latest: dict[str, float] = {}
        for row in rows:
            if row["thread_key"] in latest:
                continue
            try:
                author = json.loads(row["author_json"])
            except ValueError:
                continue
            if isinstance(author, dict) and author.get("id") == user_id:
                latest[row["thread_key"]] = float(row["received_at"])
        return latest

    async def _title(self, key: str) -> str:
        named = await self._store.title(key)
        if named is not None:
            return named.title
        rows = await self._store.database.fetch(
            "SELECT text FROM inbox WHERE thread_key = ? ORDER BY id LIMIT 1", (key,)
        )
        text = str(rows[0]["text"]) if rows else ""
        line = next((part.strip() for part in text.splitlines() if part.strip()), "")
        if len(line) > _TITLE_LIMIT:
            line = line[: _TITLE_LIMIT - 1].rstrip() + "…"
        return line or "(no text)"

    async def _working(self, key: str) -> bool:
        rows = await self._store.database.fetch(
            "SELECT 1 FROM turns WHERE thread_key = ? AND state = ? LIMIT 1",
            (key, TurnState.RUNNING),
        )
        return bool(rows)


def _asked_by(row: ApprovalRow, user_id: str) -> bool:
    return row.requested_by is not None and row.requested_by.id == user_id


class CoreHealth:
    """:class:`HealthProvider` from what the core holds: agent slots, turns, approvals."""

    def __init__(self, store: Store, slots: ProcessSlots, instance_line: str = "") -> None:
        self._store = store
        self._slots = slots
        self._instance_line = instance_line

    async def health(self) -> list[str]:
        running = await self._store.running_turns()
        waiting = await self._store.waiting_approvals()
        slots = self._slots
        lines = [
            f"Agent slots: {slots.live}/{slots.limit} in use, {slots.queued} thread(s) in line",
            f"Turns running: {len(running)}",
            f"Approvals waiting: {len(waiting)}",
        ]
        return [self._instance_line, *lines] if self._instance_line else lines
