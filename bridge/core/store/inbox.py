"""The inbox: storing a chat message once, and taking it out of ``pending`` once.

The inbox is the heart of exactly-once delivery: a message is written here (its platform event
id is unique, so retries and redeliveries stop here) before the platform is acknowledged, and it
leaves the ``pending`` state in exactly one transaction, either injected into a running turn or
taken as (part of) a turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from bridge.core.events import AttachmentRef, Author, IncomingMessage
from bridge.core.store.rows import (
    HistoryItem,
    MessageState,
    Row,
    StoreBase,
    StoredMessage,
    TurnState,
    Tx,
    storable_text,
)


def message_row(row: Row) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_key=row["thread_key"],
        message_id=row["message_id"],
        author=Author.model_validate_json(row["author_json"]),
        text=row["text"],
        attachments=[AttachmentRef.model_validate(a) for a in json.loads(row["attachments_json"])],
        saved=json.loads(row["saved_json"]) if row["saved_json"] is not None else None,
        state=MessageState(row["state"]),
        received_at=row["received_at"],
    )


class _NothingTaken(Exception):
    """Raised inside a transaction to roll it back: no pending message was left to take."""


class InboxQueries(StoreBase):
    """The store's messages: the inbox, the turns taking them, and a thread's history."""

    async def add_message(
        self,
        message: IncomingMessage,
        *,
        state: MessageState = MessageState.PENDING,
        record_thread: bool = False,
    ) -> int | None:
        """Store a message; None when its event id was seen before (a retry or redelivery).

        With ``record_thread``, a new message also records its thread as a conversation
        (:meth:`ensure_thread`) in the same transaction; a thread known to be recorded costs
        nothing more than the message's own statement.
        """
        event_key = f"{message.thread.platform}:{message.event_id}"
        attachments = json.dumps([a.model_dump() for a in message.attachments])
        sql = (
            "INSERT INTO inbox (thread_key, event_key, message_id, author_json, text,"
            " attachments_json, state, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (event_key) DO NOTHING RETURNING id"
        )
        now = time.time()
        params = (
            message.thread.key,
            event_key,
            message.message_id,
            message.author.model_dump_json(),
            storable_text(message.text),
            attachments,
            state,
            now,
        )
        if not record_thread or self._is_recorded(message.thread.key):
            # One statement is its own transaction: one round trip.
            rows = await self._db.execute_returning(sql, params)
            return int(rows[0]["id"]) if rows else None
        async with self._db.transaction() as tx:
            rows = await tx.fetch(sql, params)
            if rows:
                await self._record_thread(tx, message.thread, now)
        if rows:
            self._remember(message.thread.key)
        return int(rows[0]["id"]) if rows else None

    async def pending(self, thread_key: str) -> list[StoredMessage]:
        rows = await self._db.fetch(
            "SELECT * FROM inbox WHERE thread_key = ? AND state = ? ORDER BY id",
            (thread_key, MessageState.PENDING),
        )
        return [message_row(r) for r in rows]

    async def has_pending(self, thread_key: str) -> bool:
        """Whether a message waits: a read, far cheaper than a turn's write transaction."""
        rows = await self._db.fetch(
            "SELECT 1 FROM inbox WHERE thread_key = ? AND state = ? LIMIT 1",
            (thread_key, MessageState.PENDING),
        )
        return bool(rows)

    async def _lock_pending(self, tx: Tx, thread_key: str) -> list[StoredMessage]:
        rows = await tx.fetch(
            "SELECT * FROM inbox WHERE thread_key = ? AND state = ? ORDER BY id"
            + self._db.for_update,
            (thread_key, MessageState.PENDING),
        )
        return [message_row(r) for r in rows]

    async def take_pending(
        self, thread_key: str, new_state: MessageState, turn_id: int | None, *, ready_only: bool
    ) -> list[StoredMessage]:
        """Move pending messages out of ``pending`` in one transaction; return them in order.

        With ``ready_only``, only the leading run of messages whose attachments are saved is
        taken, so messages never overtake each other.
        """
        async with self._db.transaction() as tx:
            taken: list[StoredMessage] = []
            for message in await self._lock_pending(tx, thread_key):
                if ready_only and not message.ready:
                    break
                taken.append(message)
            now = time.time()
            for m in taken:
                await tx.execute(
                    "UPDATE inbox SET state = ?, turn_id = ?, delivered_at = ? WHERE id = ?"
                    " AND state = ?",
                    (new_state, turn_id, now, m.id, MessageState.PENDING),
                )
        return [m.model_copy(update={"state": new_state}) for m in taken]

    async def take_turn(
        self, thread_key: str, conversation_id: str | None, *, owner: str | None = None
    ) -> tuple[int, list[StoredMessage]] | None:
        """Start a turn on every pending message, in one transaction; None when none waits.

        Two statements: the turn (only if a message waits), then every pending message moved
        into it and returned. The ``UPDATE … WHERE state = 'pending'`` is what makes a message
        leave ``pending`` once: on PostgreSQL it locks each row and checks its state again after
        any concurrent taker (so a message taken meanwhile is not taken twice, and a turn that
        got nothing is rolled back); on SQLite the transaction holds the write lock throughout.
        """
        now = time.time()
        try:
            async with self._db.transaction() as tx:
                rows = await tx.fetch(
                    "INSERT INTO turns (thread_key, state, conversation_id, started_at, owner)"
                    " SELECT ?, ?, ?, ?, ? WHERE EXISTS"
                    " (SELECT 1 FROM inbox WHERE thread_key = ? AND state = ?) RETURNING id",
                    (
                        thread_key,
                        TurnState.RUNNING,
                        conversation_id,
                        now,
                        owner,
                        thread_key,
                        MessageState.PENDING,
                    ),
                )
                if not rows:
                    return None
                turn_id = int(rows[0]["id"])
                taken = await tx.fetch(
                    "UPDATE inbox SET state = ?, turn_id = ?, delivered_at = ?"
                    " WHERE thread_key = ? AND state = ? RETURNING *",
                    (MessageState.IN_TURN, turn_id, now, thread_key, MessageState.PENDING),
                )
                if not taken:
                    raise _NothingTaken
        except _NothingTaken:
            return None
        # RETURNING gives no order: the turn reads its messages in the order they arrived.
        return turn_id, sorted((message_row(r) for r in taken), key=lambda m: m.id)

    async def requeue_turn(self, turn_id: int) -> int:
        """Put a turn's messages back to ``pending`` (agy died before it read them)."""
        async with self._db.transaction() as tx:
            return await tx.execute(
                "UPDATE inbox SET state = ?, turn_id = NULL, delivered_at = NULL"
                " WHERE turn_id = ? AND state = ?",
                (MessageState.PENDING, turn_id, MessageState.IN_TURN),
            )

    async def requeue_injected(self, message_ids: Sequence[int]) -> int:
        """Put injected messages back to ``pending``: agy never read the hook reply with them."""
        async with self._db.transaction() as tx:
            count = 0
            for i in message_ids:
                count += await tx.execute(
                    "UPDATE inbox SET state = ?, turn_id = NULL, delivered_at = NULL"
                    " WHERE id = ? AND state = ?",
                    (MessageState.PENDING, i, MessageState.INJECTED),
                )
            return count

    async def fail_taken(self, message_ids: Sequence[int]) -> int:
        """Mark messages a turn or a hook call took as refused (the turn policy refused them:
        kept, never sent to agy)."""
        async with self._db.transaction() as tx:
            count = 0
            for i in message_ids:
                count += await tx.execute(
                    "UPDATE inbox SET state = ? WHERE id = ? AND state IN (?, ?)",
                    (MessageState.REFUSED, i, MessageState.IN_TURN, MessageState.INJECTED),
                )
            return count

    async def set_saved(self, message_id: int, saved: Sequence[str]) -> None:
        await self._write(
            "UPDATE inbox SET saved_json = ? WHERE id = ?", (json.dumps(list(saved)), message_id)
        )

    async def threads_with_pending(self) -> list[str]:
        rows = await self._db.fetch(
            "SELECT DISTINCT thread_key FROM inbox WHERE state = ? ORDER BY thread_key",
            (MessageState.PENDING,),
        )
        return [r["thread_key"] for r in rows]

    async def turn_messages(self, turn_id: int) -> list[StoredMessage]:
        """The messages one turn took (as a turn or injected into it), oldest first."""
        rows = await self._db.fetch(
            "SELECT * FROM inbox WHERE turn_id = ? AND state IN (?, ?) ORDER BY id",
            (turn_id, MessageState.IN_TURN, MessageState.INJECTED),
        )
        return [message_row(r) for r in rows]

    async def history_of_turns(self, thread_key: str, limit: int) -> list[HistoryItem]:
        """The thread's messages and answers, oldest first, each message with how its turn
        went: what a new conversation is told of the thread."""
        rows = await self._db.fetch(
            "SELECT at, who, text, kind, turn_state, turn_error FROM ("
            " SELECT inbox.received_at AS at, inbox.author_json AS who, inbox.text AS text,"
            "  inbox.state AS kind, turns.state AS turn_state, turns.error AS turn_error"
            "  FROM inbox LEFT JOIN turns ON turns.id = inbox.turn_id"
            "  WHERE inbox.thread_key = ? AND inbox.state NOT IN (?, ?, ?)"
            " UNION ALL"
            " SELECT ended_at AS at, NULL AS who, response AS text, 'answer' AS kind,"
            "  state AS turn_state, NULL AS turn_error FROM turns"
            "  WHERE thread_key = ? AND response IS NOT NULL AND response != ''"
            ") AS h ORDER BY at DESC LIMIT ?",
            (
                thread_key,
                MessageState.COMMAND,
                MessageState.PENDING,
                MessageState.WITHDRAWN,
                thread_key,
                limit,
            ),
        )
        return [
            HistoryItem(
                at=row["at"],
                who=Author.model_validate_json(row["who"]).label if row["who"] else "agent",
                text=row["text"],
                kind=row["kind"],
                turn_state=row["turn_state"],
                turn_error=row["turn_error"],
            )
            for row in reversed(rows)
        ]

    async def history(self, thread_key: str, limit: int) -> list[tuple[float, str, str]]:
        """(time, author label, text) of user messages and agent answers, oldest first."""
        rows = await self._db.fetch(
            "SELECT at, who, text FROM ("
            " SELECT received_at AS at, author_json AS who, text FROM inbox"
            "  WHERE thread_key = ? AND state != ?"
            " UNION ALL"
            " SELECT ended_at AS at, NULL AS who, response AS text FROM turns"
            "  WHERE thread_key = ? AND response IS NOT NULL AND response != ''"
            ") AS h ORDER BY at DESC LIMIT ?",
            (thread_key, MessageState.COMMAND, thread_key, limit),
        )
        out = []
        for row in reversed(rows):
            who = Author.model_validate_json(row["who"]).label if row["who"] else "agent"
            out.append((row["at"], who, row["text"]))
        return out
