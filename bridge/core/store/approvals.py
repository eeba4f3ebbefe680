"""Approvals (issue 11): every request and its decision, and each thread's "always" list.

Plain SQL, for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bridge.core.events import Author
from bridge.core.store.rows import ApprovalRow, ApprovalState, Row, StoreBase, storable_text


def _author(text: str | None) -> Author | None:
    return Author.model_validate_json(text) if text else None


def _approval(row: Row) -> ApprovalRow:
    return ApprovalRow(
        id=row["id"],
        thread_key=row["thread_key"],
        tool=row["tool"],
        args=json.loads(row["args_json"]),
        summary=row["summary"],
        requested_by=_author(row["requested_by_json"]),
        state=ApprovalState(row["state"]),
        handle=row["handle"],
        decided_by=_author(row["decided_by_json"]),
        reason=row["reason"],
        requested_at=row["requested_at"],
        decided_at=row["decided_at"],
        number=row["number"],
    )


class ApprovalQueries(StoreBase):
    """The store's approval requests and allow lists."""

    async def add_approval(
        self,
        approval_id: str,
        thread_key: str,
        tool: str,
        args: dict[str, Any],
        summary: str,
        requested_by: Author | None,
    ) -> int:
        """Store a new request; its short number in the thread (one more than the thread's
        requests so far: the gate asks one at a time, so no two get the same)."""
        rows = await self._db.fetch(
            "SELECT COALESCE(MAX(number), 0) + 1 AS next FROM approvals WHERE thread_key = ?",
            (thread_key,),
        )
        number = int(rows[0]["next"])
        await self._write(
            "INSERT INTO approvals (id, thread_key, tool, args_json, summary,"
            " requested_by_json, state, requested_at, number)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                approval_id,
                thread_key,
                tool,
                storable_text(json.dumps(args, default=str)),
                storable_text(summary),
                requested_by.model_dump_json() if requested_by else None,
                ApprovalState.WAITING,
                time.time(),
                number,
            ),
        )
        return number

    async def set_approval_handle(self, approval_id: str, handle: str) -> None:
        """The chat message that asks (to find it from a click, and to edit it)."""
        await self._write("UPDATE approvals SET handle = ? WHERE id = ?", (handle, approval_id))

    async def settle_approval(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        by: Author | None = None,
        reason: str | None = None,
    ) -> bool:
        """Record the decision of a waiting request; False when it was decided already."""
        changed = await self._write(
            "UPDATE approvals SET state = ?, decided_by_json = ?, reason = ?, decided_at = ?"
            " WHERE id = ? AND state = ?",
            (
                state,
                by.model_dump_json() if by else None,
                storable_text(reason) if reason else None,
                time.time(),
                approval_id,
                ApprovalState.WAITING,
            ),
        )
        return changed > 0

    async def approval(self, approval_id: str) -> ApprovalRow | None:
        rows = await self._db.fetch("SELECT * FROM approvals WHERE id = ?", (approval_id,))
        return _approval(rows[0]) if rows else None

    async def approval_by_handle(self, thread_key: str, handle: str) -> ApprovalRow | None:
        rows = await self._db.fetch(
            "SELECT * FROM approvals WHERE thread_key = ? AND handle = ?", (thread_key, handle)
        )
        return _approval(rows[0]) if rows else None

    async def waiting_approvals(self, thread_key: str | None = None) -> list[ApprovalRow]:
        """Requests nobody answered yet (of one thread, or all), oldest first."""
        if thread_key is None:
            rows = await self._db.fetch(
                "SELECT * FROM approvals WHERE state = ? ORDER BY requested_at, id",
                (ApprovalState.WAITING,),
            )
        else:
            rows = await self._db.fetch(
                "SELECT * FROM approvals WHERE thread_key = ? AND state = ?"
                " ORDER BY requested_at, id",
                (thread_key, ApprovalState.WAITING),
            )
        return [_approval(r) for r in rows]

    async def allow_list(self, thread_key: str) -> list[str]:
        """The thread's "always" patterns, oldest first."""
        rows = await self._db.fetch(
            "SELECT pattern FROM approval_allow WHERE thread_key = ? ORDER BY added_at, pattern",
            (thread_key,),
        )
        return [r["pattern"] for r in rows]

    async def add_allowed(self, thread_key: str, pattern: str, by: Author | None) -> None:
        await self._write(
            "INSERT INTO approval_allow (thread_key, pattern, added_by_json, added_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (thread_key, pattern) DO NOTHING",
            (thread_key, storable_text(pattern), by.model_dump_json() if by else None, time.time()),
        )

    async def clear_allowed(self, thread_key: str) -> int:
        return await self._write("DELETE FROM approval_allow WHERE thread_key = ?", (thread_key,))
