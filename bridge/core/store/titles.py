"""A thread's title as a person named it in the chat (Slack's ``agent_session_title_changed``).

One row per thread: the title, who set it and when. The bridge's own titles (a thread's first
line, given to Slack when its session starts) are never written here, so nothing the bridge
does replaces a person's name for a thread. ``!status`` shows it.

Plain SQL, for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bridge.core.store.rows import StoreBase

# Slack allows 200 characters; a longer title (another platform) is cut to this.
TITLE_LIMIT = 200


@dataclass(frozen=True)
class ThreadTitle:
    title: str
    set_by: str  # the person's label, as the chat named them
    at: float


class TitleQueries(StoreBase):
    """The store's thread titles."""

    async def set_title(self, thread_key: str, title: str, set_by: str) -> None:
        title = title.strip()[:TITLE_LIMIT]
        await self._write(
            "INSERT INTO thread_titles (thread_key, title, set_by, at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (thread_key) DO UPDATE SET title = excluded.title,"
            " set_by = excluded.set_by, at = excluded.at",
            (thread_key, title, set_by, time.time()),
        )

    async def title(self, thread_key: str) -> ThreadTitle | None:
        rows = await self._db.fetch(
            "SELECT title, set_by, at FROM thread_titles WHERE thread_key = ?", (thread_key,)
        )
        if not rows or not rows[0]["title"]:
            return None
        return ThreadTitle(rows[0]["title"], rows[0]["set_by"], rows[0]["at"])
