"""Messages their authors edit or delete, and where a chat's catch-up starts reading.

A message is found by its platform id (the first row with that id in its thread: a later row
with the same id is the bridge's own note of a change). Revising and withdrawing are
conditional on the row still waiting, in one statement, so a turn or a hook call that takes the
message at the same moment wins cleanly: the caller then tells the agent of the change instead.
"""

from __future__ import annotations

from bridge.core.store.inbox import message_row
from bridge.core.store.rows import MessageState, StoreBase, StoredMessage, storable_text


class ChangeQueries(StoreBase):
    async def original(self, thread_key: str, message_id: str) -> StoredMessage | None:
        """The stored message with this platform id (None: the bridge never stored it)."""
        rows = await self._db.fetch(
            "SELECT * FROM inbox WHERE thread_key = ? AND message_id = ? ORDER BY id LIMIT 1",
            (thread_key, message_id),
        )
        return message_row(rows[0]) if rows else None

    async def revise_pending(self, row_id: int, text: str) -> bool:
        """Replace a waiting message's text; False when it no longer waits."""
        return (
            await self._write(
                "UPDATE inbox SET text = ? WHERE id = ? AND state = ?",
                (storable_text(text), row_id, MessageState.PENDING),
            )
            == 1
        )

    async def withdraw_pending(self, row_id: int) -> bool:
        """Take a waiting message out of the inbox for good; False when it no longer waits."""
        return (
            await self._write(
                "UPDATE inbox SET state = ? WHERE id = ? AND state = ?",
                (MessageState.WITHDRAWN, row_id, MessageState.PENDING),
            )
            == 1
        )

    async def last_seen(self, platform: str, since: float) -> dict[str, list[str]]:
        """Per thread of ``platform`` with a message stored since ``since`` (Unix time): the
        platform ids of its messages since then (a chat's catch-up reads on from the latest)."""
        rows = await self._db.fetch(
            "SELECT thread_key, message_id FROM inbox WHERE thread_key LIKE ? AND"
            " received_at >= ? ORDER BY id",
            (f"{platform}|%", since),
        )
        seen: dict[str, list[str]] = {}
        for row in rows:
            seen.setdefault(row["thread_key"], []).append(row["message_id"])
        return seen
