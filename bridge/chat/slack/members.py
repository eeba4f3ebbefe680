"""What the web console asks of Slack: whether a person is in a channel (its DMs with the bot
included), whether a channel is a DM, and a message whose links Slack must not unfurl (a
sign-in link: an unfurl is a GET of it by Slack's preview bot)."""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.client import CALL_ERRORS
from bridge.chat.slack.format import neutralise_broadcasts, split_message

log = logging.getLogger(__name__)

# Pages of conversations.members read at most (200 members each).
MAX_PAGES = 50


async def is_member(client: AsyncWebClient, channel: str, user_id: str) -> bool:
    """Whether ``user_id`` is in ``channel``; False when Slack cannot say (deny by default)."""
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        try:
            response = await client.conversations_members(channel=channel, limit=200, cursor=cursor)
        except CALL_ERRORS:
            log.warning("console: Slack did not list the members of %s", channel)
            return False
        if user_id in (response.get("members") or []):
            return True
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            return False
    return False


def is_direct(channel: str) -> bool:
    """Slack's direct-message conversations, and only those, have ids starting with D."""
    return channel.startswith("D")


async def post_without_previews(calls: ThreadCalls, text: str) -> None:
    for chunk in split_message(neutralise_broadcasts(text)):
        await calls.say("message", markdown_text=chunk, unfurl_links=False, unfurl_media=False)
