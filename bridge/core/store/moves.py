"""A thread that carries on under another key (a Matrix room upgrade): its rows move together.

Every row keyed by the thread moves in one transaction: the thread itself (its conversation
id, model and usage, so agy resumes the same conversation), the inbox, the turns, the approval
requests and the "always" list, the lease and the agy processes. Nothing moves when the new key
already is a conversation of its own (the two would have to be merged), or when another
instance's live lease holds the old key (its actor there still runs the thread).
"""

from __future__ import annotations

import time

from bridge.core.events import ThreadRef
from bridge.core.store.rows import StoreBase

# The tables whose rows belong to a thread through their ``thread_key`` column.
THREAD_TABLES = (
    "inbox",
    "turns",
    "approvals",
    "approval_allow",
    "leases",
    "processes",
    "answer_feedback",
    # A thread's usage (docs/team-controls.md); the audit trail is never rewritten.
    "usage_shares",
    "thread_titles",
    "pull_requests",
)


class MoveQueries(StoreBase):
    async def move_thread(self, old: ThreadRef, new: ThreadRef, owner: str) -> bool:
        """Move ``old``'s rows to ``new`` (``owner``: this instance's lease owner); whether
        they moved."""
        if old.key == new.key:
            return False
        async with self._db.transaction() as tx:
            if await tx.fetch("SELECT key FROM threads WHERE key = ?", (new.key,)):
                return False
            held = await tx.fetch(
                "SELECT owner FROM leases WHERE thread_key = ? AND owner <> ? AND expires_at > ?",
                (old.key, owner, time.time()),
            )
            if held:
                return False
            # Rows a message for the new key left before the move (none normally) give way.
            await tx.execute("DELETE FROM leases WHERE thread_key = ?", (new.key,))
            await tx.execute(
                "UPDATE threads SET key = ?, platform = ?, channel = ?, thread = ?,"
                " updated_at = ? WHERE key = ?",
                (new.key, new.platform, new.channel, new.thread, time.time(), old.key),
            )
            for table in THREAD_TABLES:
                await tx.execute(
                    f"UPDATE {table} SET thread_key = ? WHERE thread_key = ?",
                    (new.key, old.key),
                )
        self._recorded.discard(old.key)
        self._remember(new.key)
        return True
