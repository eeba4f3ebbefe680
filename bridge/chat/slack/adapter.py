"""The Slack adapter: Slack events in, the core's replies out (see ``docs/slack.md``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
from anyio.abc import TaskGroup
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.access import NOTICE_TEXT, AccessPolicy, NoticeLedger
from bridge.chat.slack.approvals import ACTION_CHOICES, SlackApprovals
from bridge.chat.slack.assistant import (
    AssistantThread,
    Contexts,
    assistant_thread,
    prompts,
    with_context,
)
from bridge.chat.slack.bound import Retries, ThreadCalls
from bridge.chat.slack.budget import RateBudget
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
from bridge.chat.slack.feedback import FEEDBACK_ACTION_ID, NEGATIVE, POSITIVE
from bridge.chat.slack.files import FileHosts, download
from bridge.chat.slack.format import neutralise_broadcasts, split_message
from bridge.chat.slack.history import ThreadHistory
from bridge.chat.slack.reply import Recipient, ReplySettings, SlackLiveReply
from bridge.chat.slack.session import AgentSession, SessionSupport, session_title
from bridge.chat.slack.transport import (
    SlackStartError,
    check_app_token,
    run_http,
    run_socket_mode,
)
from bridge.chat.slack.users import UserDirectory
from bridge.config import SlackSection
from bridge.core.commands import parse_command
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
    OutgoingFile,
    Reaction,
    SubmitOutcome,
    ThreadRef,
)

log = logging.getLogger(__name__)

# Records a click on an answer's feedback buttons: (thread, answer message id, who, positive,
# when the answer was sent, as a Unix time).
FeedbackSink = Callable[[ThreadRef, str, Author, bool, float | None], Awaitable[None]]

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
        )
        # Who records a click on an answer's feedback buttons (the app wires the store in).
        self._feedback_sink: FeedbackSink | None = None
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
        self._bot: BotIdentity | None = None
        self._tg: TaskGroup | None = None
        self._inbound: Inbound | None = None
        self._http_port: int | None = None
        # Who wrote a message (for stream recipients), and which marks we put on messages.
        self._writers: LRUMap[tuple[str, str], Recipient] = LRUMap(4096)
        self._marks: LRUMap[tuple[str, str], set[Reaction]] = LRUMap(4096)
        self._approvals = SlackApprovals(
            self._client, self._access, self._users, retries=self._retries
        )
        # The running reply of each thread (told when the adapter posts beside it).
        self._live: dict[str, SlackLiveReply] = {}
        # Agent sessions: whether Slack has them for this app (learnt from its first answer),
        # and each thread's first line, the title of its session.
        self._sessions = SessionSupport(data_dir=data_dir)
        self._titles: LRUMap[tuple[str, str], str] = LRUMap(4096)
        # The channel each assistant-container thread's person looks at, for the next turn.
        self._contexts = Contexts()

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
        self._inbound = inbound
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
                    )
                else:
                    await run_http(
                        app,
                        host=self._config.http_host,
                        port=self._config.http_port,
                        started=started,
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
            if self._tg is not None:
                self._tg.start_soon(self._on_stop, inbound, body, action)

        async def on_approval(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            if self._tg is not None:
                self._tg.start_soon(self._approvals.on_action, inbound, body, action)

        app.event("app_mention")(on_event)
        app.event("message")(on_event)
        self._listen_for_sessions(app, inbound)
        self._listen_for_assistant(app)
        app.action(STOP_ACTION_ID)(on_stop)
        for action_id in ACTION_CHOICES:
            app.action(action_id)(on_approval)

        async def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            if self._tg is not None:
                self._tg.start_soon(self._on_feedback, body, action)

        app.action(FEEDBACK_ACTION_ID)(on_feedback)
        return app

    # ----- incoming ---------------------------------------------------------------------------

    async def _on_event(
        self, inbound: Inbound, event: dict[str, Any], body: dict[str, Any]
    ) -> None:
        bot = self._bot
        if bot is None:
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
        self._note_title(candidate)
        text = candidate.text
        if parse_command(text) is None:
            context = self._contexts.take(channel, candidate.thread.thread)
            if context is not None:
                text = with_context(text, context)
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
        outcome = await inbound.submit(message)
        self._after_command(outcome, candidate)

    async def _concerns_agent(self, inbound: Inbound, candidate: Candidate) -> bool:
        """DMs always; in channels a mention, or a reply in a thread that is a conversation."""
        if candidate.is_dm or candidate.mentioned:
            return True
        return candidate.in_thread and await inbound.is_conversation(candidate.thread)

    async def _on_stop(
        self, inbound: Inbound, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        user = str((body.get("user") or {}).get("id") or "")
        channel = str(
            (body.get("channel") or {}).get("id")
            or (body.get("container") or {}).get("channel_id")
            or ""
        )
        try:
            thread = ThreadRef.from_key(str(action.get("value") or ""))
        except ValueError:
            return
        if thread.platform != PLATFORM or thread.channel != channel or not user:
            log.warning("Slack: a Stop button for another thread was ignored")
            return
        await self._stop_as(inbound, thread, user)

    def _stopped_in_slack(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None
    ) -> None:
        """A person stopped the answer's stream in Slack (``stopped_by_user``): Slack names no
        one, and only the stream's recipient (the turn's author) sees that control, so the turn
        stops as theirs, under the Stop button's access rules. Outside the reply's pump: the
        stop ends the reply, which waits for the pump."""
        user = self._recipient(thread, reply_to, author).user_id or (author.id if author else "")
        if self._tg is None or self._inbound is None:
            return
        if not user:
            log.warning("Slack: %s was stopped in Slack by someone unknown", thread.key)
            return
        self._tg.start_soon(self._stop_as, self._inbound, thread, user)

    async def _stop_as(self, inbound: Inbound, thread: ThreadRef, user: str) -> None:
        """Stop ``thread``'s turn as ``user`` (a Stop button, Slack's own stop), if allowed."""
        if not self._access.allows(user, thread.channel):
            self._notify_refused(user, thread.channel, thread.thread)
            return
        try:
            await inbound.stop(thread, await self._users.author(user))
        except Exception:
            # A task of the adapter's group: a failure here must not stop the adapter.
            log.exception("Slack: stopping %s failed", thread.key)

    # ----- agent sessions --------------------------------------------------------------------

    def _listen_for_sessions(self, app: AsyncApp, inbound: Inbound) -> None:
        async def on_session_stopped(event: dict[str, Any]) -> None:
            # Answered at once; the stop runs in the adapter's task group.
            if self._tg is not None:
                self._tg.start_soon(self._on_session_stopped, inbound, event)

        app.event("agent_session_stopped")(on_session_stopped)

    async def _on_session_stopped(self, inbound: Inbound, event: dict[str, Any]) -> None:
        """Slack's own stop button (``agent_session_stopped``): the same as our Stop button,
        under the same access rules. Slack has stopped the listed streams whoever clicked."""
        channel = str(event.get("channel") or "")
        thread_ts = str(event.get("thread_ts") or "")
        user = str(event.get("user") or "")
        if not channel or not thread_ts or not user:
            return
        thread = ThreadRef(platform=PLATFORM, channel=channel, thread=thread_ts)
        live = self._live.get(thread.key)
        if live is not None:
            stopped = event.get("streaming_message_ts") or []
            live.streams_stopped([str(ts) for ts in stopped if ts])
        await self._stop_as(inbound, thread, user)

    def _note_title(self, candidate: Candidate) -> None:
        """The thread's first line, for its session's title (Slack keeps the first one)."""
        key = (candidate.thread.channel, candidate.thread.thread)
        if candidate.ts == candidate.thread.thread or self._titles.get(key) is None:
            self._titles.put(key, session_title(candidate.text))

    def _session(self, thread: ThreadRef, initiator: str | None) -> AgentSession | None:
        if not thread.thread:
            return None
        title = self._titles.get((thread.channel, thread.thread)) or ""
        return AgentSession(self._client, thread, self._sessions, title=title, initiator=initiator)

    def _after_command(self, outcome: SubmitOutcome, candidate: Candidate) -> None:
        """``!new`` ends the thread's conversation: its session is closed."""
        command = parse_command(candidate.text) if outcome is SubmitOutcome.COMMAND else None
        if command is None or command.name != "new" or self._tg is None:
            return
        session = self._session(candidate.thread, None)
        if session is not None and session.wanted:
            self._tg.start_soon(session.set, "closed")

    # ----- feedback on answers ----------------------------------------------------------------

    def observe_feedback(self, sink: FeedbackSink) -> None:
        """Hand each 👍/👎 click on an answer to ``sink`` (for the app: the store, /metrics)."""
        self._feedback_sink = sink

    async def _on_feedback(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        user = str((body.get("user") or {}).get("id") or "")
        container = body.get("container") or {}
        message = body.get("message") or {}
        channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
        answer = str(container.get("message_ts") or message.get("ts") or "")
        root = str(message.get("thread_ts") or container.get("thread_ts") or answer)
        value = str(action.get("value") or "")
        if not (user and channel and answer) or value not in (POSITIVE, NEGATIVE):
            return
        thread = ThreadRef(platform=PLATFORM, channel=channel, thread=root)
        if not self._access.allows(user, channel):
            self._notify_refused(user, channel, root)
            return
        if self._feedback_sink is None:
            return
        try:
            who = await self._users.author(user)
            sent = ts_to_datetime(answer)
            sent_at = sent.timestamp() if sent is not None else None
            await self._feedback_sink(thread, answer, who, value == POSITIVE, sent_at)
        except Exception:
            # A task of the adapter's group: a failure here must not stop the adapter.
            log.exception("Slack: feedback in %s not recorded", thread.key)

    # ----- the assistant container -----------------------------------------------------------

    def _listen_for_assistant(self, app: AsyncApp) -> None:
        async def on_started(event: dict[str, Any]) -> None:
            thread = assistant_thread(event)
            if thread is not None and self._tg is not None:
                self._contexts.seen(thread)
                self._tg.start_soon(self._greet, thread)

        async def on_context_changed(event: dict[str, Any]) -> None:
            thread = assistant_thread(event)
            if thread is not None:
                self._contexts.seen(thread)

        app.event("assistant_thread_started")(on_started)
        app.event("assistant_thread_context_changed")(on_context_changed)

    async def _greet(self, started: AssistantThread) -> None:
        """A new thread in the agent's DM pane: the greeting and the suggested prompts (for
        people the agent serves there; others get the one notice)."""
        channel, thread_ts = started.channel_id, started.thread_ts
        if not self._access.allows(started.user_id, channel):
            self._notify_refused(started.user_id, channel, thread_ts)
            return
        thread = ThreadRef(platform=PLATFORM, channel=channel, thread=thread_ts)
        try:
            if self._config.greeting.strip():
                await self._calls(thread).say(
                    "greeting", markdown_text=neutralise_broadcasts(self._config.greeting)
                )
            suggested = prompts(self._config.suggested_prompts)
            if suggested:
                await self._client.assistant_threads_setSuggestedPrompts(
                    channel_id=channel, thread_ts=thread_ts, prompts=suggested
                )
        except CALL_ERRORS as exc:
            log.info("Slack: no greeting in %s: %s", thread.key, describe(exc))

    @property
    def agent_sessions(self) -> SessionSupport:
        """Whether Slack has agent sessions for this app (learnt from its first answer)."""
        return self._sessions

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
            session=self._session(thread, recipient.user_id),
        )
        # The status and the control message go up beside the turn, not in front of it.
        reply.start(self._tg)
        self._live[thread.key] = reply
        try:
            yield reply
        finally:
            if self._live.get(thread.key) is reply:
                del self._live[thread.key]
            with anyio.CancelScope(shield=True):
                await reply.close()

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

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        live = self._live.get(thread.key)
        calls = self._calls(thread)
        for chunk in split_message(neutralise_broadcasts(text)):
            await calls.say("message", markdown_text=chunk)
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
        live = self._live.get(request.thread.key)
        if live is not None:
            live.posted_elsewhere()  # the request went up beside the running reply
        return handle

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        await self._approvals.settle(request, handle, result)

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
