"""The neutral event model between the core and the chat adapters.

A chat adapter turns its SDK's events into :class:`IncomingMessage` and hands them to an
:class:`Inbound` (the core); the core answers through the adapter's :class:`ChatAdapter` methods
and one :class:`LiveReply` per turn. Nothing here knows agy or any chat SDK.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, BinaryIO, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ThreadRef(_Model):
    """One chat thread, which is one agy conversation.

    ``channel`` is the Slack channel or the Matrix room; ``thread`` the Slack thread ts or the
    Matrix thread root (empty for a whole room).
    """

    platform: str
    channel: str
    thread: str = ""

    @property
    def key(self) -> str:
        # "|" appears in no Slack or Matrix id, while ":" and "/" do.
        return f"{self.platform}|{self.channel}|{self.thread}"

    @classmethod
    def from_key(cls, key: str) -> ThreadRef:
        platform, channel, thread = key.split("|", 2)
        return cls(platform=platform, channel=channel, thread=thread)


class ChannelRef(_Model):
    """A Slack channel, a Matrix room, the console: where a new thread can be opened."""

    platform: str
    channel: str


class AuthorKind(enum.Enum):
    """Who asked: a person in the chat, or something that starts turns without a chat message
    (:meth:`bridge.core.core.Core.start_thread`)."""

    PERSON = "person"
    BRIDGE = "bridge"  # the bridge itself
    SCHEDULE = "schedule"  # a scheduled prompt
    FORGE = "forge"  # a forge event: a pull request, a CI result, a review comment


class Author(_Model):
    id: str
    display_name: str = ""
    email: str | None = None
    # The author's organisation where the platform has one (Slack: team id, or the enterprise
    # id on Enterprise Grid); adapters need it to address a reply to the author.
    org: str | None = None
    kind: AuthorKind = AuthorKind.PERSON

    @property
    def label(self) -> str:
        """ "Alice (@alice:example.org)", or the id alone when there is no name."""
        if self.kind is not AuthorKind.PERSON:
            return self.display_name or self.id
        if self.display_name and self.display_name != self.id:
            return f"{self.display_name} ({self.id})"
        return self.id

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A person is stored and sent as before the kinds came (older instances read it).
        data: dict[str, Any] = handler(self)
        if self.kind is AuthorKind.PERSON:
            data.pop("kind", None)
        return data

    @property
    def person(self) -> bool:
        return self.kind is AuthorKind.PERSON

    @classmethod
    def bridge(cls) -> Author:
        return cls(id="bridge", display_name="the bridge", kind=AuthorKind.BRIDGE)

    @classmethod
    def schedule(cls, name: str) -> Author:
        """A scheduled prompt called ``name``."""
        return cls(id=f"schedule:{name}", display_name=f"schedule {name}", kind=AuthorKind.SCHEDULE)

    @classmethod
    def forge(cls, source: str, event: str) -> Author:
        """A forge's event: ``source`` (a repository), ``event`` ("CI failed on #12")."""
        return cls(id=f"forge:{source}", display_name=f"{source}: {event}", kind=AuthorKind.FORGE)


class OutgoingFile(_Model):
    """A file the agent posts: its name and its bytes, read once by the bridge without
    following any link (:mod:`bridge.safe_files`), so an adapter never opens a path an agent
    could swap."""

    name: str = Field(min_length=1)
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


class AttachmentRef(_Model):
    """A file attached to a message, not yet downloaded.

    ``source`` is opaque to the core (a URL, an mxc URI with its decryption keys as JSON, ...):
    the adapter that made the reference fetches it with :meth:`ChatAdapter.fetch_attachment`.
    """

    name: str
    mimetype: str = "application/octet-stream"
    size: int | None = None
    source: str

    @property
    def is_image(self) -> bool:
        return self.mimetype.startswith("image/")


class IncomingMessage(_Model):
    thread: ThreadRef
    # Unique per platform: a redelivered or retried event carries the same id and is dropped.
    event_id: str
    # The id to react to or reply under (Slack ts, Matrix event id); often the same as event_id.
    message_id: str
    author: Author
    text: str = ""
    attachments: list[AttachmentRef] = Field(default_factory=list)
    sent_at: datetime | None = None
    # The message this one replies to, where the platform says so (a Matrix reply): an
    # answer that replies to a request decides that request only.
    reply_to: str | None = None


class MessageChange(_Model):
    """An author edited (``text`` set) or deleted (``text`` None) a message of theirs."""

    thread: ThreadRef
    # Unique per change (a redelivered change is dropped, as a redelivered message is).
    event_id: str
    # The changed message's id, as :attr:`IncomingMessage.message_id` gave it.
    message_id: str
    author: Author
    text: str | None = None

    @property
    def deleted(self) -> bool:
        return self.text is None


class ChangeOutcome(enum.Enum):
    REVISED = "revised"  # it still waited: it runs with the new text
    WITHDRAWN = "withdrawn"  # it still waited: it never runs
    TOLD = "told"  # the agent had it: the change goes to the running or the next turn
    IGNORED = "ignored"  # not a message the agent gets (never stored, a command, an answer)
    DUPLICATE = "duplicate"  # this change was handled before


class SubmitOutcome(enum.Enum):
    ACCEPTED = "accepted"  # stored durably; the platform may be acknowledged
    DUPLICATE = "duplicate"  # seen before (a retry or redelivery): acknowledge, do nothing
    COMMAND = "command"  # a !command, handled


class Reaction(enum.Enum):
    """What the thread is told about a message that arrived while the agent was busy."""

    INJECTED = "injected"  # seen by the running turn (mid-turn)
    QUEUED = "queued"  # waits for the next turn
    FAILED = "failed"


class ToolActivity(_Model):
    name: str
    summary: str = ""  # a short line: the command, the file, the server/tool
    state: str = "ACTIVE"  # ACTIVE, DONE or ERROR
    error: str | None = None


class TurnOutcome(_Model):
    """The end of a turn as the thread should see it."""

    final_text: str = ""
    # agy's own words when the turn failed, or a bridge message ("agy exited: ...").
    error: str | None = None
    interrupted: bool = False
    denied: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # What the turn did, for a compact summary under the answer: the files it wrote (as the
    # agent named them, in order), and the tokens it used (None: agy did not say).
    files_changed: list[str] = Field(default_factory=list)
    tokens: int | None = None


class ApprovalChoice(enum.Enum):
    """An approver's answer to a request (a button, a reaction, a typed reply)."""

    APPROVE = "approve"  # run it this once
    ALWAYS = "always"  # run it, and the same command from now on in this thread
    DENY = "deny"


class ApprovalRequest(_Model):
    """A gated tool call waiting for a person in the thread.

    ``text`` is the core's Markdown for the request message (what would run, for whom, how
    long it waits); the adapter adds its own controls (buttons, reactions, a prompt).
    """

    id: str
    thread: ThreadRef
    tool: str
    summary: str  # the command line, or the tool and the file
    preview: str = ""  # a short excerpt or diff of an edit
    always: bool = True  # whether "always in this thread" is offered
    requested_by: Author | None = None  # who asked for the turn
    text: str
    number: int | None = None  # the short number typed answers name (`approve 7`)


class ApprovalResult(_Model):
    """How a request ended, for editing its message: ``text`` says who decided what, when."""

    state: str  # approved, always, denied, timed_out, stopped, expired
    by: Author | None = None
    reason: str = ""
    text: str


class DecideOutcome(enum.Enum):
    DECIDED = "decided"
    NOT_APPROVER = "not_approver"  # this user may not answer: tell them privately
    UNKNOWN = "unknown"  # no such request waits (decided already, expired)
    # A bare typed answer that could mean another request: the thread was told how to answer.
    AMBIGUOUS = "ambiguous"


class HistoryEntry(_Model):
    author: Author
    text: str
    at: datetime | None = None
    # Whether the author is someone the access lists serve (or the bridge itself). An adapter
    # that cannot tell leaves it False: the agent is then told the words are not a teammate's.
    listed: bool = False


class LiveReply(Protocol):
    """One turn's reply in a thread, streamed as the agent works.

    The core gets one from :meth:`ChatAdapter.open_reply` (an async context manager) and calls
    :meth:`finish` exactly once before leaving it.
    """

    async def append(self, text: str) -> None:
        """Stream more answer text (Markdown)."""

    async def tool(self, activity: ToolActivity) -> None:
        """Show tool activity as a short line."""

    async def finish(self, outcome: TurnOutcome) -> None:
        """End the reply: the whole final text replaces what streamed; errors are shown."""


class Inbound(Protocol):
    """What the core offers to adapters."""

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        """Store the message durably; acknowledge the platform only after this returns."""

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        """Interrupt the running turn of a thread (a Stop button, a 🛑 reaction)."""

    async def is_conversation(self, thread: ThreadRef) -> bool:
        """Whether the thread already is a conversation (Slack: later replies need no mention)."""

    async def change(self, change: MessageChange) -> ChangeOutcome:
        """An author edited or deleted a message: a waiting one is revised or withdrawn, one
        the agent has is told to it. Stored durably, like :meth:`submit`."""

    async def retitle(self, thread: ThreadRef, title: str, by: Author) -> bool:
        """A person named the thread in the chat (Slack: renamed its agent session): kept and
        shown by ``!status``; False when the thread is no conversation (nothing is kept)."""

    async def move_thread(self, old: ThreadRef, new: ThreadRef, by: Author) -> bool:
        """The conversation of ``old`` carries on under ``new`` (a Matrix room upgrade by
        ``by``): every row of the thread moves; False when nothing moved (``new`` already is a
        conversation, or another instance runs ``old``)."""

    async def seen_since(self, platform: str, since: float) -> dict[str, list[str]]:
        """Per thread key: the ids of the messages stored since ``since`` (Unix time), oldest
        first (where a catch-up after a lost connection reads on from)."""

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        """Held by one instance at a time (True inside: this one has it; False: another)."""

    async def decide(
        self,
        thread: ThreadRef,
        handle: str,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
    ) -> DecideOutcome:
        """An answer to the request whose message is ``handle`` (a click, a reaction).

        The adapter lets only users allowed in the thread get here; the core checks the
        approvers and tells what happened (the adapter tells a NOT_APPROVER privately)."""


class ChatAdapter(Protocol):
    """A chat platform as the core sees it. Implementations live in ``bridge.chat.<platform>``."""

    platform: str

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        """Connect and deliver messages until cancelled; call ``started`` once connected."""

    def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> AbstractAsyncContextManager[LiveReply]:
        """The live reply of one turn, replying to ``reply_to`` (written by ``author``).

        Entering shows that the agent is working (a status line, typing, a Stop control: the
        reply alone owns that "working" status); leaving clears it, also when the turn was
        cancelled before :meth:`LiveReply.finish`.
        """

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        """Post a Markdown message in the thread now (notices, the agent's progress notes)."""

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        """Upload a file to the thread."""

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        """Mark a user's message (seen mid-turn, queued, failed); the new mark replaces ours.

        The core calls this for one thread at a time, in order.
        """

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        """Download ``ref`` into ``out`` (at most ``max_bytes``); return the size.

        ``out`` is a new file the core created without following any link, in a folder the
        agent cannot replace; the adapter only writes to it (a local file: writes are quick).

        Raise :class:`AttachmentError` with a user-readable reason on failure.
        """

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        """The thread's earlier messages, oldest first (may be empty where unsupported)."""

    async def ask_approval(self, request: ApprovalRequest) -> str:
        """Post the request with its controls (Approve, Always in this thread, Deny); return
        the message's id, the handle clicks and reactions are matched by."""

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        """Edit the request message to say who decided what and when; remove its controls."""


class AttachmentError(Exception):
    """An attachment could not be saved; the message is for the thread."""
