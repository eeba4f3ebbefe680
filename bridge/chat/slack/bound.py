"""Slack calls bound once to a client and a thread, retried as a call that must not be lost.

In the manner of slack-bolt's context utilities (``say``, ``set_status``: a callable that
already knows its client, channel and thread), a caller says what to post, not where:
``ThreadCalls(client, thread, retries).say("message", markdown_text=text)``. Each call goes
through :func:`bridge.chat.slack.client.with_retries` with the knobs in :class:`Retries`; the
rate budget is the client's own (``build_client``), so a bound call spends it as a direct one.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bridge.chat.slack.client import with_retries
from bridge.core.events import ThreadRef

T = TypeVar("T")
RetryObserver = Callable[[str], None]


def _no_observer() -> RetryObserver | None:
    return None


@dataclass(frozen=True, slots=True)
class Retries:
    """How often and how patiently a call is tried again (see ``with_retries``)."""

    attempts: int = 4
    backoff: float = 0.5
    # Asked at each call, not once: the adapter learns who counts its retries only at start,
    # after the parts that hold this were built.
    observer: Callable[[], RetryObserver | None] = _no_observer

    async def run(self, operation: Callable[[], Awaitable[T]], *, what: str, thread_key: str) -> T:
        return await with_retries(
            operation,
            what=what,
            thread_key=thread_key,
            attempts=self.attempts,
            backoff=self.backoff,
            on_retry=self.observer(),
        )


class ThreadCalls:
    """The retried Slack calls of one thread. ``what`` names each call in the logs."""

    def __init__(self, client: AsyncWebClient, thread: ThreadRef, retries: Retries) -> None:
        self._client = client
        self._thread = thread
        self._retries = retries

    async def say(self, what: str, **fields: Any) -> AsyncSlackResponse:
        """``chat.postMessage`` in the thread (at the channel's top level for a whole channel)."""
        return await self._run(
            what,
            self._client.chat_postMessage,
            channel=self._thread.channel,
            thread_ts=self._thread.thread or None,
            **fields,
        )

    async def whisper(self, what: str, user: str, text: str) -> AsyncSlackResponse:
        """``chat.postEphemeral``: a message in the thread only ``user`` sees."""
        return await self._run(
            what,
            self._client.chat_postEphemeral,
            channel=self._thread.channel,
            user=user,
            text=text,
            thread_ts=self._thread.thread or None,
        )

    async def edit(self, what: str, ts: str, **fields: Any) -> AsyncSlackResponse:
        """``chat.update`` of the message ``ts`` in the thread's channel."""
        return await self._run(
            what, self._client.chat_update, channel=self._thread.channel, ts=ts, **fields
        )

    async def delete(self, what: str, ts: str) -> AsyncSlackResponse:
        """``chat.delete`` of the message ``ts`` in the thread's channel."""
        return await self._run(what, self._client.chat_delete, channel=self._thread.channel, ts=ts)

    async def upload(self, what: str, **fields: Any) -> AsyncSlackResponse:
        """``files_upload_v2`` into the thread."""
        return await self._run(
            what,
            self._client.files_upload_v2,
            channel=self._thread.channel,
            thread_ts=self._thread.thread or None,
            **fields,
        )

    async def replies(self, what: str, **fields: Any) -> AsyncSlackResponse:
        """``conversations.replies`` of the thread (one page; ``fields`` pick it)."""
        return await self._run(
            what,
            self._client.conversations_replies,
            channel=self._thread.channel,
            ts=self._thread.thread,
            **fields,
        )

    async def _run(self, what: str, method: Callable[..., Awaitable[T]], **arguments: Any) -> T:
        # A fresh call of ``method`` with the same arguments on every try.
        return await self._retries.run(
            functools.partial(method, **arguments), what=what, thread_key=self._thread.key
        )
