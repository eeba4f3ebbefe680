"""The marks the bridge puts on people's messages: seen mid-turn, queued for the next turn,
failed. A later mark replaces an earlier one on the same message (queued, then taken)."""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe
from bridge.core.events import Reaction, ThreadRef

log = logging.getLogger(__name__)

REACTIONS: dict[Reaction, str] = {
    Reaction.INJECTED: "eyes",
    Reaction.QUEUED: "inbox_tray",
    Reaction.FAILED: "warning",
}
# A later mark replaces an earlier one on the same message (queued, then taken by a turn).
_REPLACES: dict[Reaction, tuple[Reaction, ...]] = {
    Reaction.INJECTED: (Reaction.QUEUED,),
    Reaction.FAILED: (Reaction.QUEUED,),
}


class Marks:
    def __init__(self, client: AsyncWebClient, capacity: int = 4096) -> None:
        self._client = client
        # Which marks we put on which message (channel, ts), this run.
        self._marks: LRUMap[tuple[str, str], set[Reaction]] = LRUMap(capacity)

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        key = (thread.channel, message_id)
        marks: set[Reaction] = set(self._marks.get(key) or ())
        try:
            await self._client.reactions_add(
                channel=thread.channel, timestamp=message_id, name=REACTIONS[reaction]
            )
        except CALL_ERRORS as exc:
            if api_error(exc) != "already_reacted":
                log.warning("Slack: reaction in %s failed: %s", thread.key, describe(exc))
                return
        marks.add(reaction)
        for earlier in _REPLACES.get(reaction, ()):
            if earlier in marks:
                marks.discard(earlier)
                await self._unreact(thread, message_id, REACTIONS[earlier])
        self._marks.put(key, marks)

    async def _unreact(self, thread: ThreadRef, message_id: str, name: str) -> None:
        try:
            await self._client.reactions_remove(
                channel=thread.channel, timestamp=message_id, name=name
            )
        except CALL_ERRORS as exc:
            if api_error(exc) != "no_reaction":
                log.info("Slack: removing a reaction in %s failed: %s", thread.key, describe(exc))
