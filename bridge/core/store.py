"""The durable state of the bridge: one store over SQLite (the default) or PostgreSQL.

The inbox is the heart of exactly-once delivery: a message is written here (its platform event
id is unique, so retries and redeliveries stop here) before the platform is acknowledged, and it
leaves the ``pending`` state in exactly one transaction, either injected into a running turn or
taken as (part of) a turn.

The SQL here is written once for both databases (``?`` placeholders, ``ON CONFLICT``,
``RETURNING``); what differs (column types, row locks, wake-ups) is the :class:`Database`'s, in
:mod:`bridge.core.store_sqlite` and :mod:`bridge.core.store_pg`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from bridge.config import Config
from bridge.core.events import AttachmentRef, Author, IncomingMessage, ThreadRef
from bridge.core.scrub import encodable

Row = Mapping[str, Any]

SCHEMA_VERSION = 5

# Written for both databases. ``{id}`` is an auto-numbered primary key and ``{real}`` a float
# column wide enough for a Unix time (PostgreSQL's REAL is 4 bytes); each database fills them in.
# A migration is a list of statements separated by ``;`` and runs in one transaction with the
# version bump. Never edit a released migration; add the next number.
_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE threads (
        key TEXT PRIMARY KEY,
        platform TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread TEXT NOT NULL,
        conversation_id TEXT,
        model TEXT,
        workdir TEXT,
        usage_json TEXT,
        num_turns INTEGER NOT NULL DEFAULT 0,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL
    );
    CREATE TABLE inbox (
        id {id},
        thread_key TEXT NOT NULL,
        event_key TEXT NOT NULL UNIQUE,
        message_id TEXT NOT NULL,
        author_json TEXT NOT NULL,
        text TEXT NOT NULL,
        attachments_json TEXT NOT NULL DEFAULT '[]',
        saved_json TEXT,
        state TEXT NOT NULL,
        turn_id INTEGER,
        received_at {real} NOT NULL,
        delivered_at {real}
    );
    CREATE INDEX inbox_pending ON inbox (thread_key, state, id);
    CREATE TABLE turns (
        id {id},
        thread_key TEXT NOT NULL,
        state TEXT NOT NULL,
        conversation_id TEXT,
        started_at {real} NOT NULL,
        ended_at {real},
        error TEXT,
        response TEXT,
        usage_json TEXT
    );
    CREATE INDEX turns_state ON turns (state);
    CREATE TABLE processes (
        pgid INTEGER PRIMARY KEY,
        thread_key TEXT NOT NULL,
        run_marker TEXT NOT NULL,
        started_at {real} NOT NULL
    )
    """,
    # Columns nothing read or wrote.
    2: """
    ALTER TABLE threads DROP COLUMN workdir;
    ALTER TABLE threads DROP COLUMN num_turns
    """,
    # Several instances on one PostgreSQL: a thread runs where its lease is; a turn and an agy
    # process belong to the run of the instance that started them, a conversation to the instance
    # whose agy holds it (unused, and harmless, on SQLite).
    3: """
    CREATE TABLE leases (
        thread_key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at {real} NOT NULL
    );
    CREATE INDEX leases_owner ON leases (owner);
    ALTER TABLE threads ADD COLUMN conversation_instance TEXT;
    ALTER TABLE turns ADD COLUMN owner TEXT;
    ALTER TABLE processes ADD COLUMN owner TEXT
    """,
    # Approvals (issue 11): every request and decision, and each thread's "always" list. The
    # ids are made by the bridge (uuid hex), so no auto-numbering is needed.
    4: """
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        thread_key TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_json TEXT NOT NULL,
        summary TEXT NOT NULL,
        requested_by_json TEXT,
        state TEXT NOT NULL,
        handle TEXT,
        decided_by_json TEXT,
        reason TEXT,
        requested_at {real} NOT NULL,
        decided_at {real}
    );
    CREATE INDEX approvals_thread ON approvals (thread_key, state);
    CREATE TABLE approval_allow (
        thread_key TEXT NOT NULL,
        pattern TEXT NOT NULL,
        added_by_json TEXT,
        added_at {real} NOT NULL,
        PRIMARY KEY (thread_key, pattern)
    )
    """,
    # A thread's usage is read from its latest turn (agy reports the conversation's totals at
    # every turn's end) instead of being written to the thread's row at every turn as well.
    5: """
    CREATE INDEX turns_thread ON turns (thread_key, id)
    """,
}


def migration_statements(version: int, types: Mapping[str, str]) -> list[str]:
    """One migration's statements with the database's column types filled in."""
    sql = _MIGRATIONS[version]
    for name, value in types.items():
        sql = sql.replace("{" + name + "}", value)
    return [s.strip() for s in sql.split(";") if s.strip()]


class MessageState(StrEnum):
    PENDING = "pending"  # in the inbox, waiting for a turn or a hook call
    IN_TURN = "turn"  # sent to agy as (part of) a turn
    INJECTED = "injected"  # handed to a running turn by the PreInvocation hook
    COMMAND = "command"  # a !command, handled by the core itself
    FAILED = "failed"  # agy could not take it; the thread was told


class TurnState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    INTERRUPTED = "interrupted"


class Usage(BaseModel):
    """Token counts of a conversation so far, as agy reports them."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class ApprovalState(StrEnum):
    WAITING = "waiting"  # asked in the thread, no answer yet
    APPROVED = "approved"
    ALWAYS = "always"  # approved, and added to the thread's allow list
    DENIED = "denied"
    TIMED_OUT = "timed_out"  # no answer in time: denied
    STOPPED = "stopped"  # !stop while it waited: denied
    EXPIRED = "expired"  # the bridge restarted (or the turn ended) while it waited


class StoreError(Exception):
    """The store could not be written; nothing was acknowledged."""


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class StoredMessage(_Row):
    id: int
    thread_key: str
    message_id: str
    author: Author
    text: str
    attachments: list[AttachmentRef] = Field(default_factory=list)
    # Paths of attachments already saved for the agent, or a reason each could not be.
    saved: list[str] | None = None
    state: MessageState
    received_at: float

    @property
    def ready(self) -> bool:
        return not self.attachments or self.saved is not None


class ThreadRow(_Row):
    key: str
    conversation_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    # The instance whose agy started the conversation (its state is under that host's home).
    conversation_instance: str | None = None


class TurnRow(_Row):
    id: int
    thread_key: str
    state: TurnState
    conversation_id: str | None = None
    started_at: float
    ended_at: float | None = None
    error: str | None = None
    response: str | None = None
    # The instance that started it (several instances on PostgreSQL).
    owner: str | None = None


class ProcessRow(_Row):
    pgid: int
    thread_key: str
    run_marker: str
    owner: str | None = None


class ApprovalRow(_Row):
    id: str
    thread_key: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    summary: str
    requested_by: Author | None = None
    state: ApprovalState
    handle: str | None = None
    decided_by: Author | None = None
    reason: str | None = None
    requested_at: float
    decided_at: float | None = None


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
    )


def _message(row: Row) -> StoredMessage:
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


class Tx(Protocol):
    """One open transaction of a :class:`Database`."""

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    async def notify(self, channel: str, payload: str) -> None:
        """Tell other instances, when this transaction commits (nothing on SQLite)."""
        ...


class Database(Protocol):
    """What the store needs of a database; SQLite and PostgreSQL each provide one."""

    # Column types for the migrations: ``id`` and ``real``.
    types: dict[str, str]
    # Appended to a SELECT whose rows the transaction goes on to change ("" where the whole
    # database is locked by the transaction anyway).
    for_update: str
    # Where it lives, for logs and ``doctor`` (no password).
    where: str
    # Several instances may share it (PostgreSQL): threads are leased.
    shared: bool

    def transaction(self) -> AbstractAsyncContextManager[Tx]:
        """A transaction; a database error inside becomes :class:`StoreError`."""
        ...

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """One statement, committed on its own (one round trip where the database allows it);
        the number of rows it changed."""
        ...

    async def execute_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """One write statement with ``RETURNING``, committed on its own like :meth:`execute`;
        the rows it returned."""
        ...

    async def ping(self) -> bool:
        """The database answers (``/healthz``)."""
        ...


def _text(text: str) -> str:
    # JSON from a chat service can hold lone surrogates, which SQLite refuses, and a NUL, which
    # PostgreSQL refuses in text.
    return encodable(text).replace("\x00", "\ufffd")


class _NothingTaken(Exception):
    """Raised inside a transaction to roll it back: no pending message was left to take."""


_ENSURE_THREAD = (
    "INSERT INTO threads (key, platform, channel, thread, created_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"
)


class Store:
    # The PostgreSQL channel that carries the thread key of a message stored for a thread the
    # storing instance does not run.
    INBOX_CHANNEL = "agy_bridge_inbox"
    # Thread keys remembered as recorded (rows in ``threads`` are never deleted, so a key once
    # seen there stays true); past this many the memory starts over.
    RECORDED_KEYS = 100_000

    def __init__(self, db: Database):
        self._db = db
        self._recorded: set[str] = set()

    @property
    def database(self) -> Database:
        return self._db

    # --- messages -----------------------------------------------------------------------

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
            _text(message.text),
            attachments,
            state,
            now,
        )
        if not record_thread or message.thread.key in self._recorded:
            # One statement is its own transaction: one round trip.
            rows = await self._db.execute_returning(sql, params)
            return int(rows[0]["id"]) if rows else None
        async with self._db.transaction() as tx:
            rows = await tx.fetch(sql, params)
            if rows:
                await tx.execute(_ENSURE_THREAD, self._thread_params(message.thread, now))
        if rows:
            self._remember(message.thread.key)
        return int(rows[0]["id"]) if rows else None

    async def pending(self, thread_key: str) -> list[StoredMessage]:
        rows = await self._db.fetch(
            "SELECT * FROM inbox WHERE thread_key = ? AND state = ? ORDER BY id",
            (thread_key, MessageState.PENDING),
        )
        return [_message(r) for r in rows]

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
        return [_message(r) for r in rows]

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
        return turn_id, sorted((_message(r) for r in taken), key=lambda m: m.id)

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

    # --- threads ------------------------------------------------------------------------

    async def ensure_thread(self, ref: ThreadRef) -> None:
        """Record that the thread is a conversation (later messages need no mention)."""
        await self._write(_ENSURE_THREAD, self._thread_params(ref, time.time()))
        self._remember(ref.key)

    @staticmethod
    def _thread_params(ref: ThreadRef, now: float) -> tuple[Any, ...]:
        return (ref.key, ref.platform, ref.channel, ref.thread, now, now)

    def _remember(self, key: str) -> None:
        if len(self._recorded) >= self.RECORDED_KEYS:
            self._recorded.clear()
        self._recorded.add(key)

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
                _text(response) if response is not None else None,
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

    # --- approvals (plain SQL for SQLite and PostgreSQL alike) ---------------------------

    async def add_approval(
        self,
        approval_id: str,
        thread_key: str,
        tool: str,
        args: dict[str, Any],
        summary: str,
        requested_by: Author | None,
    ) -> None:
        await self._write(
            "INSERT INTO approvals (id, thread_key, tool, args_json, summary,"
            " requested_by_json, state, requested_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                approval_id,
                thread_key,
                tool,
                _text(json.dumps(args, default=str)),
                _text(summary),
                requested_by.model_dump_json() if requested_by else None,
                ApprovalState.WAITING,
                time.time(),
            ),
        )

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
                _text(reason) if reason else None,
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
            (thread_key, _text(pattern), by.model_dump_json() if by else None, time.time()),
        )

    async def clear_allowed(self, thread_key: str) -> int:
        return await self._write("DELETE FROM approval_allow WHERE thread_key = ?", (thread_key,))

    # --- plumbing -----------------------------------------------------------------------

    async def _write(self, sql: str, params: Sequence[Any]) -> int:
        """Run one write in its own transaction; the number of rows it changed."""
        return await self._db.execute(sql, params)


async def migrate(db: Database, lock: str = "") -> None:
    """Bring the schema to :data:`SCHEMA_VERSION`, each version in one transaction.

    ``lock`` is a statement run first in that transaction so that instances starting together
    migrate one after the other (PostgreSQL); SQLite's write transaction already is one.
    """
    async with db.transaction() as tx:
        if lock:
            await tx.execute(lock)
        await tx.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        rows = await tx.fetch("SELECT value FROM meta WHERE key = 'schema_version'")
        current = int(rows[0]["value"]) if rows else 0
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"the store was written by a newer agy-bridge (schema {current}, this one knows "
                f"{SCHEMA_VERSION}); upgrade agy-bridge"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in migration_statements(version, db.types):
                await tx.execute(statement)
            await tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(version),),
            )


def store_url(config: Config) -> str:
    """``[store] url``, or the default SQLite file under the data directory."""
    if config.store.url is not None and config.store.url.get_secret_value():
        return config.store.url.get_secret_value()
    return f"sqlite:///{(config.bridge.data_dir / 'bridge.sqlite3').resolve()}"


def is_shared(url: str) -> bool:
    """Several instances can share this store (PostgreSQL)."""
    return url.startswith(("postgresql://", "postgres://"))
