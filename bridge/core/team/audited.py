"""A chat adapter whose approvals and posted files reach the audit trail.

Every approval request the bridge posts and every decision it shows, and every file the agent
posts, goes through the thread's adapter; wrapping it here records them in one place, so no
new path to the chat can forget the trail (as :mod:`bridge.core.scrubbed_chat` does for secrets,
which this wrapper includes: what is recorded is what was shown).
"""

from __future__ import annotations

import hashlib

from bridge.core.capabilities import Opened, OpensThreads
from bridge.core.events import ApprovalRequest, ApprovalResult, ChatAdapter, OutgoingFile, ThreadRef
from bridge.core.scrub import Scrubber
from bridge.core.scrubbed_chat import ScrubbedAdapter
from bridge.core.team.audit import AuditLog


class AuditedAdapter(ScrubbedAdapter):
    def __init__(self, inner: ChatAdapter, scrub: Scrubber, audit: AuditLog) -> None:
        super().__init__(inner, scrub)
        self._audit = audit

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        await super().post_file(thread, file, title)
        await self._audit.append(
            "file_posted",
            thread=thread,
            file=file.name,
            bytes=file.size,
            sha256=hashlib.sha256(file.data).hexdigest(),
            title=title,
        )

    async def ask_approval(self, request: ApprovalRequest) -> str:
        handle = await super().ask_approval(request)
        await self._audit.append(
            "approval_requested",
            thread=request.thread,
            person=request.requested_by,
            request=request.id,
            tool=request.tool,
            summary=request.summary,
        )
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        await super().settle_approval(request, handle, result)
        await self._audit.append(
            "approval_decided",
            thread=request.thread,
            person=result.by,
            request=request.id,
            tool=request.tool,
            summary=request.summary,
            decision=result.state,
            reason=result.reason,
        )


class AuditedOpener(AuditedAdapter):
    """A chat that opens threads (:class:`~bridge.core.capabilities.OpensThreads`), audited
    and scrubbed (as :class:`bridge.core.scrubbed_chat.ScrubbedOpener`)."""

    def __init__(
        self, inner: ChatAdapter, opener: OpensThreads, scrub: Scrubber, audit: AuditLog
    ) -> None:
        super().__init__(inner, scrub, audit)
        self._opener = opener

    async def open_thread(self, channel: str, text: str) -> Opened:
        return await self._opener.open_thread(channel, self._scrub(text))


def audited(
    adapters: dict[str, ChatAdapter], scrub: Scrubber, audit: AuditLog
) -> dict[str, ChatAdapter]:
    """Each adapter behind the scrubber and the trail, with the capabilities it has."""
    chats: dict[str, ChatAdapter] = {}
    for name, adapter in adapters.items():
        if isinstance(adapter, OpensThreads):
            chats[name] = AuditedOpener(adapter, adapter, scrub, audit)
        else:
            chats[name] = AuditedAdapter(adapter, scrub, audit)
    return chats
