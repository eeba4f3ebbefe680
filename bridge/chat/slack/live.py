"""The running replies of the adapter: one per thread while its turn runs.

:class:`Running` is the register the other parts tell: what else was posted in a thread (a
:class:`bridge.chat.slack.bound.PostWatcher`: Slack took the reply's status line down), and
which of its streams Slack stopped. :class:`Replies` opens a turn's reply, addressed to its
recipient, with its agent session, and keeps it in the register while it runs.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.agent_view import AgentExperience
from bridge.chat.slack.budget import RateBudget
from bridge.chat.slack.recipients import Recipients
from bridge.chat.slack.reply import ReplySettings, SlackLiveReply
from bridge.chat.slack.session import Sessions
from bridge.chat.slack.spawn import TaskSlot
from bridge.chat.slack.stops import Stops
from bridge.core.events import Author, ThreadRef


class Running:
    """The running reply of each thread (by key)."""

    def __init__(self) -> None:
        self._replies: dict[str, SlackLiveReply] = {}

    def get(self, thread: ThreadRef) -> SlackLiveReply | None:
        return self._replies.get(thread.key)

    def add(self, reply: SlackLiveReply) -> None:
        self._replies[reply.thread.key] = reply

    def remove(self, reply: SlackLiveReply) -> None:
        if self._replies.get(reply.thread.key) is reply:
            del self._replies[reply.thread.key]

    def posted(self, thread: ThreadRef) -> None:
        """Something else of ours went up in ``thread`` (a notice, a file, a request): its
        running reply puts its status line up again."""
        live = self._replies.get(thread.key)
        if live is not None:
            live.posted_elsewhere()

    def streams_stopped(self, thread: ThreadRef, stopped: list[str]) -> None:
        live = self._replies.get(thread.key)
        if live is not None:
            live.streams_stopped(stopped)


class Replies:
    """Opens each turn's reply (see :meth:`bridge.core.events.ChatAdapter.open_reply`)."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        settings: ReplySettings,
        budget: RateBudget,
        running: Running,
        recipients: Recipients,
        sessions: Sessions,
        stops: Stops,
        agent_x: AgentExperience,
        tasks: TaskSlot,
    ) -> None:
        self._client = client
        self._settings = settings
        self._budget = budget
        self._running = running
        self._recipients = recipients
        self._sessions = sessions
        self._stops = stops
        self._agent_x = agent_x
        self._tasks = tasks
        # Channels where Slack refused the status line for good (not a passing 429).
        self._no_status: set[str] = set()

    @asynccontextmanager
    async def open(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> AsyncIterator[SlackLiveReply]:
        group = self._tasks.group
        if group is None:
            raise RuntimeError("the Slack adapter is not running")
        recipient = self._recipients.of(thread, reply_to, author)
        reply = SlackLiveReply(
            self._client,
            thread=thread,
            reply_to=reply_to,
            recipient=recipient,
            settings=self._settings,
            budget=self._budget,
            no_status=self._no_status,
            on_user_stop=functools.partial(self._stopped_in_slack, thread, reply_to, author),
            session=self._sessions.session(thread, recipient.user_id),
        )
        # The status and the control message go up beside the turn, not in front of it.
        reply.start(group)
        self._running.add(reply)
        self._agent_x.changed()
        try:
            yield reply
        finally:
            self._running.remove(reply)
            with anyio.CancelScope(shield=True):
                await reply.close()
            # The core records the turn's end just after the reply: read it a moment later.
            self._agent_x.changed(after=1.0)

    def _stopped_in_slack(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> None:
        """The reply's stream was stopped in Slack (``stopped_by_user``): as its recipient."""
        recipient = self._recipients.of(thread, reply_to, author)
        self._stops.stream_stopped(thread, recipient.user_id or (author.id if author else ""))
