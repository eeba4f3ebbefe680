"""A Slack thread's earlier messages (``conversations.replies``) as :class:`HistoryEntry`."""

from __future__ import annotations

import functools
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.client import with_retries
from bridge.chat.slack.events import BotIdentity, to_plain_text, ts_to_datetime
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Author, HistoryEntry, ThreadRef

# Pages read at most (200 messages each): a thread longer than that gives its oldest part only
# to the API, so we stop rather than page on for minutes.
_PAGES = 10
_PAGE_SIZE = 200


class ThreadHistory:
    def __init__(
        self, client: AsyncWebClient, users: UserDirectory, *, backoff: float = 0.5
    ) -> None:
        self._client = client
        self._users = users
        self._backoff = backoff

    async def entries(self, thread: ThreadRef, limit: int, bot: BotIdentity) -> list[HistoryEntry]:
        """The last ``limit`` messages of the thread (its root included), oldest first."""
        messages = await self._replies(thread)
        return [
            HistoryEntry(
                author=await self._author(message, bot),
                text=_text(message, bot),
                at=ts_to_datetime(str(message.get("ts") or "")),
            )
            for message in messages[-limit:]
        ]

    async def _replies(self, thread: ThreadRef) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_PAGES):
            response = await with_retries(
                functools.partial(
                    self._client.conversations_replies,
                    channel=thread.channel,
                    ts=thread.thread,
                    limit=_PAGE_SIZE,
                    cursor=cursor,
                ),
                what="history",
                thread_key=thread.key,
                backoff=self._backoff,
            )
            page = response.get("messages") or []
            messages.extend(item for item in page if isinstance(item, dict))
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return messages

    async def _author(self, message: dict[str, Any], bot: BotIdentity) -> Author:
        user = str(message.get("user") or "")
        if user == bot.user_id or (bot.bot_id and message.get("bot_id") == bot.bot_id):
            return Author(id=bot.user_id, display_name=bot.name or "agy-bridge")
        if user:
            return await self._users.author(user)
        name = str(message.get("username") or message.get("bot_id") or "unknown")
        return Author(id=str(message.get("bot_id") or name), display_name=name)


def _text(message: dict[str, Any], bot: BotIdentity) -> str:
    text = to_plain_text(str(message.get("text") or ""), bot.user_id)
    files = [f for f in message.get("files") or [] if isinstance(f, dict)]
    names = [str(f.get("name") or f.get("title") or "file") for f in files]
    return "\n".join([text, *(f"[file: {name}]" for name in names)]).strip()
