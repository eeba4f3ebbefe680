"""Approval requests in Matrix: the bot posts the request and pre-reacts ✅ ♾️ ❌; the first
approver's reaction decides (a reply ``deny: …`` gives a reason, read by the core); the
request is then edited to say who decided what and when, and the bot's reactions go.

A reaction by someone who may not answer changes nothing; the room gets a short notice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from nio import ReactionEvent
from nio.events import Event

from bridge.chat.common.lru import LRUMap
from bridge.core.events import ApprovalChoice, ApprovalRequest, ApprovalResult

from .format import Limits, Renderer, with_mentions, with_relation
from .outbox import MatrixOutbox
from .reply import SendFailed

log = logging.getLogger(__name__)

APPROVE_KEY = "✅"
ALWAYS_KEY = "♾️"
DENY_KEY = "❌"
_CHOICES = {
    APPROVE_KEY: ApprovalChoice.APPROVE,
    ALWAYS_KEY.replace("\ufe0f", ""): ApprovalChoice.ALWAYS,
    DENY_KEY: ApprovalChoice.DENY,
}
HOW_TO = (
    f"React {APPROVE_KEY} to approve, {ALWAYS_KEY} to approve always in this thread, "
    f"{DENY_KEY} to deny."
)


def approval_answer(event: Event) -> tuple[str, ApprovalChoice] | None:
    """(the event reacted to, the choice) for a ✅ ♾️ ❌ reaction; None for anything else."""
    if not isinstance(event, ReactionEvent):
        return None
    choice = _CHOICES.get(event.key.replace("\ufe0f", "").strip())
    return (event.reacts_to, choice) if choice is not None else None


class MatrixApprovals:
    """Posts and edits requests; remembers the bot's own reactions to remove them."""

    def __init__(self, renderer: Renderer, limits: Limits, remembered: int) -> None:
        self._renderer = renderer
        self._limits = limits
        # request event id -> the bot's reaction event ids on it
        self._reactions: LRUMap[str, list[str]] = LRUMap(remembered)

    def request_content(self, request: ApprovalRequest) -> dict[str, Any]:
        """The request message: the core's text (the command in a code block, HTML-escaped by
        the renderer) and how to answer; it notifies no one (``m.mentions`` empty), whatever
        the command holds."""
        text = f"{request.text}\n\n{HOW_TO if request.always else _without_always()}"
        content = with_mentions(self._renderer.pieces(text, self._limits)[0])
        return with_relation(content, thread_root=request.thread.thread)

    def result_content(self, result: ApprovalResult) -> dict[str, Any]:
        return with_mentions(self._renderer.pieces(result.text, self._limits)[0])

    async def ask(
        self, outbox: MatrixOutbox, request: ApprovalRequest, remember: Callable[[str], None]
    ) -> str:
        thread = request.thread
        event_id = await outbox.send(thread.channel, self.request_content(request))
        remember(event_id)
        keys = [APPROVE_KEY, *([ALWAYS_KEY] if request.always else []), DENY_KEY]
        reactions: list[str] = []
        for key in keys:
            try:
                reactions.append(await outbox.react(thread.channel, event_id, key))
            except SendFailed as exc:
                log.warning("could not pre-react %s in %s: %s", key, thread.channel, exc)
        self._reactions.put(event_id, reactions)
        return event_id

    async def settle(
        self, outbox: MatrixOutbox, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        room = request.thread.channel
        await outbox.edit(room, handle, self.result_content(result))
        for reaction in self._reactions.pop(handle) or []:
            await outbox.redact(room, reaction)


def _without_always() -> str:
    return f"React {APPROVE_KEY} to approve, {DENY_KEY} to deny."
