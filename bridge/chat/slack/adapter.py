"""The Slack adapter: Slack events in, the core's replies out (see ``docs/slack.md``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
from anyio.abc import TaskGroup
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack import members
from bridge.chat.slack.access import NOTICE_TEXT, AccessPolicy, NoticeLedger
from bridge.chat.slack.agent_view import AgentExperience
from bridge.chat.slack.approvals import ACTION_CHOICES, SlackApprovals
from bridge.chat.slack.assistant import AssistantPane
from bridge.chat.slack.bound import Retries, ThreadCalls
from bridge.chat.slack.budget import RateBudget
from bridge.chat.slack.catch_up import CatchUp
from bridge.chat.slack.changes import is_change, parse_change
from bridge.chat.slack.client import (
    CALL_ERRORS,
    api_error,
    build_client,
    describe,
    observe_retries,
)
from bridge.chat.slack.control import STOP_ACTION_ID
from bridge.chat.slack.events import (
    FILES_INFO,
    PLATFORM,
    BotIdentity,
    Candidate,
    SlackFile,
    attachments,
    parse_event,
    ts_to_datetime,
)
from bridge.chat.slack.feedback import FEEDBACK_ACTION_ID, FeedbackClicks, FeedbackSink
from bridge.chat.slack.files import FileHosts, download
from bridge.chat.slack.format import neutralise_broadcasts, split_message
from bridge.chat.slack.history import ThreadHistory
from bridge.chat.slack.home import REFRESH_INTERVAL as HOME_REFRESH
from bridge.chat.slack.reply import Recipient, ReplySettings, SlackLiveReply
from bridge.chat.slack.retry import RETRY_ACTION_ID, RetryClicks, retry_blocks
from bridge.chat.slack.session import Sessions, SessionSupport
from bridge.chat.slack.stops import Stops
from bridge.chat.slack.transport import (
    SlackStartError,
    check_app_token,
    run_http,
    run_socket_mode,
)
from bridge.chat.slack.users import UserDirectory
from bridge.config import SlackSection
from bridge.core.capabilities import Opened
from bridge.core.events import (
    ApprovalRequest,
    ApprovalResult,
    AttachmentError,
    AttachmentRef,
    Author,
    ChatAdapter,
    HistoryEntry,
    Inbound,
    IncomingMessage,
    LiveReply,
    MessageChange,
    OutgoingFile,
    Reaction,
    ThreadRef,
)
from bridge.core.home import HomeSources

log = logging.getLogger(__name__)


REACTIONS: dict[Reaction, str] = {
    Reaction.INJECTED: "eyes",
    Reaction.QUEUED: "inbox_tray",
    Reaction.FAILED: "warning",
}
# A later mark replaces an earlier one on the same message (queued, then taken by a turn).
_REPLACES: dict[Reaction, tuple[Reaction, ...]] = {
    Reaction.INJECTED: (Reaction.QUEUED,),
    Reaction.FAILED: (Reaction.QUEUED,),
}


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
        self._data_dir = data_dir
        # One rate budget for every call the app makes (see budget.py).
        self._budget = budget or RateBudget()
        self._client = build_client(config, budget=self._budget, backoff=retry_backoff)
        self._on_retry: Callable[[str], None] | None = None
        self._retries = Retries(backoff=retry_backoff, observer=lambda: self._on_retry)
        # Channels where Slack refused the status line for good (not a passing 429).
        self._no_status: set[str] = set()
        self._reply_settings = reply_settings or ReplySettings(
            streaming=config.streaming,
            interval=reply_interval,
            backoff=retry_backoff,
            feedback=config.feedback,
            task_display=config.task_display,
        )

        self._ping_interval = socket_ping_interval
        self._access = AccessPolicy(config.allowed_users, config.allowed_channels)
        self._notices = NoticeLedger()
        self._allowed_bots = frozenset(b.strip() for b in config.allowed_bots if b.strip())
        self._users = UserDirectory(self._client)
        self._history = ThreadHistory(
            self._client,
            self._users,
            access=self._access,
            allowed_bots=self._allowed_bots,
            # Not counted in the retry metrics: the history reads never were.
            retries=Retries(backoff=retry_backoff),
        )
        self._hosts = FileHosts(config.api_url)
        # What a lost connection missed, read back at each connection (see catch_up.py).
        self._catch_up = CatchUp(
            self._client, self._retries, config.catch_up_hours, config.allowed_channels
        )
        self._catch_up_wanted = False
        self._catching_up = False
        self._bot: BotIdentity | None = None
        self._tg: TaskGroup | None = None
        self._http_port: int | None = None
        # Who wrote a message (for stream recipients), and which marks we put on messages.
        self._writers: LRUMap[tuple[str, str], Recipient] = LRUMap(4096)
        self._marks: LRUMap[tuple[str, str], set[Reaction]] = LRUMap(4096)
        self._approvals = SlackApprovals(
            self._client, self._access, self._users, retries=self._retries
        )
        # The running reply of each thread (told when the adapter posts beside it).
        self._live: dict[str, SlackLiveReply] = {}
        # What the adapter does beside messages and replies, each in its own module: stops,
        # agent sessions, feedback clicks, the assistant container (the DM pane).
        self._stops = Stops(
            self._access,
            self._users,
            spawn=self._spawn,
            refuse=self._notify_refused,
            streams_stopped=self._streams_stopped,
        )
        self._sessions = Sessions(self._client, data_dir, spawn=self._spawn)
        self._feedback = FeedbackClicks(self._access, self._users, refuse=self._notify_refused)
        self._retry_clicks = RetryClicks(self._access, self._users, refuse=self._notify_refused)
        self._pane = AssistantPane(
            config,
            self._client,
            self._access,
            calls=self._calls,
            spawn=self._spawn,
            refuse=self._notify_refused,
        )
        # Its successor, Slack's agent messaging experience (agent_view): the Messages tab,
        # titles, the Home tab (its pages refreshed every home_interval seconds at most).
        self._agent_x = AgentExperience(
            config,
            self._client,
            self._access,
            self._users,
            self._sessions,
            spawn=self._spawn,
            refuse=self._notify_refused,
            home_interval=home_interval,
        )

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
        return self._bot

    @property
    def http_port(self) -> int | None:
        """The port the HTTP transport listens on (useful with ``http_port = 0``)."""
        return self._http_port

    # ----- running ----------------------------------------------------------------------------

    def observe_retries(self, observe: Callable[[str], None]) -> None:
        """Report each retried Slack call ("429", "5xx", "connection", ...), for metrics."""
        self._on_retry = observe
        observe_retries(self._client, observe)

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        # Token problems stop the bridge here, with a message naming the setting.
        self._bot = await self._identify()
        self._stops.inbound = inbound
        app_token = self._config.app_token
        if self._config.transport == "socket":
            assert app_token is not None  # checked in __init__
            await check_app_token(self._client, app_token.get_secret_value())
        app = self._build_app(inbound)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                if app_token is not None and self._config.transport == "socket":
                    await run_socket_mode(
                        app,
                        app_token=app_token.get_secret_value(),
                        started=started,
                        ping_interval=self._ping_interval,
                        connected=lambda: self._catch_up_soon(inbound),
                    )
                else:
                    # Events sent while the bridge was down are read back once it listens.
                    await run_http(
                        app,
                        host=self._config.http_host,
                        port=self._config.http_port,
                        started=functools.partial(self._started_http, started, inbound),
                        bound=self._set_port,
                    )
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    def _set_port(self, port: int) -> None:
        self._http_port = port

    async def _identify(self) -> BotIdentity:
        try:
            response = await self._retries.run(
                self._client.auth_test, what="auth.test", thread_key="-"
            )
        except SlackApiError as exc:
            raise SlackStartError(
                f"Slack refused the bot token ({api_error(exc)}): check slack.bot_token "
                "(SLACK_BOT_TOKEN, starting with xoxb-)"
            ) from None
        bot = BotIdentity(
            user_id=str(response.get("user_id") or ""),
            bot_id=str(response.get("bot_id") or ""),
            team_id=str(response.get("team_id") or ""),
            name=str(response.get("user") or ""),
        )
        log.info("Slack: signed in as %s (%s) in team %s", bot.name, bot.user_id, bot.team_id)
        return bot

    def _build_app(self, inbound: Inbound) -> AsyncApp:
        secret = self._config.signing_secret
        app = AsyncApp(
            client=self._client,
            signing_secret=secret.get_secret_value() if secret is not None else "",
            # Acknowledge an event only once the core has stored it: a crash in between makes
            # Slack redeliver it (and the core drops what it already has, by event id). This
            # also keeps Bolt from spawning listener tasks of its own.
            process_before_response=True,
            logger=logging.getLogger("bridge.chat.slack.bolt"),
        )

        async def on_event(event: dict[str, Any], body: dict[str, Any]) -> None:
            await self._on_event(inbound, event, body)

        async def on_stop(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            # Interrupting can take a moment; Slack wants the click acknowledged within 3 s.
            self._spawn(self._stops.on_button, inbound, body, action)

        async def on_session_stopped(event: dict[str, Any]) -> None:
            self._spawn(self._stops.on_session_stopped, inbound, event)

        async def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            self._spawn(self._feedback.on_click, body, action)

        async def on_retry(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            self._spawn(self._retry_clicks.on_click, inbound, body, action)

        async def on_approval(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            self._spawn(self._approvals.on_action, inbound, body, action)

        app.event("app_mention")(on_event)
        app.event("message")(on_event)
        app.event("agent_session_stopped")(on_session_stopped)
        app.event("assistant_thread_started")(self._pane.on_started)
        app.event("assistant_thread_context_changed")(self._pane.on_context_changed)
        self._agent_x.register(app, inbound)
        app.action(STOP_ACTION_ID)(on_stop)
        for action_id in ACTION_CHOICES:
            app.action(action_id)(on_approval)
        app.action(FEEDBACK_ACTION_ID)(on_feedback)
        app.action(RETRY_ACTION_ID)(on_retry)
        return app

    # ----- incoming ---------------------------------------------------------------------------

    def _started_http(self, started: Callable[[], None], inbound: Inbound) -> None:
        started()
        self._catch_up_soon(inbound)

    def _catch_up_soon(self, inbound: Inbound) -> None:
        """Read back what a connection missed: one catch-up at a time, and one more when a
        connection came while it ran."""
        self._catch_up_wanted = True
        if self._tg is None or self._catching_up:
            return
        self._catching_up = True

        async def catch_up() -> None:
            try:
                while self._catch_up_wanted:
                    self._catch_up_wanted = False
                    await self._catch_up.run(
                        inbound, lambda event: self._on_event(inbound, event, {})
                    )
            except Exception:
                log.exception("Slack: catch-up failed; it runs again at the next connection")
            finally:
                self._catching_up = False

        self._tg.start_soon(catch_up)

    async def _on_event(
        self, inbound: Inbound, event: dict[str, Any], body: dict[str, Any]
    ) -> None:
        bot = self._bot
        if bot is None:
            return
        if is_change(event):
            await self._on_change(inbound, event, bot)
            return
        candidate = parse_event(
            event,
            bot,
            allowed_bots=self._allowed_bots,
            enterprise_id=body.get("enterprise_id") or None,
        )
        if candidate is None or not await self._concerns_agent(inbound, candidate):
            return
        channel = candidate.thread.channel
        if not self._access.allows(candidate.user, channel):
            log.info("Slack: %s in %s is not allowed", candidate.user, channel)
            self._notify_refused(candidate.user, channel, candidate.thread.thread)
            return
        team = candidate.org or body.get("team_id") or bot.team_id
        self._writers.put((channel, candidate.ts), Recipient(user_id=candidate.user, team_id=team))
        self._sessions.note_title(candidate)
        text = self._pane.text_for_agent(channel, candidate.thread.thread, candidate.text)
        text = await self._agent_x.text_for_agent(candidate, text, bot)
        message = IncomingMessage(
            thread=candidate.thread,
            event_id=candidate.event_id,
            message_id=candidate.ts,
            # With the author's organisation: the core keeps it with the message, so a reply
            # after a restart can still address its stream to the author.
            author=(await self._users.author(candidate.user)).model_copy(update={"org": team}),
            text=text,
            attachments=candidate.attachments,
            sent_at=ts_to_datetime(candidate.ts),
        )
        await inbound.submit(message)

    async def _on_change(self, inbound: Inbound, event: dict[str, Any], bot: BotIdentity) -> None:
        """An edit or a deletion: the core revises, withdraws or tells the agent."""
        change = parse_change(event, bot)
        if change is None or not self._access.allows(change.user, change.thread.channel):
            return
        await inbound.change(
            MessageChange(
                thread=change.thread,
                event_id=change.change_id,
                message_id=change.ts,
                author=await self._users.author(change.user),
                text=change.text,
            )
        )

    async def _concerns_agent(self, inbound: Inbound, candidate: Candidate) -> bool:
        """DMs always; in channels a mention, or a reply in a thread that is a conversation."""
        if candidate.is_dm or candidate.mentioned:
            return True
        return candidate.in_thread and await inbound.is_conversation(candidate.thread)

    # ----- stops, sessions, feedback ---------------------------------------------------------

    def _spawn(self, task: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``task`` in the adapter's task group (Slack wants events answered at once)."""
        if self._tg is not None:
            self._tg.start_soon(task, *args)

    def _streams_stopped(self, thread: ThreadRef, stopped: list[str]) -> None:
        live = self._live.get(thread.key)
        if live is not None:
            live.streams_stopped(stopped)

    def _stopped_in_slack(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> None:
        """The reply's stream was stopped in Slack (``stopped_by_user``): as its recipient."""
        user = self._recipient(thread, reply_to, author).user_id or (author.id if author else "")
        self._stops.stream_stopped(thread, user)

    def observe_feedback(self, sink: FeedbackSink) -> None:
        """Hand each 👍/👎 click on an answer to ``sink`` (for the app: the store, /metrics)."""
        self._feedback.sink = sink

    @property
    def agent_sessions(self) -> SessionSupport:
        """Whether Slack has agent sessions for this app (learnt from its first answer)."""
        return self._sessions.support

    def _notify_refused(self, user: str, channel: str, thread_ts: str) -> None:
        """One ephemeral notice per user and channel per run, sent outside the event handler."""
        if self._tg is None or not self._notices.first_time(user, channel):
            return
        self._tg.start_soon(self._send_notice, user, channel, thread_ts)

    async def _send_notice(self, user: str, channel: str, thread_ts: str) -> None:
        try:
            thread = ThreadRef(platform=PLATFORM, channel=channel, thread=thread_ts)
            await self._calls(thread).whisper("access notice", user, NOTICE_TEXT)
        except CALL_ERRORS:
            pass  # logged by with_retries

    # ----- outgoing ---------------------------------------------------------------------------

    def _calls(self, thread: ThreadRef) -> ThreadCalls:
        return ThreadCalls(self._client, thread, self._retries)

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[LiveReply]:
        if self._tg is None:
            raise RuntimeError("the Slack adapter is not running")
        recipient = self._recipient(thread, reply_to, author)
        reply = SlackLiveReply(
            self._client,
            thread=thread,
            reply_to=reply_to,
            recipient=recipient,
            settings=self._reply_settings,
            budget=self._budget,
            no_status=self._no_status,
            on_user_stop=functools.partial(self._stopped_in_slack, thread, reply_to, author),
            session=self._sessions.session(thread, recipient.user_id),
        )
        # The status and the control message go up beside the turn, not in front of it.
        reply.start(self._tg)
        self._live[thread.key] = reply
        self._agent_x.changed()
        try:
            yield reply
        finally:
            if self._live.get(thread.key) is reply:
                del self._live[thread.key]
            with anyio.CancelScope(shield=True):
                await reply.close()
            # The core records the turn's end just after the reply: read it a moment later.
            self._agent_x.changed(after=1.0)

    def _recipient(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> Recipient:
        # The author the core stored with the message (it survives a restart), else the
        # writer this run saw.
        if author is not None and author.id and author.org:
            return Recipient(user_id=author.id, team_id=author.org)
        for ts in (reply_to, thread.thread):
            if ts:
                known = self._writers.get((thread.channel, ts))
                if known is not None:
                    return known
        # Unknown: neither id rather than a half-filled pair Slack would refuse; the reply
        # then edits instead of streaming (in a DM a stream needs no recipient).
        return Recipient()

    async def conversation_reset(self, thread: ThreadRef) -> None:
        """The core reset the thread's conversation (``!new``): its agent session closes."""
        self._sessions.conversation_reset(thread)

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        live = self._live.get(thread.key)
        calls = self._calls(thread)
        for chunk in split_message(neutralise_broadcasts(text)):
            await calls.say("message", markdown_text=chunk)
            if live is not None:
                live.posted_elsewhere()

    # The web console (bridge/core/capabilities.py KnowsMembers, PostsWithoutPreviews).
    async def is_member(self, channel: str, user_id: str) -> bool:
        return await members.is_member(self._client, channel, user_id)

    async def is_direct(self, channel: str) -> bool:
        return members.is_direct(channel)

    async def post_without_previews(self, thread: ThreadRef, text: str) -> None:
        await members.post_without_previews(self._calls(thread), text)

    async def open_thread(self, channel: str, text: str) -> Opened:
        """A thread the bridge opens (a scheduled prompt): ``text`` as a new message at the
        channel's top level, the rest of a long text in its thread."""
        root = ThreadRef(platform=self.platform, channel=channel)
        ts = ""
        for chunk in split_message(neutralise_broadcasts(text)):
            calls = self._calls(ThreadRef(platform=self.platform, channel=channel, thread=ts))
            response = await calls.say("new thread", markdown_text=chunk)
            ts = ts or str(response["ts"])
        return Opened(root.model_copy(update={"thread": ts}), ts)

    async def post_with_retry(self, thread: ThreadRef, text: str) -> None:
        """A notice that a turn was cut off, with a Retry button (the thread's ``!retry``)."""
        blocks = retry_blocks(thread, neutralise_broadcasts(text))
        if blocks is None:
            await self.post_message(thread, text)
            return
        await self._calls(thread).say("message", blocks=blocks, text=text[:3000])
        live = self._live.get(thread.key)
        if live is not None:
            live.posted_elsewhere()

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        await self._calls(thread).upload(
            "file upload", file=file.data, filename=file.name, title=title or file.name
        )
        live = self._live.get(thread.key)
        if live is not None:
            live.posted_elsewhere()

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        key = (thread.channel, message_id)
        marks: set[Reaction] = set(self._marks.get(key) or ())
        try:
            await self._client.reactions_add(
                channel=thread.channel, timestamp=message_id, name=REACTIONS[reaction]
            )
        except CALL_ERRORS as exc:
            if api_error(exc) != "already_reacted":
                log.warning("Slack: reaction in %s failed: %s", thread.key, describe(exc))
                return
        marks.add(reaction)
        for earlier in _REPLACES.get(reaction, ()):
            if earlier in marks:
                marks.discard(earlier)
                await self._unreact(thread, message_id, REACTIONS[earlier])
        self._marks.put(key, marks)

    async def _unreact(self, thread: ThreadRef, message_id: str, name: str) -> None:
        try:
            await self._client.reactions_remove(
                channel=thread.channel, timestamp=message_id, name=name
            )
        except CALL_ERRORS as exc:
            if api_error(exc) != "no_reaction":
                log.info("Slack: removing a reaction in %s failed: %s", thread.key, describe(exc))

    async def ask_approval(self, request: ApprovalRequest) -> str:
        handle = await self._approvals.ask(request)
        self._agent_x.changed()
        live = self._live.get(request.thread.key)
        if live is not None:
            live.posted_elsewhere()  # the request went up beside the running reply
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        await self._approvals.settle(request, handle, result)
        self._agent_x.changed()

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        token = self._client.token
        if not token:
            raise RuntimeError("the Slack client has no bot token")
        if ref.source.startswith(FILES_INFO):
            ref = await self._described(ref)
        return await download(ref, out, max_bytes, token=token, hosts=self._hosts)

    async def _described(self, ref: AttachmentRef) -> AttachmentRef:
        """A file the event gave without URLs (Slack Connect), as ``files.info`` describes it."""
        file_id = ref.source.removeprefix(FILES_INFO)
        try:
            response = await self._retries.run(
                functools.partial(self._client.files_info, file=file_id),
                what="files.info",
                thread_key=file_id,
            )
        except CALL_ERRORS as exc:
            raise AttachmentError(
                f"{ref.name}: Slack did not let the bot read this file ({describe(exc)})"
            ) from None
        [described] = attachments([SlackFile.model_validate(response.get("file") or {})]) or [ref]
        if described.source.startswith(FILES_INFO):
            raise AttachmentError(f"{ref.name}: Slack gave no download link for this file")
        return described

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        if not thread.thread or limit <= 0 or self._bot is None:
            return []
        try:
            return await self._history.entries(thread, limit, self._bot)
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
