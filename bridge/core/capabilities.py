"""What a chat adapter may offer beyond :class:`bridge.core.events.ChatAdapter`, each a small
Protocol the bridge checks once, where it wires the adapters (``app.py``, ``open_core``).

An adapter offers a capability by having its methods (no registration, no base class); the
core asks ``isinstance(adapter, OpensThreads)`` and never looks for a method by its name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from bridge.core.events import Author, ThreadRef

if TYPE_CHECKING:
    from bridge.core.home import HomeSources
    from bridge.core.store import Store

# A feedback click: the thread, the answer's message id, who clicked, up or down, the turn's
# start (Unix time) when known.
FeedbackSink = Callable[[ThreadRef, str, Author, bool, float | None], Awaitable[None]]


@dataclass(frozen=True)
class Opened:
    """A thread the adapter opened: its key, and the root message's id (the turn replies to
    it)."""

    thread: ThreadRef
    message_id: str


@runtime_checkable
class OpensThreads(Protocol):
    """A new thread in a channel or room, started by a root message the bridge posts (a turn
    from a schedule, a forge event: :meth:`bridge.core.core.Core.start_thread`)."""

    async def open_thread(self, channel: str, text: str) -> Opened:
        """Post ``text`` (Markdown) as a new thread's first message in ``channel``."""
        ...


@runtime_checkable
class Permalinks(Protocol):
    """A link to a thread as the chat itself gives it (Slack's ``chat.getPermalink``), for a
    pull request's body; None when the chat cannot say (the bridge builds one instead)."""

    async def permalink(self, thread: ThreadRef) -> str | None: ...


@runtime_checkable
class OffersRetry(Protocol):
    """A notice that a turn was cut off, posted with a Retry control (Slack's button: a
    click is that person's ``!retry``)."""

    async def post_with_retry(self, thread: ThreadRef, text: str) -> None: ...


@runtime_checkable
class TellsOnce(Protocol):
    """A cut-off notice said once per ``key``, however many instances try: the store cannot
    tell "said, but the reporter died before recording it" from "never said", only the chat
    can. The adapter marks the notice with ``key`` and recognises it there before posting
    again (Slack: the message's metadata; Matrix: a transaction id the homeserver dedupes), so
    a notice posted and not recorded is not posted twice, and one never posted still is. With
    the Retry control where the adapter has one (:class:`OffersRetry`)."""

    async def tell_once(self, thread: ThreadRef, key: str, text: str) -> bool:
        """Post ``text`` unless the thread already holds the notice ``key``; True when posted
        now (or sent where the chat itself drops a repeat)."""
        ...


@runtime_checkable
class ServesHome(Protocol):
    """A home page per person (Slack's App Home): their threads, what waits for them, and the
    sections whose providers ``sources`` carries."""

    def serve_home(self, sources: HomeSources) -> None: ...


@runtime_checkable
class ObservesRetries(Protocol):
    """Counts the platform's retried calls (rate limits, server errors) in the bridge's
    metrics."""

    def observe_retries(self, observe: Callable[[str], None]) -> None: ...


@runtime_checkable
class CollectsFeedback(Protocol):
    """Feedback buttons under answers: each click is handed to ``sink`` (a row in the store)."""

    def observe_feedback(self, sink: FeedbackSink) -> None: ...


@runtime_checkable
class KeepsTrust(Protocol):
    """Device trust kept in the bridge's store (Matrix: pinned identities, verifications)."""

    def use_trust_store(self, store: Store) -> None: ...


@runtime_checkable
class HearsResets(Protocol):
    """Told when a thread's conversation was reset (``!new``), to reset its own view of the
    thread (Slack: its agent session's title) without reading the thread's text."""

    async def conversation_reset(self, thread: ThreadRef) -> None: ...


@runtime_checkable
class SingleInstance(Protocol):
    """The adapter's connection runs on one bridge instance at a time (Matrix: one sync and
    one encryption store per device), declared by the adapter (``single_instance = True``);
    the core names no platform."""

    single_instance: bool


def single_instance(adapter: object) -> bool:
    return isinstance(adapter, SingleInstance) and adapter.single_instance


@runtime_checkable
class KnowsMembers(Protocol):
    """Whether a person is a member of a channel or room (a DM with the bot included), as the
    chat knows it: what the web console shows a person follows the chat's own rules."""

    async def is_member(self, channel: str, user_id: str) -> bool: ...

    async def is_direct(self, channel: str) -> bool:
        """Whether ``channel`` is a direct conversation of one person with the bot."""
        ...


@runtime_checkable
class PostsWithoutPreviews(Protocol):
    """A message whose links the chat must not preview (a sign-in link: a preview fetches
    it)."""

    async def post_without_previews(self, thread: ThreadRef, text: str) -> None: ...
