"""Edits and deletions of messages: a waiting message takes the change, the agent is told of
a change to one it has.

An edit never decides an approval request and never runs a command again: only a message
stored for the agent is changed. Each change is stored once under its own event id, so a
redelivered change, or the same change seen twice (Slack sends an edit as ``message_changed``
and again as ``app_mention``), is handled once.
"""

from __future__ import annotations

from bridge.core.events import ChangeOutcome, IncomingMessage, MessageChange
from bridge.core.store.ports import EditStore
from bridge.core.store.rows import MessageState, StoredMessage

QUOTE_LIMIT = 300


def withdrawn_text(change: MessageChange) -> str:
    return f"{change.author.label} deleted a message before the agent read it; it will not run."


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 1] + "…"


def told_text(change: MessageChange, original: StoredMessage) -> str:
    """What the agent reads of a change to a message it already had."""
    name = change.author.display_name or change.author.id
    if change.text is None:
        return f"{name} deleted their message: “{_quoted(original.text)}”"
    return f"{name} edited their message: “{_quoted(original.text)}” now reads: {change.text}"


async def apply_change(store: EditStore, change: MessageChange) -> tuple[ChangeOutcome, int | None]:
    """The change, applied to the inbox; with the row of the note for the agent, if one."""
    key = change.thread.key
    # The change's own record, so that it is handled once.
    seen = IncomingMessage(
        thread=change.thread,
        event_id=f"change:{change.event_id}",
        message_id=change.message_id,
        author=change.author,
        text="(deleted)" if change.text is None else change.text,
    )
    original = await store.original(key, change.message_id)
    if original is None or original.state in (
        MessageState.COMMAND,
        MessageState.FAILED,
        MessageState.WITHDRAWN,
        MessageState.REFUSED,
    ):
        # Not one the agent gets. Still recorded, so a later redelivery costs no lookup twice.
        await store.add_message(seen, state=MessageState.COMMAND)
        return ChangeOutcome.IGNORED, None
    if original.author.id != change.author.id:
        return ChangeOutcome.IGNORED, None  # only its author changes a message
    if original.state is MessageState.PENDING:
        if await store.add_message(seen, state=MessageState.COMMAND) is None:
            return ChangeOutcome.DUPLICATE, None
        if change.text is None:
            if await store.withdraw_pending(original.id):
                return ChangeOutcome.WITHDRAWN, None
        elif await store.revise_pending(original.id, change.text):
            return ChangeOutcome.REVISED, None
        # Taken meanwhile: the agent has it now, so it is told instead.
        return await _tell(store, change, original, f"change-note:{change.event_id}")
    return await _tell(store, change, original, f"change:{change.event_id}")


async def _tell(
    store: EditStore, change: MessageChange, original: StoredMessage, event_id: str
) -> tuple[ChangeOutcome, int | None]:
    note = IncomingMessage(
        thread=change.thread,
        event_id=event_id,
        message_id=change.message_id,
        author=change.author,
        text=told_text(change, original),
    )
    row = await store.add_message(note)
    if row is None:
        return ChangeOutcome.DUPLICATE, None
    return ChangeOutcome.TOLD, row
