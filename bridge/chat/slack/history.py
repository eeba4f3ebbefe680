"""A Slack thread's earlier messages (``conversations.replies``) as :class:`HistoryEntry`.

A thread can hold posts the bridge would never serve: people outside ``allowed_users``, other
apps, incoming webhooks. Each entry says whether its author is listed. An app's post is named
by its bot id: a webhook's ``username`` is whatever its sender chose ("alice" as easily as
anything), so it is shown as the app's claim, never as that person.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.bound import Retries, ThreadCalls
from bridge.chat.slack.events import BotIdentity, to_plain_text, ts_to_datetime
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Author, HistoryEntry, ThreadRef

# Pages read at most (200 messages each): a thread longer than that gives its oldest part only
# to the API, so we stop rather than page on for minutes.
_PAGES = 10
_PAGE_SIZE = 200


class ThreadHistory:
    def __init__(
        self,
        client: AsyncWebClient,
        users: UserDirectory,
        *,
        access: AccessPolicy,
        allowed_bots: frozenset[str] = frozenset(),
        retries: Retries | None = None,
    ) -> None:
        self._client = client
        self._users = users
        self._access = access
        self._allowed_bots = allowed_bots
        self._retries = retries or Retries()

    async def entries(self, thread: ThreadRef, limit: int, bot: BotIdentity) -> list[HistoryEntry]:
        """The last ``limit`` messages of the thread (its root included), oldest first."""
        messages = await self._replies(thread)
        return [
            HistoryEntry(
                author=await self._author(message, bot),
                text=_text(message, bot),
                at=ts_to_datetime(str(message.get("ts") or "")),
                listed=self._listed(message, thread.channel, bot),
            )
            for message in messages[-limit:]
        ]

    def _listed(self, message: dict[str, Any], channel: str, bot: BotIdentity) -> bool:
        """The same rule as for a new message (:func:`bridge.chat.slack.events.parse_event`):
        the bridge itself; an app only when listed in ``allowed_bots`` (and its user allowed,
        where it posts as one); a person when the access lists allow them here."""
        user = str(message.get("user") or "")
        if bot.wrote(message):
            return True
        apps = {str(message[key]) for key in ("bot_id", "app_id") if message.get(key)}
        if apps and not apps & self._allowed_bots:
            return False
        if not user:
            return bool(apps)  # a listed app without a user of its own
        return self._access.allows(user, channel)

    async def _replies(self, thread: ThreadRef) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        calls = ThreadCalls(self._client, thread, self._retries)
        for _ in range(_PAGES):
            response = await calls.replies("history", limit=_PAGE_SIZE, cursor=cursor)
            page = response.get("messages") or []
            messages.extend(item for item in page if isinstance(item, dict))
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return messages

    async def _author(self, message: dict[str, Any], bot: BotIdentity) -> Author:
        user = str(message.get("user") or "")
        if bot.wrote(message):
            return Author(id=bot.user_id, display_name=bot.name or "agy-bridge")
        app = str(message.get("bot_id") or message.get("app_id") or "")
        if user and not app:
            return await self._users.author(user)
        # An app (a webhook, another bot): its id, and the name it gave itself as its claim.
        claimed = str(message.get("username") or "").strip()
        name = f"app {app or 'unknown'}" + (f' calling itself "{claimed}"' if claimed else "")
        return Author(id=app or user or "unknown", display_name=name)


def _text(message: dict[str, Any], bot: BotIdentity) -> str:
    text = to_plain_text(str(message.get("text") or ""), bot.user_id)
    files = [f for f in message.get("files") or [] if isinstance(f, dict)]
    names = [str(f.get("name") or f.get("title") or "file") for f in files]
    return "\n".join([text, *(f"[file: {name}]" for name in names)]).strip()
