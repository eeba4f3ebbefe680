"""A cut-off notice said once per key, whichever instance says it (capabilities.TellsOnce).

The core tells a thread its turn was cut off before it records that it did: a reporter killed
in between leaves the turn to be told again (nothing lost). When Slack had taken the post, the
next instance would say it twice; so the notice carries its key in the message's metadata
(``metadata``: an ``event_type`` and an ``event_payload``, docs.slack.dev "Using message
metadata"), and before posting the conversation's messages are read with
``include_all_metadata``: a post of this bot with the key means the notice was said.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.chat.slack.events import BotIdentity
from bridge.chat.slack.format import neutralise_broadcasts, split_message
from bridge.chat.slack.retry import retry_blocks
from bridge.core.events import ThreadRef

log = logging.getLogger(__name__)

EVENT_TYPE = "agy_bridge_notice"
# Pages read at most (200 messages each, as the history reads them): a notice beyond them (a
# thread of over 2,000 replies) is not found, and said again: a double, never a loss.
_PAGES = 10
_PAGE_SIZE = 200


def notice_metadata(key: str) -> dict[str, Any]:
    return {"event_type": EVENT_TYPE, "event_payload": {"key": key}}


def _carries(message: dict[str, Any], key: str) -> bool:
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != EVENT_TYPE:
        return False
    payload = metadata.get("event_payload")
    return isinstance(payload, dict) and payload.get("key") == key


async def said_before(calls: ThreadCalls, key: str, bot: BotIdentity | None) -> bool:
    """Whether the notice ``key`` is in the conversation; False also when that cannot be
    known (not signed in yet, the look-up failed): a notice said twice rather than never."""
    if bot is None:
        return False
    try:
        return await told(calls, key, bot)
    except CALL_ERRORS as exc:
        log.warning("Slack: could not look for notice %s (%s); saying it", key, describe(exc))
        return False


async def told(calls: ThreadCalls, key: str, bot: BotIdentity) -> bool:
    """Whether the conversation holds this bot's notice ``key``. Read whole (no ``oldest``:
    the bridge's clock is not Slack's), newest first for a channel, oldest first for a thread
    (Slack's orders)."""
    cursor: str | None = None
    for _ in range(_PAGES):
        response = await calls.recent(
            "notice look-up", include_all_metadata=True, limit=_PAGE_SIZE, cursor=cursor
        )
        for message in response.get("messages") or []:
            if isinstance(message, dict) and bot.wrote(message) and _carries(message, key):
                return True
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            return False
    return False


async def post_notice(
    calls: ThreadCalls, thread: ThreadRef, text: str, key: str | None = None
) -> None:
    """A notice with its Retry button, and with ``key`` in its metadata when given; a notice
    too long for the button goes as messages, the first of them marked."""
    metadata = notice_metadata(key) if key is not None else None
    blocks = retry_blocks(thread, neutralise_broadcasts(text))
    if blocks is not None:
        await calls.say("message", blocks=blocks, text=text[:3000], metadata=metadata)
        return
    for chunk in split_message(neutralise_broadcasts(text)):
        await calls.say("message", markdown_text=chunk, metadata=metadata)
        metadata = None
