"""Slack users as :class:`Author`: display name and email from ``users.info``, cached."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.core.events import Author

log = logging.getLogger(__name__)


def author_from_user(user: dict[str, Any]) -> Author:
    """An :class:`Author` from a ``users.info`` user object (email needs ``users:read.email``)."""
    profile = user.get("profile") or {}
    name = (
        profile.get("display_name")
        or profile.get("real_name")
        or user.get("real_name")
        or user.get("name")
        or ""
    )
    email = profile.get("email") or None
    return Author(id=str(user.get("id", "")), display_name=str(name), email=email)


class UserDirectory:
    """Looks users up once and keeps the answer for ``ttl`` seconds, for at most ``capacity``
    users. A lookup that fails or takes longer than ``timeout`` gives the bare id: the event
    handler must stay quick (Slack expects an answer within 3 seconds)."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        capacity: int = 1000,
        ttl: float = 3600.0,
        timeout: float = 2.0,
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._timeout = timeout
        self._cache: LRUMap[str, tuple[float, Author]] = LRUMap(capacity)

    async def author(self, user_id: str) -> Author:
        cached = self._cache.get(user_id)
        now = anyio.current_time()
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        author = await self._lookup(user_id)
        if author is None:
            return Author(id=user_id)
        self._cache.put(user_id, (now, author))
        return author

    async def _lookup(self, user_id: str) -> Author | None:
        with anyio.move_on_after(self._timeout):
            try:
                response = await self._client.users_info(user=user_id)
            except (SlackApiError, SlackClientError, OSError) as exc:
                log.warning("users.info failed for %s: %s", user_id, _reason(exc))
                return None
            user = response.get("user")
            if isinstance(user, dict):
                author = author_from_user(user)
                return author if author.id else Author(id=user_id)
            return None
        log.warning("users.info timed out for %s", user_id)
        return None


def _reason(exc: Exception) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error", "error"))
    return type(exc).__name__
