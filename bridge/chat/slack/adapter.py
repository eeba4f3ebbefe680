"""The Slack adapter: Slack events in, the core's replies out (see ``docs/slack.md``).

The adapter wires its parts and answers the core's protocol; each part is a module of its own:
the intake of messages (:mod:`~bridge.chat.slack.intake`), the Bolt listeners
(:mod:`~bridge.chat.slack.listeners`), the running replies (:mod:`~bridge.chat.slack.live`)
with whom they stream to (:mod:`~bridge.chat.slack.recipients`), stops, agent sessions,
approvals, feedback and retry clicks, the assistant pane and the agent view, reactions and
files. Everything posted in a thread goes through :class:`~bridge.chat.slack.bound.ThreadCalls`,
which tells the thread's running reply (Slack took its status line down).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import anyio
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack import members, once
from bridge.chat.slack.access import AccessPolicy, Refusals
from bridge.chat.slack.agent_view import AgentExperience
from bridge.chat.slack.approvals import SlackApprovals
from bridge.chat.slack.assistant import AssistantPane
from bridge.chat.slack.bound import BoundCalls, Retries, RetryReport
from bridge.chat.slack.budget import RateBudget
from bridge.chat.slack.catch_up import CatchUp
from bridge.chat.slack.client import (
    CALL_ERRORS,
    build_client,
    describe,
    observe_retries,
    pooled,
)
from bridge.chat.slack.events import PLATFORM, BotIdentity
from bridge.chat.slack.feedback import FeedbackClicks, FeedbackSink
from bridge.chat.slack.files import Attachments, FileHosts
from bridge.chat.slack.format import neutralise_broadcasts, split_message
from bridge.chat.slack.history import ThreadHistory
from bridge.chat.slack.home import REFRESH_INTERVAL as HOME_REFRESH
from bridge.chat.slack.identity import Identity
from bridge.chat.slack.intake import Intake
from bridge.chat.slack.listeners import Listeners
from bridge.chat.slack.live import Replies, Running
from bridge.chat.slack.reactions import Marks
from bridge.chat.slack.recipients import Recipients
from bridge.chat.slack.reply import ReplySettings
from bridge.chat.slack.retry import RetryClicks
from bridge.chat.slack.session import Sessions, SessionSupport
from bridge.chat.slack.spawn import TaskSlot
from bridge.chat.slack.stops import Stops
from bridge.chat.slack.transport import check_app_token, run_http, run_socket_mode
from bridge.chat.slack.users import UserDirectory
from bridge.config import SlackSection
from bridge.core.capabilities import Opened
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
from bridge.core.home import HomeSources

log = logging.getLogger(__name__)


class SlackAdapter:
    """Implements :class:`bridge.core.events.ChatAdapter` for Slack (Bolt, asyncio)."""

    platform = PLATFORM

    def __init__(
        self,
        config: SlackSection,
        *,
        data_dir: Path,
        reply_interval: float = 1.0,
        socket_ping_interval: float = 10.0,
        retry_backoff: float = 0.5,
        reply_settings: ReplySettings | None = None,
        budget: RateBudget | None = None,
        home_interval: float = HOME_REFRESH,
    ) -> None:
        _check_secrets(config)
        self._config = config
        self._ping_interval = socket_ping_interval
        # One rate budget for every call the app makes (see budget.py).
        self._budget = budget or RateBudget()
        client = self._client = build_client(config, budget=self._budget, backoff=retry_backoff)
        self._retry_report = RetryReport()
        retries = Retries(backoff=retry_backoff, observer=self._retry_report.current)
        self._tasks = TaskSlot()
        self._identity = Identity(client, retries)
        # The running reply of each thread, told by every ThreadCalls what else went up there.
        self._running = Running()
        self._calls = BoundCalls(client, retries, watcher=self._running)
        access = AccessPolicy(config.allowed_users, config.allowed_channels)
        allowed_bots = frozenset(b.strip() for b in config.allowed_bots if b.strip())
        users = UserDirectory(client)
        refusals = Refusals(self._calls, self._tasks)
        # Not counted in the retry metrics: the history reads never were.
        self._history = ThreadHistory(
            client,
            users,
            access=access,
            allowed_bots=allowed_bots,
            retries=Retries(backoff=retry_backoff),
        )
        self._attachments = Attachments(client, retries, FileHosts(config.api_url))
        self._marks = Marks(client)
        self._recipients = Recipients(self._identity)
        self._approvals = SlackApprovals(access, users, calls=self._calls)
        # What the adapter does beside messages and replies, each in its own module: stops,
        # agent sessions, feedback clicks, the assistant container (the DM pane).
        spawn, refuse = self._tasks.spawn, refusals.refuse
        self._stops = Stops(
            access, users, spawn=spawn, refuse=refuse, streams_stopped=self._running.streams_stopped
        )
        self._sessions = Sessions(client, data_dir, spawn=spawn)
        self._feedback = FeedbackClicks(access, users, refuse=refuse)
        pane = AssistantPane(config, client, access, calls=self._calls, spawn=spawn, refuse=refuse)
        # Its successor, Slack's agent messaging experience (agent_view): the Messages tab,
        # titles, the Home tab (its pages refreshed every home_interval seconds at most).
        self._agent_x = AgentExperience(
            config,
            client,
            access,
            users,
            self._sessions,
            spawn=spawn,
            refuse=refuse,
            home_interval=home_interval,
        )
        self._replies = Replies(
            client,
            settings=replace(
                reply_settings
                or ReplySettings(
                    streaming=config.streaming,
                    interval=reply_interval,
                    backoff=retry_backoff,
                    feedback=config.feedback,
                    task_display=config.task_display,
                ),
                retry_observer=self._retry_report.current,
            ),
            budget=self._budget,
            running=self._running,
            recipients=self._recipients,
            sessions=self._sessions,
            stops=self._stops,
            agent_x=self._agent_x,
            tasks=self._tasks,
        )
        # What a lost connection missed is read back at each connection (see catch_up.py).
        catch_up = CatchUp(client, retries, config.catch_up_hours, config.allowed_channels)
        self._intake = Intake(
            identity=self._identity,
            access=access,
            allowed_bots=allowed_bots,
            users=users,
            recipients=self._recipients,
            sessions=self._sessions,
            pane=pane,
            agent_x=self._agent_x,
            refusals=refusals,
            catch_up=catch_up,
            tasks=self._tasks,
        )
        self._listeners = Listeners(
            intake=self._intake,
            stops=self._stops,
            feedback=self._feedback,
            retry_clicks=RetryClicks(access, users, refuse=refuse),
            approvals=self._approvals,
            pane=pane,
            agent_x=self._agent_x,
            tasks=self._tasks,
        )
        self._http_port: int | None = None

    def serve_home(self, sources: HomeSources) -> None:
        """What the Home tab shows (the app wires the core's facts and the providers)."""
        self._agent_x.serve_home(sources)

    @property
    def budget(self) -> RateBudget:
        return self._budget

    @property
    def client(self) -> AsyncWebClient:
        return self._client

    @property
    def bot(self) -> BotIdentity | None:
        """The bot's identity once :meth:`run` has asked Slack (``auth.test``)."""
        return self._identity.bot

    @property
    def http_port(self) -> int | None:
        """The port the HTTP transport listens on (useful with ``http_port = 0``)."""
        return self._http_port

    @property
    def agent_sessions(self) -> SessionSupport:
        """Whether Slack has agent sessions for this app (learnt from its first answer)."""
        return self._sessions.support

    # ----- running ----------------------------------------------------------------------------

    def observe_retries(self, observe: Callable[[str], None]) -> None:
        """Report each retried Slack call ("429", "5xx", "connection", ...), for metrics."""
        self._retry_report.observer = observe
        observe_retries(self._client, observe)

    def observe_feedback(self, sink: FeedbackSink) -> None:
        """Hand each 👍/👎 click on an answer to ``sink`` (for the app: the store, /metrics)."""
        self._feedback.sink = sink

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        async with pooled(self._client):
            await self._run(inbound, started)

    async def _run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        # Token problems stop the bridge here, with a message naming the setting.
        await self._identity.sign_in()
        self._stops.inbound = inbound
        app_token = self._config.app_token
        if self._config.transport == "socket":
            assert app_token is not None  # checked in __init__
            await check_app_token(self._client, app_token.get_secret_value())
        app = self._listeners.app(self._config, self._client, inbound)
        async with anyio.create_task_group() as tg:
            self._tasks.group = tg
            try:
                if app_token is not None and self._config.transport == "socket":
                    await run_socket_mode(
                        app,
                        app_token=app_token.get_secret_value(),
                        started=started,
                        ping_interval=self._ping_interval,
                        connected=functools.partial(self._intake.catch_up_soon, inbound),
                    )
                else:
                    # Events sent while the bridge was down are read back once it listens.
                    await run_http(
                        app,
                        host=self._config.http_host,
                        port=self._config.http_port,
                        started=functools.partial(self._intake.started_http, started, inbound),
                        bound=self._set_port,
                    )
            finally:
                self._tasks.group = None
                tg.cancel_scope.cancel()

    def _set_port(self, port: int) -> None:
        self._http_port = port

    # ----- outgoing ---------------------------------------------------------------------------

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[LiveReply]:
        async with self._replies.open(thread, reply_to, author) as reply:
            yield reply

    async def conversation_reset(self, thread: ThreadRef) -> None:
        """The core reset the thread's conversation (``!new``): its agent session closes."""
        self._sessions.conversation_reset(thread)

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        calls = self._calls(thread)
        for chunk in split_message(neutralise_broadcasts(text)):
            await calls.say("message", markdown_text=chunk)

    # The web console (bridge/core/capabilities.py KnowsMembers, PostsWithoutPreviews).
    async def is_member(self, channel: str, user_id: str) -> bool:
        return await members.is_member(self._client, channel, user_id)

    async def is_direct(self, channel: str) -> bool:
        return members.is_direct(channel)

    async def post_without_previews(self, thread: ThreadRef, text: str) -> None:
        await members.post_without_previews(self._calls(thread), text)

    async def permalink(self, thread: ThreadRef) -> str | None:
        """The thread's root message's link, as Slack gives it (capabilities.Permalinks)."""
        if not thread.thread:
            return None
        try:
            response = await self._client.chat_getPermalink(
                channel=thread.channel, message_ts=thread.thread
            )
        except CALL_ERRORS as exc:
            log.info("Slack: no permalink of %s: %s", thread.key, describe(exc))
            return None
        return str(response.get("permalink") or "") or None

    async def open_thread(self, channel: str, text: str) -> Opened:
        """A thread the bridge opens (a scheduled prompt): ``text`` as a new message at the
        channel's top level, the rest of a long text in its thread."""
        root = ThreadRef(platform=self.platform, channel=channel)
        ts = ""
        for chunk in split_message(neutralise_broadcasts(text)):
            calls = self._calls(root.model_copy(update={"thread": ts}))
            response = await calls.say("new thread", markdown_text=chunk)
            ts = ts or str(response["ts"])
        return Opened(root.model_copy(update={"thread": ts}), ts)

    async def post_with_retry(self, thread: ThreadRef, text: str) -> None:
        """A notice that a turn was cut off, with a Retry button (the thread's ``!retry``)."""
        await once.post_notice(self._calls(thread), thread, text)

    async def tell_once(self, thread: ThreadRef, key: str, text: str) -> bool:
        """:meth:`post_with_retry` unless the thread holds the notice ``key`` (its metadata)."""
        calls = self._calls(thread)
        if await once.said_before(calls, key, self._identity.bot):
            return False
        await once.post_notice(calls, thread, text, key)
        return True

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        await self._calls(thread).upload(
            "file upload", file=file.data, filename=file.name, title=title or file.name
        )

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        await self._marks.react(thread, message_id, reaction)

    async def ask_approval(self, request: ApprovalRequest) -> str:
        # Posted beside the running reply, which its ThreadCalls tells.
        handle = await self._approvals.ask(request)
        self._agent_x.changed()
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        await self._approvals.settle(request, handle, result)
        self._agent_x.changed()

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        return await self._attachments.fetch(ref, out, max_bytes)

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        bot = self._identity.bot
        if not thread.thread or limit <= 0 or bot is None:
            return []
        try:
            return await self._history.entries(thread, limit, bot)
        except CALL_ERRORS as exc:
            log.warning("Slack: no history for %s: %s", thread.key, describe(exc))
            return []


def _check_secrets(config: SlackSection) -> None:
    if config.bot_token is None:
        raise ValueError("slack.bot_token is not set (or SLACK_BOT_TOKEN)")
    if config.transport == "socket" and config.app_token is None:
        raise ValueError("slack.app_token is needed for Socket Mode (or SLACK_APP_TOKEN)")
    if config.transport == "http" and config.signing_secret is None:
        raise ValueError("slack.signing_secret is needed for HTTP mode (or SLACK_SIGNING_SECRET)")


if TYPE_CHECKING:
    # mypy proves the adapter fits the core's protocol here, not only where the app wires it.
    def _fits(adapter: SlackAdapter) -> ChatAdapter:
        return adapter
