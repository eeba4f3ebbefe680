"""What each consumer of the store uses of it, as a Protocol: the consumer is typed against its
port, so it can be read (and faked in a test) without the store's other forty methods, and a
new table's queries reach only the consumers whose port names them. :class:`Store` has them
all (mypy checks it where the whole store is handed to a consumer).

Ports: :class:`TurnStore` (a turn and the hook's hand-off: ``core/turn.py``,
``core/turn_verdicts.py``), :class:`GateStore` (a thread's approvals:
``core/approvals/gate.py``), :class:`RecoveryStore` (a restart's or a takeover's clean-up:
``core/recovery.py``), :class:`StatusStore` (``!status``, ``!approvals``: ``core/status.py``),
:class:`EditStore` (edits and deletions of messages: ``core/edits.py``), :class:`HistoryStore`
(a thread's history for a new conversation: ``core/prompt.py``), :class:`FeedbackStore`
(``core/feedback.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from bridge.core.events import Author, IncomingMessage
from bridge.core.store.rows import (
    ApprovalRow,
    ApprovalState,
    Database,
    HistoryItem,
    MessageState,
    ProcessRow,
    StoredMessage,
    ThreadRow,
    TurnRow,
    TurnState,
    Usage,
)
from bridge.core.store.titles import ThreadTitle


class HistoryStore(Protocol):
    async def history(self, thread_key: str, limit: int) -> list[tuple[float, str, str]]: ...

    async def history_of_turns(self, thread_key: str, limit: int) -> list[HistoryItem]: ...

    async def pending(self, thread_key: str) -> list[StoredMessage]: ...


class TurnStore(Protocol):
    async def thread(self, key: str) -> ThreadRow: ...

    async def take_turn(
        self, thread_key: str, conversation_id: str | None, *, owner: str | None = None
    ) -> tuple[int, list[StoredMessage]] | None: ...

    async def take_pending(
        self, thread_key: str, new_state: MessageState, turn_id: int | None, *, ready_only: bool
    ) -> list[StoredMessage]: ...

    async def pending(self, thread_key: str) -> list[StoredMessage]: ...

    async def requeue_turn(self, turn_id: int) -> int: ...

    async def requeue_injected(self, message_ids: Sequence[int]) -> int: ...

    async def fail_taken(self, message_ids: Sequence[int]) -> int: ...

    async def finish_turn(
        self,
        turn_id: int,
        state: TurnState,
        *,
        error: str | None = None,
        response: str | None = None,
        usage: Usage | None = None,
    ) -> None: ...


class GateStore(Protocol):
    async def allow_list(self, thread_key: str) -> list[str]: ...

    async def add_allowed(self, thread_key: str, pattern: str, by: Author | None) -> None: ...

    async def add_approval(
        self,
        approval_id: str,
        thread_key: str,
        tool: str,
        args: dict[str, Any],
        summary: str,
        requested_by: Author | None,
    ) -> int: ...

    async def set_approval_handle(self, approval_id: str, handle: str) -> None: ...

    async def settle_approval(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        by: Author | None = None,
        reason: str | None = None,
    ) -> bool: ...


class FeedbackStore(Protocol):
    """The feedback rows are read with their own SQL (``core/feedback.py``)."""

    @property
    def database(self) -> Database: ...


class StatusStore(FeedbackStore, Protocol):
    async def thread(self, key: str) -> ThreadRow: ...

    async def title(self, thread_key: str) -> ThreadTitle | None: ...

    async def last_turns(
        self, thread_key: str, limit: int, state: TurnState | None = None
    ) -> list[TurnRow]: ...

    async def pending(self, thread_key: str) -> list[StoredMessage]: ...

    async def allow_list(self, thread_key: str) -> list[str]: ...

    async def waiting_approvals(self, thread_key: str | None = None) -> list[ApprovalRow]: ...


class RecoveryStore(HistoryStore, Protocol):
    async def processes(self) -> list[ProcessRow]: ...

    async def remove_process(self, pgid: int) -> None: ...

    async def running_turns(self, thread_key: str | None = None) -> list[TurnRow]: ...

    async def end_running_turn(self, turn_id: int, state: TurnState, error: str) -> bool: ...

    async def finish_turn(
        self,
        turn_id: int,
        state: TurnState,
        *,
        error: str | None = None,
        response: str | None = None,
        usage: Usage | None = None,
    ) -> None: ...

    async def waiting_approvals(self, thread_key: str | None = None) -> list[ApprovalRow]: ...

    async def settle_approval(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        by: Author | None = None,
        reason: str | None = None,
    ) -> bool: ...

    async def thread(self, key: str) -> ThreadRow: ...

    async def set_conversation(
        self, key: str, conversation_id: str | None, *, instance: str | None = None
    ) -> None: ...


class EditStore(Protocol):
    async def add_message(
        self,
        message: IncomingMessage,
        *,
        state: MessageState = MessageState.PENDING,
        record_thread: bool = False,
    ) -> int | None: ...

    async def original(self, thread_key: str, message_id: str) -> StoredMessage | None: ...

    async def revise_pending(self, row_id: int, text: str) -> bool: ...

    async def withdraw_pending(self, row_id: int) -> bool: ...
