"""Whom a streamed answer in a channel is for.

Outside DMs ``chat.startStream`` requires ``recipient_user_id`` and ``recipient_team_id``
together (the person the stream answers, and the team they belong to: on Enterprise Grid the
enterprise id). The adapter knows them from the message that asked: the author the core
stored with it (it survives a restart), else the writer this run saw in the thread.

A turn the bridge opened (a schedule, a forge event: :meth:`bridge.core.core.Core.start_thread`)
answers no person: it answers the thread's root message, which the bot itself posted. Slack's
rule is that a stream replies to the message that asked ("Streamed messages should always be
replies to a user request", the method's docs), and the user who wrote that request is the bot,
a user of its own team; so such a turn streams with the bot's identity (``auth.test``) as its
recipient rather than editing one message. A person's message the adapter saw in the thread
still comes first (a forge event in a person's thread streams to them). Should Slack refuse the
bot as a recipient, the reply edits instead, as it does for any refused stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.identity import Identity
from bridge.core.events import Author, ThreadRef


@dataclass(frozen=True)
class Recipient:
    """Whom a stream in a channel is for: Slack requires both ids outside DMs."""

    user_id: str | None = None
    team_id: str | None = None

    @property
    def complete(self) -> bool:
        return bool(self.user_id and self.team_id)


class Recipients:
    """Who wrote which message (this run), and so whom each reply's stream is for."""

    def __init__(self, identity: Identity, capacity: int = 4096) -> None:
        self._identity = identity
        self.writers: LRUMap[tuple[str, str], Recipient] = LRUMap(capacity)

    def saw(self, channel: str, ts: str, recipient: Recipient) -> None:
        """``recipient`` wrote the message ``ts`` in ``channel``."""
        self.writers.put((channel, ts), recipient)

    def of(self, thread: ThreadRef, reply_to: str | None, author: Author | None) -> Recipient:
        """The recipient of a reply to ``reply_to`` in ``thread``, asked by ``author``."""
        # The author the core stored with the message (it survives a restart), else the
        # writer this run saw.
        if author is not None and author.id and author.org:
            return Recipient(user_id=author.id, team_id=author.org)
        for ts in (reply_to, thread.thread):
            if ts:
                known = self.writers.get((thread.channel, ts))
                if known is not None:
                    return known
        bot = self._identity.bot
        if author is not None and not author.person and bot is not None:
            # A turn the bridge opened: it answers the bot's own root message (see above).
            return Recipient(user_id=bot.user_id or None, team_id=bot.team_id or None)
        # Unknown: neither id rather than a half-filled pair Slack would refuse; the reply
        # then edits instead of streaming (in a DM a stream needs no recipient).
        return Recipient()
