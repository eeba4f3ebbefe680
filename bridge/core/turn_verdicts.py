"""What a turn does when the turn policy does not let it go (:mod:`bridge.core.thread.turn_policy`).

The thread's state machine decides; these carry the decision out on the inbox: refused
messages fail (❌), held ones go back to ``pending`` (📥), and the thread is told the policy's
reason. :class:`bridge.core.turn.TurnRunner` calls them, before a turn runs and when a hook call
took someone else's messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio

from bridge.core.events import ChatAdapter, Reaction, ThreadRef
from bridge.core.marks import Marks
from bridge.core.scrub import Scrubber
from bridge.core.store.ports import TurnStore
from bridge.core.store.rows import StoredMessage, TurnState
from bridge.core.thread.turn_policy import Hold, Refuse

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Parts:
    ref: ThreadRef
    store: TurnStore
    marks: Marks
    adapter: ChatAdapter
    scrub: Scrubber


async def not_run(
    parts: Parts, turn_id: int, messages: list[StoredMessage], verdict: Refuse | Hold
) -> None:
    """The policy refused the turn (its messages fail) or held it (they wait): the turn row is
    closed, and nothing reached agy."""
    with anyio.CancelScope(shield=True):
        if isinstance(verdict, Refuse):
            await parts.store.fail_taken([m.id for m in messages])
            mark, error = Reaction.FAILED, f"refused: {verdict.reason}"
        else:
            await parts.store.requeue_turn(turn_id)
            mark, error = Reaction.QUEUED, f"held: {verdict.reason}"
        await parts.store.finish_turn(turn_id, TurnState.ERROR, error=error)
        for message in messages:
            parts.marks.put(parts.ref, message.message_id, mark)
        await tell(parts, verdict)
    log.info("turn %s by the turn policy", error, extra={"chat_thread": parts.ref.key})


async def set_aside(
    parts: Parts, taken: list[StoredMessage], others: list[StoredMessage], verdict: Refuse | Hold
) -> list[StoredMessage]:
    """A hook call took ``taken``; the policy refused or held ``others`` (someone else's): what
    still joins the running turn. Held: every message from the first of them on goes back to
    the inbox for the next turn (none overtakes another); refused: they fail."""
    with anyio.CancelScope(shield=True):
        if isinstance(verdict, Refuse):
            refused = {m.id for m in others}
            await parts.store.fail_taken(sorted(refused))
            for message in others:
                parts.marks.put(parts.ref, message.message_id, Reaction.FAILED)
            kept = [m for m in taken if m.id not in refused]
        else:
            first = taken.index(others[0])
            kept, back = taken[:first], taken[first:]
            await parts.store.requeue_injected([m.id for m in back])
            for message in back:
                parts.marks.put(parts.ref, message.message_id, Reaction.QUEUED)
        await tell(parts, verdict)
    return kept


async def tell(parts: Parts, verdict: Refuse | Hold) -> None:
    if not verdict.reason:
        return
    try:
        await parts.adapter.post_message(parts.ref, f"⚠️ {parts.scrub(verdict.reason)}")
    except Exception:
        log.exception("could not post a notice", extra={"chat_thread": parts.ref.key})
