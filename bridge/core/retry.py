"""``!retry``: a request whose turn a restart or failover cut off, sent to agy again because a
person asked, once.

A cut-off request is never run again by itself (:mod:`bridge.core.handover`); the thread's
notice says so and offers ``!retry``. Its messages are stored again as new inbox rows whose
event ids name the cut-off turn and the message (``retry:<turn>:<message>``): the inbox's
unique event key makes a second ``!retry`` of the same turn a no-op, however many instances
hear it. The rows carry the original authors and texts (agy is told who asked), and the
``!retry`` message's id, so the thread's marks land on it.
"""

from __future__ import annotations

from bridge.core import handover
from bridge.core.events import Author, IncomingMessage
from bridge.core.store import Store
from bridge.core.store.rows import TurnState

# How far back a cut-off turn is looked for among the thread's interrupted turns.
LOOK_BACK = 20
NOTHING = (
    "Nothing to retry: no request of this thread was interrupted by a bridge restart or failover."
)
DONE_ALREADY = (
    "The interrupted request was sent again already (`!retry` sends it once); write it anew "
    "to run it once more."
)


async def messages_again(
    store: Store, retry: IncomingMessage
) -> tuple[int, list[tuple[str, int]]] | str:
    """Store the latest cut-off turn's messages again: (the turn, [(message id, row id)]), or
    what to tell the thread when there is nothing to send."""
    key = retry.thread.key
    turn = next(
        (
            t
            for t in await store.last_turns(key, LOOK_BACK, TurnState.INTERRUPTED)
            if handover.turn_was_cut_off(t)
        ),
        None,
    )
    if turn is None:
        return NOTHING
    originals = await store.turn_messages(turn.id)
    if not originals:
        return NOTHING
    stored = []
    for original in originals:
        again = IncomingMessage(
            thread=retry.thread,
            event_id=f"retry:{turn.id}:{original.id}",
            message_id=retry.message_id,
            author=original.author,
            text=original.text,
            attachments=original.attachments,
        )
        row_id = await store.add_message(again, record_thread=True)
        if row_id is not None:
            stored.append((retry.message_id, row_id))
    if not stored:
        return DONE_ALREADY
    return turn.id, stored


def sent_text(by: Author, count: int) -> str:
    what = "The interrupted request is" if count == 1 else f"The {count} interrupted messages are"
    return f"🔁 {what} sent to the agent again, as {by.label} asked (`!retry`)."
