"""The thread's status line ("is working…"): ``assistant.threads.setStatus``.

Since March 2026 Slack shows it in any thread the app may write in (``chat:write``), and
clears it by itself two minutes after it was set without a message, and whenever the app
posts in the thread. So the reply sets it when the turn starts, sets it again after each of its
posts and at least every ``refresh`` seconds, and clears it at the end only when its own last
post has not already done so.
"""

from __future__ import annotations

import logging

import anyio
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.budget import Deferred, RateBudget
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe, is_transient, retry_after
from bridge.core.events import ThreadRef

log = logging.getLogger(__name__)

STATUS_TEXT = "is working…"
# Errors that concern this thread only; any other refusal stands for the whole channel.
_THREAD_ERRORS = frozenset({"invalid_thread_ts", "thread_not_found"})
# After a transient failure without Retry-After.
_RETRY = 5.0


class StatusLine:
    def __init__(self, client: AsyncWebClient, thread: ThreadRef, refused: set[str]) -> None:
        self._client = client
        self._thread = thread
        # Channels where Slack refused the status for good (shared by the adapter's replies).
        self._refused = refused
        self._given_up = False
        self.up = False

    @property
    def wanted(self) -> bool:
        return (
            bool(self._thread.thread)
            and not self._given_up
            and self._thread.channel not in self._refused
        )

    async def show(self) -> float | None:
        """Set the status (an optional call). None when done (or refused for good); else the
        seconds after which to try again (no token to spare, a 429, a passing error)."""
        if not self.wanted:
            return None
        try:
            with RateBudget.optional():
                await self._client.assistant_threads_setStatus(
                    channel_id=self._thread.channel,
                    thread_ts=self._thread.thread,
                    status=STATUS_TEXT,
                )
        except Deferred as deferred:
            return deferred.wait
        except CALL_ERRORS as exc:
            if is_transient(exc):
                # A 429 or a hiccup: the channel is not refusing, ask again later.
                log.debug("status for %s deferred: %s", self._thread.key, describe(exc))
                wait = retry_after(exc)
                return _RETRY if wait is None else wait
            code = api_error(exc)
            log.info("no status line in %s: %s", self._thread.key, describe(exc))
            if code in _THREAD_ERRORS or not code:
                self._given_up = True
            else:
                self._refused.add(self._thread.channel)
            return None
        self.up = True
        return None

    def cleared_by_post(self) -> None:
        """The app posted in the thread: Slack took the status down."""
        self.up = False

    async def clear(self) -> None:
        """Take the status down if it is (still) up; best effort, not waiting long."""
        if not self.up:
            return
        self.up = False
        with anyio.move_on_after(10.0):
            try:
                await self._client.assistant_threads_setStatus(
                    channel_id=self._thread.channel, thread_ts=self._thread.thread, status=""
                )
            except CALL_ERRORS as exc:
                log.info("could not clear the status of %s: %s", self._thread.key, describe(exc))
