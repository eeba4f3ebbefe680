"""Reading back what a lost Socket Mode connection missed.

Slack rotates connections (a ``disconnect`` envelope) and networks fail; events sent while no
connection was open are redelivered only sometimes. After every (re)connection and at start,
each thread with messages stored in the last ``[slack] catch_up_hours`` is read from its latest
stored message on (``conversations.replies``), and each allowed channel and DM the bridge has
heard in (``conversations.history``, for new top-level messages). What is found goes through
the same path as an event (the access rules, the core's dedupe by channel and ts), so a late
redelivery never doubles it. With several instances one catches up at a time.

The calls go through the client's rate budget: both methods are Tier 3 (about 50 a minute) for
an internal app, so a catch-up of a few dozen threads takes seconds, and the budget keeps it
from crowding out answers for long.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import Retries
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.core.events import Inbound, ThreadRef

log = logging.getLogger(__name__)

PAGE = 200
# Pages read per thread or channel in one catch-up: a thread with more than this many missed
# messages has more wrong than a lost connection.
MAX_PAGES = 5

OnMessage = Callable[[dict[str, Any]], Awaitable[None]]


def _ts(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0


class CatchUp:
    def __init__(
        self,
        client: AsyncWebClient,
        retries: Retries,
        hours: float,
        channels: Iterable[str],
    ) -> None:
        self._client = client
        self._retries = retries
        self._hours = hours
        self._channels = frozenset(channels)

    async def run(self, inbound: Inbound, on_message: OnMessage) -> int:
        """One catch-up; how many messages it found (each handed to ``on_message``)."""
        if self._hours <= 0:
            return 0
        async with inbound.exclusive("catch-up|slack") as mine:
            if not mine:
                log.info("Slack: another instance is catching up")
                return 0
            seen = await inbound.seen_since("slack", time.time() - self._hours * 3600)
            found = 0
            latest_in: dict[str, str] = {}
            for key, ids in seen.items():
                thread = ThreadRef.from_key(key)
                latest = max(ids, key=_ts)
                if _ts(latest) > _ts(latest_in.get(thread.channel, "0")):
                    latest_in[thread.channel] = latest
                if thread.thread:
                    found += await self._thread(thread, latest, on_message)
            # Channels: the allowed ones and the DMs heard in, from the latest message seen
            # there (a channel never heard in is not read: its old mentions are not news).
            channels = {c for c in latest_in if c in self._channels or c.startswith("D")}
            for channel in sorted(channels):
                found += await self._channel(channel, latest_in[channel], on_message)
        if found:
            log.info("Slack: read back %d message(s) a lost connection may have missed", found)
        return found

    async def _thread(self, thread: ThreadRef, latest: str, on_message: OnMessage) -> int:
        messages = await self._pages(
            "conversations.replies",
            thread.key,
            self._client.conversations_replies,
            channel=thread.channel,
            ts=thread.thread,
            oldest=latest,
        )
        return await self._hand_on(thread.channel, messages, latest, on_message, replies=True)

    async def _channel(self, channel: str, latest: str, on_message: OnMessage) -> int:
        messages = await self._pages(
            "conversations.history",
            f"slack|{channel}|",
            self._client.conversations_history,
            channel=channel,
            oldest=latest,
        )
        return await self._hand_on(channel, messages, latest, on_message, replies=False)

    async def _pages(
        self, what: str, key: str, method: Callable[..., Awaitable[Any]], **args: Any
    ) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            try:
                response = await self._retries.run(
                    functools.partial(method, limit=PAGE, cursor=cursor, **args),
                    what=f"catch-up ({what})",
                    thread_key=key,
                )
            except CALL_ERRORS as exc:
                log.warning("Slack: catch-up of %s failed: %s", key, describe(exc))
                break
            messages += list(response.get("messages") or [])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return messages

    @staticmethod
    async def _hand_on(
        channel: str,
        messages: list[dict[str, Any]],
        latest: str,
        on_message: OnMessage,
        *,
        replies: bool,
    ) -> int:
        # Oldest first, only what came after the latest message seen (the thread's parent
        # comes back with every page of replies; history is newest first).
        later = sorted(
            (m for m in messages if _ts(str(m.get("ts") or "")) > _ts(latest)),
            key=lambda m: _ts(str(m.get("ts") or "")),
        )
        count = 0
        for message in later:
            thread_ts = message.get("thread_ts")
            if not replies and thread_ts and thread_ts != message.get("ts"):
                continue  # a reply in a thread: that thread's own catch-up reads it
            await on_message({**message, "type": "message", "channel": channel})
            count += 1
        return count
