"""How chat messages are written for agy: each names its author, attachments name their files.

agy's stream input takes text blocks only, so a saved attachment is named in the text; the
agent opens it with its file tools.
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core import handover
from bridge.core.store.ports import HistoryStore
from bridge.core.store.rows import StoredMessage


def message_text(message: StoredMessage) -> str:
    """ "Alice (@alice:example.org): text", then one line per attachment."""
    author = message.author
    label = author.label
    if author.email:
        # The agent credits teammates in commits (Co-authored-by), so give it their address.
        label = (
            f"{label[:-1]}, {author.email})" if label.endswith(")") else f"{label} ({author.email})"
        )
    lines = [f"{label}: {message.text}".rstrip()]
    saved = message.saved or []
    for ref, where in zip(message.attachments, saved, strict=False):
        kind = "image" if ref.is_image else "file"
        if where.startswith("/"):
            size = f", {ref.size:,} bytes" if ref.size is not None else ""
            lines.append(f"[{kind} attached: {where} ({ref.mimetype}{size}); open it from there]")
        else:
            lines.append(f"[{kind} {ref.name!r} could not be saved: {where}]")
    return "\n".join(lines)


def turn_blocks(messages: Sequence[StoredMessage]) -> list[str]:
    """One text block per message: a batch of queued messages becomes one user turn."""
    return [message_text(m) for m in messages]


def injected_text(message: StoredMessage) -> str:
    """A message handed to the running turn; the agent is told it arrived mid-turn."""
    return f"(Message written in the chat while you were working)\n{message_text(message)}"


async def history_context(store: HistoryStore, key: str) -> list[str]:
    """The thread's history as one block for a new conversation's first turn (none if empty),
    cut-off requests marked as not to be redone (:mod:`bridge.core.handover`). The messages
    waiting now are the first turn's own: the history is what came before."""
    return handover.history_block(await store.history_of_turns(key, handover.HISTORY_LIMIT))
