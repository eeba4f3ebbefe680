"""A chat adapter behind the secret scrubber: what the core hands a chat to post never carries
a secret the config holds or a listener URL's token.

The turn scrubs its streamed answer itself (a secret may straddle two pieces, see
:class:`bridge.core.scrub.StreamScrubber`); everything else the bridge posts goes through here:
the agent's ``post_message`` and ``post_file`` titles, approval requests (the command the agent
wants to run, its preview) and their decisions, and the bridge's own notices (which quote
commands, patterns and agy's errors). One place, so no new posting path can forget it.

There is no forwarding of other attributes: what the core may call on a chat is the
:class:`~bridge.core.events.ChatAdapter` protocol and the capabilities of
:mod:`bridge.core.capabilities` that post text (``open_thread``, ``post_with_retry``,
``tell_once``), each written out here; the capabilities that post nothing are used on the
adapter itself, where ``app.py`` wires them.
``tests/core/test_scrub_posting.py`` calls every method here that takes text.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import BinaryIO

from bridge.core.capabilities import OffersRetry, Opened, OpensThreads, TellsOnce
from bridge.core.events import (
    ApprovalRequest,
    ApprovalResult,
    AttachmentRef,
    Author,
    ChatAdapter,
    HistoryEntry,
    Inbound,
    LiveReply,
    OutgoingFile,
    Reaction,
    ThreadRef,
)
from bridge.core.live import LiveEvent, LiveHub
from bridge.core.scrub import Scrubber


class ScrubbedAdapter:
    """``inner`` with every posted text scrubbed; what posts nothing passes through."""

    def __init__(self, inner: ChatAdapter, scrub: Scrubber) -> None:
        self.inner = inner
        self.platform = inner.platform
        self._scrub = scrub
        # Watchers of this instance's running turns (the web console), set by open_core.
        self.live: LiveHub | None = None

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        await self.inner.run(inbound, started)

    def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> AbstractAsyncContextManager[LiveReply]:
        # Scrubbed by the turn as a stream (see the module docstring).
        reply = self.inner.open_reply(thread, reply_to, author)
        if self.live is not None:
            return self.live.watch(thread.key, author, reply)
        return reply

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        await self.inner.post_message(thread, self._scrub(text))

    async def post_with_retry(self, thread: ThreadRef, text: str) -> None:
        """A cut-off notice with the adapter's Retry control where it has one (Slack's
        button), else a plain message (``!retry`` is typed)."""
        if isinstance(self.inner, OffersRetry):
            await self.inner.post_with_retry(thread, self._scrub(text))
        else:
            await self.inner.post_message(thread, self._scrub(text))

    async def tell_once(self, thread: ThreadRef, key: str, text: str) -> bool:
        """A cut-off notice said once per ``key`` where the chat can recognise it (see
        :class:`~bridge.core.capabilities.TellsOnce`), else posted as :meth:`post_with_retry`
        posts it."""
        if isinstance(self.inner, TellsOnce):
            return await self.inner.tell_once(thread, key, self._scrub(text))
        await self.post_with_retry(thread, text)
        return True

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        await self.inner.post_file(thread, file, self._scrub(title) if title else title)

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        await self.inner.react(thread, message_id, reaction)
        self._tell(thread, LiveEvent("mark", data={"message": message_id, "mark": reaction.value}))

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        return await self.inner.fetch_attachment(ref, out, max_bytes)

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        return await self.inner.history(thread, limit)

    async def ask_approval(self, request: ApprovalRequest) -> str:
        handle = await self.inner.ask_approval(self._request(request))
        self._tell(request.thread, LiveEvent("approval", data={"state": "waiting"}))
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        shown = result.model_copy(
            update={"text": self._scrub(result.text), "reason": self._scrub(result.reason)}
        )
        await self.inner.settle_approval(self._request(request), handle, shown)
        self._tell(request.thread, LiveEvent("approval", data={"state": result.state}))

    def _tell(self, thread: ThreadRef, event: LiveEvent) -> None:
        if self.live is not None:
            self.live.publish(thread.key, event)

    def _request(self, request: ApprovalRequest) -> ApprovalRequest:
        return request.model_copy(
            update={
                "text": self._scrub(request.text),
                "summary": self._scrub(request.summary),
                "preview": self._scrub(request.preview),
            }
        )


class ScrubbedOpener(ScrubbedAdapter):
    """A chat that opens threads (:class:`~bridge.core.capabilities.OpensThreads`), scrubbed."""

    def __init__(self, inner: ChatAdapter, opener: OpensThreads, scrub: Scrubber) -> None:
        super().__init__(inner, scrub)
        self._opener = opener

    async def open_thread(self, channel: str, text: str) -> Opened:
        return await self._opener.open_thread(channel, self._scrub(text))


def scrubbed(adapters: dict[str, ChatAdapter], scrub: Scrubber) -> dict[str, ChatAdapter]:
    """Each adapter behind the scrubber, with the posting capabilities it has."""
    chats: dict[str, ChatAdapter] = {}
    for name, adapter in adapters.items():
        if isinstance(adapter, OpensThreads):
            chats[name] = ScrubbedOpener(adapter, adapter, scrub)
        else:
            chats[name] = ScrubbedAdapter(adapter, scrub)
    return chats
