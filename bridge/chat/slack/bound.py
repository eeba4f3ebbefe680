"""Slack calls bound once to a client and a thread, retried as a call that must not be lost.

In the manner of slack-bolt's context utilities (``say``, ``set_status``: a callable that
already knows its client, channel and thread), a caller says what to post, not where:
``ThreadCalls(client, thread, retries).say("message", markdown_text=text)``. Each call goes
through :func:`bridge.chat.slack.client.with_retries` with the knobs in :class:`Retries`; the
rate budget is the client's own (``build_client``), so a bound call spends it as a direct one.

What a ``ThreadCalls`` posts in its thread (a message, a file) it reports to its
:class:`PostWatcher`: the adapter's running replies learn so that Slack took their status line
down, without each poster having to remember to tell them. :class:`BoundCalls` makes the
``ThreadCalls`` of any thread with the same client, retries and watcher.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bridge.chat.slack.client import with_retries
from bridge.core.events import ThreadRef

T = TypeVar("T")
RetryObserver = Callable[[str], None]


def no_observer() -> RetryObserver | None:
    return None


@dataclass(frozen=True, slots=True)
class Retries:
    """How often and how patiently a call is tried again (see ``with_retries``)."""

    attempts: int = 4
    backoff: float = 0.5
    # Asked at each call, not once: the adapter learns who counts its retries only at start,
    # after the parts that hold this were built.
    observer: Callable[[], RetryObserver | None] = no_observer

    async def run(self, operation: Callable[[], Awaitable[T]], *, what: str, thread_key: str) -> T:
        return await with_retries(
            operation,
            what=what,
            thread_key=thread_key,
            attempts=self.attempts,
            backoff=self.backoff,
            on_retry=self.observer(),
        )


class RetryReport:
    """Who counts the retried calls (for metrics). The app names them only once the adapter's
    parts, each with its :class:`Retries`, exist: they ask :meth:`current` at each call."""

    def __init__(self) -> None:
        self.observer: RetryObserver | None = None

    def current(self) -> RetryObserver | None:
        return self.observer


class PostWatcher(Protocol):
    def posted(self, thread: ThreadRef) -> None:
        """Something was posted in ``thread`` (a message or a file)."""


class ThreadCalls:
    """The retried Slack calls of one thread. ``what`` names each call in the logs; what is
    posted in the thread is reported to ``watcher``."""

    def __init__(
        self,
        client: AsyncWebClient,
        thread: ThreadRef,
        retries: Retries,
        *,
        watcher: PostWatcher | None = None,
    ) -> None:
        self._client = client
        self._thread = thread
        self._retries = retries
        self._watcher = watcher

    async def say(self, what: str, **fields: Any) -> AsyncSlackResponse:
        """``chat.postMessage`` in the thread (at the channel's top level for a whole channel)."""
        response = await self._run(
            what,
            self._client.chat_postMessage,
            channel=self._thread.channel,
            thread_ts=self._thread.thread or None,
            **fields,
        )
        self._posted()
        return response

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
        response = await self._run(
            what,
            self._client.files_upload_v2,
            channel=self._thread.channel,
            thread_ts=self._thread.thread or None,
            **fields,
        )
        self._posted()
        return response

    async def replies(self, what: str, **fields: Any) -> AsyncSlackResponse:
        """``conversations.replies`` of the thread (one page; ``fields`` pick it)."""
        return await self._run(
            what,
            self._client.conversations_replies,
            channel=self._thread.channel,
            ts=self._thread.thread,
            **fields,
        )

    async def recent(self, what: str, **fields: Any) -> AsyncSlackResponse:
        """One page of the conversation's messages: ``conversations.replies`` of a thread,
        ``conversations.history`` of a whole channel (``fields`` pick the page)."""
        if self._thread.thread:
            return await self.replies(what, **fields)
        return await self._run(
            what, self._client.conversations_history, channel=self._thread.channel, **fields
        )

    def _posted(self) -> None:
        if self._watcher is not None:
            self._watcher.posted(self._thread)

    async def _run(self, what: str, method: Callable[..., Awaitable[T]], **arguments: Any) -> T:
        # A fresh call of ``method`` with the same arguments on every try.
        return await self._retries.run(
            functools.partial(method, **arguments), what=what, thread_key=self._thread.key
        )


@dataclass(frozen=True, slots=True)
class BoundCalls:
    """The :class:`ThreadCalls` of any thread, all with one client, retries and watcher."""

    client: AsyncWebClient
    retries: Retries
    watcher: PostWatcher | None = None

    def __call__(self, thread: ThreadRef) -> ThreadCalls:
        return ThreadCalls(self.client, thread, self.retries, watcher=self.watcher)
