"""What the store deals in: its states, its rows, and what it needs of a database.

The rows and enums here are what callers get from :class:`bridge.core.store.Store`; the
:class:`Database`/:class:`Tx` protocols are what SQLite (:mod:`bridge.core.store.sqlite`)
and PostgreSQL (:mod:`bridge.core.store.postgres`) provide. :class:`StoreBase` is the plumbing
every part of the store shares (its database, one-statement writes, the memory of recorded threads).

This module imports no other part of the store, so every part (and both backends) can import it
without an import circle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from bridge.core.events import AttachmentRef, Author, ThreadRef
from bridge.core.scrub import encodable

Row = Mapping[str, Any]


class MessageState(StrEnum):
    PENDING = "pending"  # in the inbox, waiting for a turn or a hook call
    IN_TURN = "turn"  # sent to agy as (part of) a turn
    INJECTED = "injected"  # handed to a running turn by the PreInvocation hook
    COMMAND = "command"  # a !command, handled by the core itself
    FAILED = "failed"  # agy could not take it; the thread was told
    WITHDRAWN = "withdrawn"  # its author deleted it before agy read it
    REFUSED = "refused"  # by the turn policy (a budget): kept, never sent to agy


class TurnState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    INTERRUPTED = "interrupted"


class Usage(BaseModel):
    """Token counts of a conversation so far, as agy reports them."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    # Inside output (thinking) and beside input (cache reads), as agy reports them.
    thinking_tokens: int = 0
    cache_read_tokens: int = 0


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
    model_config = ConfigDict(frozen=True, defer_build=True)


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
    # The [[workspaces]] path this thread works in when it is not its channel's (a schedule's).
    workspace: str | None = None


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


class HistoryItem(_Row):
    """One entry of a thread's history: a message (``kind`` is its inbox state, with its
    turn's state and error) or an agent's answer (``kind`` "answer")."""

    at: float
    who: str
    text: str
    kind: str
    turn_state: str | None = None
    turn_error: str | None = None


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
    number: int | None = None  # the request's short number in its thread


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


def storable_text(text: str) -> str:
    """Text as both databases take it."""
    # JSON from a chat service can hold lone surrogates, which SQLite refuses, and a NUL, which
    # PostgreSQL refuses in text.
    return encodable(text).replace("\x00", "\ufffd")


_ENSURE_THREAD = (
    "INSERT INTO threads (key, platform, channel, thread, created_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"
)


class StoreBase:
    """The plumbing the parts of the store share.

    :class:`bridge.core.store.Store` is composed of one class per concern (the inbox, threads
    and turns, approvals); they all work on the one database and the one memory of recorded
    threads this base declares, through the helpers here, so callers keep one object and one
    transaction helper.
    """

    # Thread keys remembered as recorded (rows in ``threads`` are never deleted, so a key once
    # seen there stays true); past this many the memory starts over.
    RECORDED_KEYS = 100_000

    _db: Database
    _recorded: set[str]

    async def _write(self, sql: str, params: Sequence[Any]) -> int:
        """Run one write in its own transaction; the number of rows it changed."""
        return await self._db.execute(sql, params)

    async def _record_thread(self, tx: Tx, ref: ThreadRef, now: float) -> None:
        """Record the thread as a conversation inside ``tx`` (nothing when it is already)."""
        await tx.execute(_ENSURE_THREAD, self._thread_params(ref, now))

    async def _write_thread(self, ref: ThreadRef, now: float) -> None:
        """Record the thread as a conversation in a transaction of its own."""
        await self._write(_ENSURE_THREAD, self._thread_params(ref, now))

    @staticmethod
    def _thread_params(ref: ThreadRef, now: float) -> tuple[Any, ...]:
        return (ref.key, ref.platform, ref.channel, ref.thread, now, now)

    def _is_recorded(self, key: str) -> bool:
        return key in self._recorded

    def _remember(self, key: str) -> None:
        if len(self._recorded) >= self.RECORDED_KEYS:
            self._recorded.clear()
        self._recorded.add(key)
