"""Threads, turns and agy processes: each thread's conversation, how its turns went, and the
process groups to clean up after a crash.
"""

from __future__ import annotations

import time

from bridge.core.events import ThreadRef
from bridge.core.store.rows import (
    ProcessRow,
    StoreBase,
    ThreadRow,
    TurnRow,
    TurnState,
    Usage,
    storable_text,
)


class ThreadQueries(StoreBase):
    """The store's threads, turns and processes."""

    # --- threads ------------------------------------------------------------------------

    async def ensure_thread(self, ref: ThreadRef) -> None:
        """Record that the thread is a conversation (later messages need no mention)."""
        await self._write_thread(ref, time.time())
        self._remember(ref.key)

    async def thread(self, key: str) -> ThreadRow:
        """The thread's row; an empty one for a thread not recorded yet.

        Its usage is what agy reported at the end of the conversation's latest turn (agy's
        totals are the conversation's), else what :meth:`set_usage` wrote; a new conversation
        (``!new``) starts with none.
        """
        rows = await self._db.fetch(
            "SELECT threads.*, (SELECT turns.usage_json FROM turns"
            " WHERE turns.thread_key = threads.key"
            " AND turns.conversation_id = threads.conversation_id"
            " AND turns.usage_json IS NOT NULL ORDER BY turns.id DESC LIMIT 1) AS turn_usage"
            " FROM threads WHERE key = ?",
            (key,),
        )
        if not rows:
            return ThreadRow(key=key)
        row = rows[0]
        usage_json = row["turn_usage"] or row["usage_json"]
        return ThreadRow(
            key=row["key"],
            conversation_id=row["conversation_id"],
            model=row["model"],
            usage=Usage.model_validate_json(usage_json) if usage_json else None,
            conversation_instance=row["conversation_instance"],
            workspace=row["workspace"],
        )

    async def known_thread(self, key: str) -> bool:
        return bool(await self._db.fetch("SELECT 1 FROM threads WHERE key = ?", (key,)))

    async def set_conversation(
        self, key: str, conversation_id: str | None, *, instance: str | None = None
    ) -> None:
        await self._write(
            "UPDATE threads SET conversation_id = ?, conversation_instance = ?, updated_at = ?"
            " WHERE key = ?",
            (conversation_id, instance, time.time(), key),
        )

    async def set_workspace(self, key: str, workspace: str | None) -> None:
        await self._set_thread(key, "workspace", workspace)

    async def set_model(self, key: str, model: str | None) -> None:
        await self._set_thread(key, "model", model)

    async def set_usage(self, key: str, usage: Usage) -> None:
        await self._set_thread(key, "usage_json", usage.model_dump_json())

    async def reset_conversation(self, key: str) -> None:
        """!new: forget the conversation and its usage (the model choice stays)."""
        await self._write(
            "UPDATE threads SET conversation_id = NULL, usage_json = NULL, updated_at = ?"
            " WHERE key = ?",
            (time.time(), key),
        )

    async def _set_thread(self, key: str, column: str, value: str | None) -> None:
        # ``column`` is one of the fixed names above, never user input.
        await self._write(
            f"UPDATE threads SET {column} = ?, updated_at = ? WHERE key = ?",
            (value, time.time(), key),
        )

    # --- turns --------------------------------------------------------------------------

    async def finish_turn(
        self,
        turn_id: int,
        state: TurnState,
        *,
        error: str | None = None,
        response: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        """Record how a turn ended: one statement (its ``usage``, the conversation's so far, is
        also the thread's: see :meth:`thread`)."""
        await self._write(
            "UPDATE turns SET state = ?, ended_at = ?, error = ?, response = ?, usage_json = ?"
            " WHERE id = ?",
            (
                state,
                time.time(),
                error,
                storable_text(response) if response is not None else None,
                usage.model_dump_json() if usage else None,
                turn_id,
            ),
        )

    async def end_running_turn(self, turn_id: int, state: TurnState, error: str) -> bool:
        """End a turn left ``running``; False when another instance ended it first."""
        async with self._db.transaction() as tx:
            changed = await tx.execute(
                "UPDATE turns SET state = ?, ended_at = ?, error = ? WHERE id = ? AND state = ?",
                (state, time.time(), error, turn_id, TurnState.RUNNING),
            )
        return changed > 0

    async def last_turn(self, thread_key: str) -> TurnRow | None:
        """The thread's latest turn (how the conversation last went), None before the first."""
        turns = await self.last_turns(thread_key, 1)
        return turns[0] if turns else None

    async def last_turns(
        self, thread_key: str, limit: int, state: TurnState | None = None
    ) -> list[TurnRow]:
        """The thread's latest turns (of one ``state``), newest first."""
        sql, params = "WHERE thread_key = ?", [thread_key]
        if state is not None:
            sql, params = sql + " AND state = ?", [*params, state]
        rows = await self._db.fetch(
            f"SELECT * FROM turns {sql} ORDER BY id DESC LIMIT ?", (*params, limit)
        )
        return [
            TurnRow(
                id=r["id"],
                thread_key=r["thread_key"],
                state=TurnState(r["state"]),
                conversation_id=r["conversation_id"],
                started_at=r["started_at"],
                ended_at=r["ended_at"],
                error=r["error"],
                owner=r["owner"],
            )
            for r in rows
        ]

    async def running_turns(self, thread_key: str | None = None) -> list[TurnRow]:
        if thread_key is None:
            rows = await self._db.fetch(
                "SELECT * FROM turns WHERE state = ? ORDER BY id", (TurnState.RUNNING,)
            )
        else:
            rows = await self._db.fetch(
                "SELECT * FROM turns WHERE state = ? AND thread_key = ? ORDER BY id",
                (TurnState.RUNNING, thread_key),
            )
        return [
            TurnRow(
                id=r["id"],
                thread_key=r["thread_key"],
                state=TurnState(r["state"]),
                conversation_id=r["conversation_id"],
                started_at=r["started_at"],
                owner=r["owner"],
            )
            for r in rows
        ]

    # --- processes (for cleanup after a crash) ------------------------------------------

    async def add_process(
        self, pgid: int, thread_key: str, run_marker: str, *, owner: str | None = None
    ) -> None:
        await self._write(
            "INSERT INTO processes (pgid, thread_key, run_marker, started_at, owner)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (pgid) DO UPDATE SET"
            " thread_key = excluded.thread_key, run_marker = excluded.run_marker,"
            " started_at = excluded.started_at, owner = excluded.owner",
            (pgid, thread_key, run_marker, time.time(), owner),
        )

    async def remove_process(self, pgid: int) -> None:
        await self._write("DELETE FROM processes WHERE pgid = ?", (pgid,))

    async def processes(self) -> list[ProcessRow]:
        rows = await self._db.fetch("SELECT * FROM processes", ())
        return [
            ProcessRow(
                pgid=r["pgid"],
                thread_key=r["thread_key"],
                run_marker=r["run_marker"],
                owner=r["owner"],
            )
            for r in rows
        ]
