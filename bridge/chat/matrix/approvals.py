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

    def request_contents(
        self, request: ApprovalRequest, *, encrypted: bool = False
    ) -> list[dict[str, Any]]:
        """The request as messages: the core's text (the command in a code block, HTML-escaped
        by the renderer) and how to answer. A request too long for one event goes out in
        several, all of it shown; the last one (with "React ✅ …") is the one answered. None
        notifies anyone (``m.mentions`` empty), whatever the command holds."""
        text = f"{request.text}\n\n{HOW_TO if request.always else _without_always()}"
        return [
            with_relation(with_mentions(content), thread_root=request.thread.thread)
            for content in self._renderer.pieces(text, self._limits, encrypted=encrypted)
        ]

    def result_content(self, result: ApprovalResult, *, encrypted: bool = False) -> dict[str, Any]:
        """The edit of the answered message. When the decision and the command do not fit one
        event, the decision alone: the messages above still show the command."""
        pieces = self._renderer.pieces(result.text, self._limits, encrypted=encrypted)
        if len(pieces) > 1:
            verdict = result.text.split("\n", 1)[0]
            pieces = self._renderer.pieces(
                f"{verdict}\n(the command is shown in the messages above)", self._limits
            )
        return with_mentions(pieces[0])

    async def ask(
        self, outbox: MatrixOutbox, request: ApprovalRequest, remember: Callable[[str], None]
    ) -> str:
        thread = request.thread
        contents = self.request_contents(request, encrypted=outbox.encrypts(thread.channel))
        event_id = ""
        for content in contents:
            event_id = await outbox.send(thread.channel, content)
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
        content = self.result_content(result, encrypted=outbox.encrypts(room))
        await outbox.edit(room, handle, content)
        for reaction in self._reactions.pop(handle) or []:
            await outbox.redact(room, reaction)


def _without_always() -> str:
    return f"React {APPROVE_KEY} to approve, {DENY_KEY} to deny."
