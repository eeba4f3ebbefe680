"""A local fake of Slack: the Web API methods the adapter uses, file URLs, and Socket Mode.

Serves on 127.0.0.1 (a port the OS picks). Every API call is recorded; a test can make a method
answer 429 or 500 a number of times, expire live streams, refuse streaming, push events and
button clicks over the Socket Mode websocket, collect the acks, and drop the connection; or, in
HTTP mode, POST signed events and clicks to request URLs (several, in turn, as a load balancer
would), sending an event again when it is not answered in time, as Slack does.

It is as strict as Slack where the bridge depends on it:
- rate tiers: past a method's rate (per workspace, ``chat.postMessage`` per channel) it answers
  HTTP 429 with ``Retry-After`` (:data:`TIERS`, ``enforce_tiers``);
- streams end ``stream_lifetime`` seconds after they started, text flowing or not, and
  ``chat.update`` on a message still streaming answers ``streaming_state_conflict``;
- ``chat.startStream`` wants ``recipient_user_id`` and ``recipient_team_id`` together (both
  outside DMs) and names the one missing; the user must be one of the workspace's (the bot
  user is one) and the team a team or enterprise id;
- ``task_update`` chunks (:class:`StreamChunks`) build a stream's tasks by id, checked as
  Slack checks them; an edit (``chat.update``) leaves a message without them;
- a stream a person stopped in Slack (:meth:`FakeSlack.stop_stream_as_user`) answers every
  later append and stop with ``stopped_by_user``;
- agent sessions (:class:`AgentSessions`): ``agents.sessions.setStatus`` creates a thread's
  session (with its title, ignored afterwards) and moves its status; ``chat.stopStream`` sets
  the thread's session to its ``session_status``, ``active`` by default, as Slack documents;
  Slack never moves a status by itself; :meth:`FakeSlack.press_session_stop` is a person
  clicking Slack's own stop button (only while ``processing``): the thread's live streams stop
  and ``agent_session_stopped`` arrives. An app not declared as an agent
  (``agent_app = False``, the default) is refused with ``missing_scope`` (declaring an app as
  an agent adds its ``assistant:write`` scope; Slack documents no code of its own for this);
- ``assistant.threads.setStatus`` works in any thread, with Slack's error codes; a status
  clears itself ``status_lifetime`` seconds after it was set, and when the app posts there;
- the app's messaging experience (``experience``: ``assistant_view`` or ``agent_view``) decides
  which events Slack sends and how ``assistant.threads.setSuggestedPrompts`` reads a
  ``thread_ts``; the agent messaging experience, the App Home (``views.publish``) and channel
  membership are :class:`tests.chat.slack.fake_agent_view.AgentView`'s; streams take
  ``task_display_mode`` (``timeline`` or ``plan``) and ``plan_update`` chunks, whose title only
  a plan shows;
- message metadata (docs.slack.dev "Using message metadata"): ``chat.postMessage`` takes an
  object of an ``event_type`` (a string) and an ``event_payload`` (an object of strings,
  numbers, booleans, objects of those and lists of such objects), and nothing else; any other
  shape answers ``invalid_metadata_format``. ``conversations.replies`` and
  ``conversations.history`` return a message's metadata only when asked with
  ``include_all_metadata``.

The fake keeps a model of the messages, so tests can read a thread as a person would see it:
``Message.visible`` is the text as posted, ``Message.rendered`` what Slack shows of it, with
mrkdwn's control sequences applied as Slack applies them (``<!channel>``, ``<!here>``,
``<!everyone>`` and ``<!subteam^ID>`` ping many people, ``<url|label>`` shows only the label,
``&lt;`` ``&gt;`` ``&amp;`` show ``<`` ``>`` ``&``), and ``Message.pings`` the channel-wide
mentions a message makes, in its blocks, its ``text`` fallback (notifications) or its
Markdown. For ``markdown_text`` the fake is stricter than what Slack documents: it counts the
same ``<!…>`` sequences and bare ``@channel``/``@here``/``@everyone`` words as pings, since
Slack does not say that its Markdown translation leaves them inert.
"""

from __future__ import annotations

import collections
import html
import itertools
import json
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

import aiohttp
import anyio
from aiohttp import web
from markdown_it import MarkdownIt
from slack_sdk.signature import SignatureVerifier

from bridge.chat.slack.tiers import SLACK_TIERS, Tier, scope_key
from tests.chat.slack.fake_agent_view import AgentView

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
BOT_USER = "UBOT0001"
BOT_ID = "BBOT0001"
TEAM = "T0FAKE01"
APP_ID = "A0FAKE01"

# Slack's rate tiers: the one table the app's budget reads too (bridge/chat/slack/tiers.py).
TIERS: dict[str, Tier] = dict(SLACK_TIERS)


def quicker_tiers(factor: float) -> dict[str, Tier]:
    """Slack's tiers with every window ``factor`` times shorter: the same limits and bursts,
    refilled sooner. For a test whose subject is not Slack's rate: give it to the fake
    (``FakeSlack.tiers``) and to the app's budget alike, and the app still paces itself within
    it (a call past it is still a 429), without a scenario of twenty posts in one channel
    waiting a second for each (``chat.postMessage`` refills 0.8 a second)."""
    return {method: replace(tier, window=tier.window / factor) for method, tier in TIERS.items()}


_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
_TS = re.compile(r"^\d+\.\d+$")
_TEAM_ID = re.compile(r"^[TE][A-Z0-9]{2,}$")


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    status: int = 200
    error: str | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass
class Message:
    channel: str
    ts: str
    user: str
    thread_ts: str | None = None
    text: str | None = None
    markdown: str | None = None
    blocks: list[dict[str, Any]] | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    streaming: bool = False
    expired: bool = False
    stream_started: float = 0.0
    deleted: bool = False
    stream_args: dict[str, Any] = field(default_factory=dict)
    # A person stopped this stream in Slack: no append or stop is accepted any more.
    stopped_by_user: bool = False
    # The stream's tasks (``task_update`` chunks), by id in order of arrival: each the last
    # chunk Slack took for it (title, status, details, output).
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The plan's title (``plan_update`` chunks), shown only in a ``task_display_mode`` plan.
    plan_title: str | None = None
    # chat.postMessage's unfurl_links / unfurl_media as given (Slack unfurls unless false).
    unfurl_links: Any = None
    unfurl_media: Any = None
    # Another app's post (an incoming webhook: no user, a bot id, any username it likes).
    bot_id: str | None = None
    username: str | None = None
    # chat.postMessage's ``metadata`` (event_type, event_payload), checked as Slack checks it.
    metadata: dict[str, Any] | None = None

    @property
    def plan_mode(self) -> bool:
        """Whether the stream shows its tasks together in a plan block."""
        return self.stream_args.get("task_display_mode") == "plan"

    @property
    def visible(self) -> str:
        """What a person sees: the Markdown, else the blocks' text, else the plain text."""
        if self.markdown is not None:
            return self.markdown
        if self.blocks:
            return "\n".join(_block_text(block) for block in self.blocks if _block_text(block))
        return self.text or ""

    @property
    def rendered(self) -> str:
        """What a person sees in Slack: mrkdwn entities applied (see the module's docstring)."""
        if self.markdown is not None:
            return render_markdown(self.markdown).text
        if self.blocks:
            return "\n".join(r.text for r in self._block_renders() if r.text)
        return render_mrkdwn(self.text or "").text

    @property
    def links(self) -> list[tuple[str, str]]:
        """(url, label shown) of every link a person sees."""
        return [link for r in self._renders() for link in r.links]

    @property
    def pings(self) -> list[str]:
        """The channel-wide mentions (``channel``, ``here``, ``everyone``, ``subteam^ID``)."""
        return [ping for r in self._renders() for ping in r.pings]

    def _block_renders(self) -> list[Rendered]:
        out: list[Rendered] = []
        for block in self.blocks or []:
            text = block.get("text")
            if block.get("type") == "markdown":
                out.append(render_markdown(str(text or "")))
            elif isinstance(text, dict) and text.get("type") == "mrkdwn":
                out.append(render_mrkdwn(str(text.get("text", ""))))
            elif isinstance(text, dict):
                out.append(Rendered(str(text.get("text", ""))))
        return out

    def _renders(self) -> list[Rendered]:
        if self.markdown is not None:
            return [render_markdown(self.markdown)]
        return [*self._block_renders(), render_mrkdwn(self.text or "")]

    @property
    def feedback_buttons(self) -> dict[str, Any] | None:
        """The ``feedback_buttons`` element of a ``context_actions`` block, if any."""
        for block in self.blocks or []:
            if block.get("type") == "context_actions":
                for element in block.get("elements", []):
                    if element.get("type") == "feedback_buttons":
                        return dict(element)
        return None

    @property
    def buttons(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for block in self.blocks or []:
            if block.get("type") == "actions":
                found.extend(e for e in block.get("elements", []) if e.get("type") == "button")
        return found


@dataclass(frozen=True)
class Rendered:
    text: str
    pings: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()


# A control sequence: everything between < and the next > (Slack allows no nesting).
_ENTITY = re.compile(r"<([^<>]*)>")
_BROADCASTS = ("channel", "here", "everyone")


def _unescape(text: str) -> str:
    # Slack's three entities only (&quot; and the rest show as typed).
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def render_mrkdwn(text: str) -> Rendered:
    """What Slack shows of a mrkdwn text, and the channel-wide mentions it makes."""
    out: list[str] = []
    pings: list[str] = []
    links: list[tuple[str, str]] = []
    at = 0
    for match in _ENTITY.finditer(text):
        out.append(_unescape(text[at : match.start()]))
        at = match.end()
        target, _, label = match.group(1).partition("|")
        label = _unescape(label)
        if target.startswith("!"):
            command = target[1:]
            if command in _BROADCASTS or command.startswith("subteam^"):
                pings.append(command)
                out.append(label or f"@{command}")
            else:  # <!date^…|fallback> and the like show their fallback
                out.append(label)
        elif target.startswith(("@", "#")):
            out.append(target[0] + (label or target[1:]))
        else:
            url = _unescape(target)
            links.append((url, label or url))
            out.append(label or url)
    out.append(_unescape(text[at:]))
    return Rendered("".join(out), tuple(pings), tuple(links))


_BARE_BROADCAST = re.compile(r"(?<![\w@])@(channel|here|everyone)\b")
_TAG = re.compile(r"<[^>]*>")


def render_markdown(text: str) -> Rendered:
    """What Slack shows of a ``markdown_text`` (standard Markdown): the rendered text, its
    links, and (strictly, see the module docstring) the pings its raw text could make."""
    pings = [m.group(1) for m in _ENTITY.finditer(text) if m.group(1).startswith("!")]
    pings = [
        p[1:].partition("|")[0]
        for p in pings
        if p[1:].partition("|")[0] in _BROADCASTS or p.startswith("!subteam^")
    ]
    pings += [m.group(1) for m in _BARE_BROADCAST.finditer(text)]
    parser = MarkdownIt("commonmark", {"html": False})
    links: list[tuple[str, str]] = []
    for token in parser.parse(text):
        children = token.children or []
        for index, child in enumerate(children):
            if child.type == "link_open":
                label = []
                for inner in children[index + 1 :]:
                    if inner.type == "link_close":
                        break
                    label.append(inner.content)
                links.append((str(child.attrGet("href") or ""), "".join(label)))
    shown = html.unescape(_TAG.sub("", parser.render(text))).strip()
    return Rendered(shown, tuple(pings), tuple(links))


def _block_text(block: dict[str, Any]) -> str:
    text = block.get("text")
    if isinstance(text, dict):
        return str(text.get("text", ""))
    return str(text or "")


TASK_STATUSES = ("pending", "in_progress", "complete", "error")
TASK_DISPLAY_MODES = ("timeline", "plan")


class StreamChunks:
    """The ``chunks`` of the streaming methods, kept apart from the rest of the fake: Markdown
    text, ``task_update`` (one task by id: a later chunk updates it) and ``plan_update``. Slack
    refuses a task without an id or title, or with a status it does not know."""

    @staticmethod
    def check(chunks: Any) -> None:
        for chunk in _chunk_list(chunks):
            if chunk.get("type") == "task_update":
                if not chunk.get("id") or not chunk.get("title"):
                    raise SlackApiFail("invalid_chunks")
                if chunk.get("status") not in TASK_STATUSES:
                    raise SlackApiFail("invalid_chunks")
            elif chunk.get("type") == "plan_update" and not chunk.get("title"):
                raise SlackApiFail("invalid_chunks")

    @staticmethod
    def apply(message: Message, chunks: Any) -> None:
        for chunk in _chunk_list(chunks):
            if chunk.get("type") == "task_update":
                message.tasks[str(chunk["id"])] = dict(chunk)
            elif chunk.get("type") == "plan_update" and message.plan_mode:
                # A timeline shows no plan: its title goes nowhere there.
                message.plan_title = str(chunk["title"])


def _chunk_list(chunks: Any) -> list[dict[str, Any]]:
    if isinstance(chunks, str):
        chunks = json.loads(chunks)
    return [chunk for chunk in chunks or [] if isinstance(chunk, dict)]


def _chunks_text(chunks: Any) -> str:
    if isinstance(chunks, str):
        chunks = json.loads(chunks)
    parts = []
    for chunk in chunks or []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            parts.append(str(chunk.get("text", "")))
    return "".join(parts)


@dataclass
class _Failure:
    status: int
    remaining: int
    retry_after: int | None


@dataclass
class StoredFile:
    content: bytes
    name: str
    mimetype: str
    html_instead: bool = False  # answer an HTML page, as Slack does without files:read
    # Where the file URL sends the download first: nowhere (None), to another Slack origin
    # ("slack", as Slack's file servers do), or to a host that is not Slack's ("elsewhere").
    redirect: str | None = None


@dataclass
class Download:
    """One request for a file's bytes, as the file server saw it."""

    host: str
    path: str
    authorized: bool


# Slack gives an Events API request this long to be answered, then sends it again.
HTTP_ANSWER_WITHIN = 3.0
# How long a test waits by default for what it expects (an event, not a time: a passing test
# never waits it out). Generous, since a bridge process on a busy machine, with more test workers
# than cores, can take several seconds to import itself and connect.
WAIT = 30.0


@dataclass
class Delivery:
    """One HTTP request Slack made to a request URL, and how it was answered."""

    url: str
    retry_num: int
    status: int | None = None  # None: no answer in time, or no connection
    reason: str = ""  # why a retry would follow: http_timeout, http_error, connection_failed


@dataclass
class Session:
    """One thread's agent session, as Slack keeps it."""

    title: str | None
    initiator: str | None
    status: str


SESSION_STATUSES = ("processing", "active", "suspended", "closed")


class AgentSessions:
    """The agent-session half of the fake (``agents.sessions.*``, Slack's stop button), kept
    apart from the rest so other work on the fake does not collide with it."""

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake
        self.by_thread: dict[tuple[str, str], Session] = {}
        # (channel, thread_ts, status) of every status Slack accepted, stopStream's included.
        self.log: list[tuple[str, str, str]] = []

    def status_of(self, channel: str, thread_ts: str) -> str:
        session = self.by_thread.get((channel, thread_ts))
        return session.status if session is not None else ""

    def set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.fake.agent_app:
            raise SlackApiFail("missing_scope")
        channel, thread_ts = str(args.get("channel_id") or ""), str(args.get("thread_ts") or "")
        status = str(args.get("status") or "")
        if status not in SESSION_STATUSES:
            raise SlackApiFail("invalid_arguments")
        if not _CHANNEL_ID.match(channel) or channel in self.fake.missing_channels:
            raise SlackApiFail("channel_not_found")
        if not _TS.match(thread_ts):
            raise SlackApiFail("invalid_thread_ts")
        title = args.get("title")
        if title is not None and len(str(title)) > 200:
            raise SlackApiFail("invalid_arguments")
        session = self.by_thread.get((channel, thread_ts))
        if session is None:
            session = Session(title, args.get("initiator_user_id"), status)
            self.by_thread[(channel, thread_ts)] = session
        self._move(channel, thread_ts, status)
        return {"status": status, "title": session.title}

    def rename(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.fake.agent_app:
            raise SlackApiFail("missing_scope")
        key = (str(args.get("channel_id") or ""), str(args.get("thread_ts") or ""))
        session = self.by_thread.get(key)
        if session is None:
            raise SlackApiFail("session_not_found")
        session.title = str(args.get("title") or "")
        return {"title": session.title}

    def stream_stopped(self, message: Message, args: dict[str, Any]) -> None:
        """``chat.stopStream`` sets the session's status (``active`` unless told otherwise)."""
        if message.thread_ts is None:
            return
        if (message.channel, message.thread_ts) in self.by_thread:
            status = str(args.get("session_status") or "active")
            self._move(message.channel, message.thread_ts, status)

    def _move(self, channel: str, thread_ts: str, status: str) -> None:
        self.by_thread[(channel, thread_ts)].status = status
        self.log.append((channel, thread_ts, status))

    async def press_stop(self, channel: str, thread_ts: str, user: str) -> str:
        """A person clicks Slack's stop button: the thread's live streams stop (no append is
        accepted any more) and ``agent_session_stopped`` is sent; the status stays as it is.
        Returns the envelope id."""
        assert self.status_of(channel, thread_ts) == "processing", "no stop button shown"
        stopped = []
        for message in self.fake.thread(channel, thread_ts):
            if message.streaming:
                message.streaming = False
                message.stopped_by_user = True
                stopped.append(message.ts)
        event = {
            "type": "agent_session_stopped",
            "channel": channel,
            "thread_ts": thread_ts,
            "user": user,
            "streaming_message_ts": stopped,
            "event_ts": self.fake.next_ts(),
        }
        return await self.fake.push_event(event)


class AssistantContainer:
    """Slack's assistant container (the agent's DM pane), kept apart from the rest of the fake:
    ``assistant_thread_started`` when a person opens a new thread there (Slack creates its
    root), ``assistant_thread_context_changed`` when they look at another channel, and
    ``assistant.threads.setSuggestedPrompts`` (at most four prompts, each a title and a
    message; Slack refuses more with ``invalid_arguments``)."""

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake
        # (channel, thread_ts) -> the prompts and the title shown above them.
        self.prompts: dict[tuple[str, str], tuple[list[dict[str, Any]], str | None]] = {}

    def set_prompts(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(args.get("channel_id") or ""), str(args.get("thread_ts") or "")
        if not _CHANNEL_ID.match(channel) or channel in self.fake.missing_channels:
            raise SlackApiFail("channel_not_found")
        if not _TS.match(thread_ts):
            raise SlackApiFail("invalid_thread_ts")
        prompts = _json_list(args.get("prompts")) or []
        if not prompts or len(prompts) > 4:
            raise SlackApiFail("invalid_arguments")
        if any(not p.get("title") or not p.get("message") for p in prompts):
            raise SlackApiFail("invalid_arguments")
        self.prompts[(channel, thread_ts)] = (prompts, args.get("title"))
        return {}

    def _thread(
        self, user: str, channel: str, thread_ts: str, context: str | None
    ) -> dict[str, Any]:
        return {
            "user_id": user,
            "channel_id": channel,
            "thread_ts": thread_ts,
            "context": {"channel_id": context, "team_id": TEAM} if context else {},
        }

    async def start_thread(
        self, user: str, channel: str, *, context: str | None = None
    ) -> tuple[str, str]:
        """A person opens a new thread in the container: (its thread ts, the envelope id)."""
        assert self.fake.experience == "assistant_view", "agent_view apps have no container"
        root = Message(channel, self.fake.next_ts(), BOT_USER, text="")
        root.deleted = True  # Slack's own root: no message of the app's to read or edit
        self.fake.messages[root.ts] = root
        event = {
            "type": "assistant_thread_started",
            "assistant_thread": self._thread(user, channel, root.ts, context),
            "event_ts": self.fake.next_ts(),
        }
        return root.ts, await self.fake.push_event(event)

    async def change_context(self, user: str, channel: str, thread_ts: str, context: str) -> str:
        assert self.fake.experience == "assistant_view", "agent_view: app_context_changed"
        event = {
            "type": "assistant_thread_context_changed",
            "assistant_thread": self._thread(user, channel, thread_ts, context),
            "event_ts": self.fake.next_ts(),
        }
        return await self.fake.push_event(event)


class SlackApiFail(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.messages: dict[str, Message] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.reactions: dict[tuple[str, str], set[str]] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.files: dict[str, StoredFile] = {}
        self.uploads: dict[str, dict[str, Any]] = {}
        self.refuse_streaming: str | None = None
        # Whether the app is declared as an agent (agent sessions work); see AgentSessions.
        self.agent_app = False
        self.sessions = AgentSessions(self)
        self.assistant = AssistantContainer(self)
        # Slack's messaging experience for this app (the manifest's ``assistant_view`` or
        # ``agent_view``), and the agent_view half of the fake with the App Home.
        self.experience = "assistant_view"
        self.agent_view = AgentView(self)
        # Rate tiers, stream and status lifetimes (seconds), as Slack has them.
        self.enforce_tiers = True
        self.tiers = dict(TIERS)
        self.limited: list[Call] = []
        self._recent: dict[tuple[str, str], collections.deque[float]] = {}
        # (method, scope) -> until when a 429's Retry-After holds.
        self._blocked_until: dict[tuple[str, str], float] = {}
        self.stream_lifetime = 300.0
        self.status_lifetime = 120.0
        # (channel, thread_ts) -> (status text, when set); and every setStatus that worked.
        self.statuses: dict[tuple[str, str], tuple[str, float]] = {}
        self.status_log: list[tuple[str, str, str]] = []
        self.missing_channels: set[str] = set()
        self.downloads: list[Download] = []
        self.acks: dict[str, dict[str, Any]] = {}
        self.sockets: list[web.WebSocketResponse] = []
        self.socket_connections = 0
        # id(socket) -> the client's (host, port): which process holds a connection.
        self.socket_peers: dict[int, tuple[str, int]] = {}
        # While the connection is lost (:meth:`lose_connection`): new connections are refused
        # and what people write is kept (readable through the Web API) but not delivered.
        self.connection_lost = False
        self.undelivered: list[dict[str, Any]] = []
        self._failures: dict[str, list[_Failure]] = {}
        # (method, which calls, until when): answers held back (see hold_replies).
        self._holds: list[tuple[str, Callable[[dict[str, Any]], bool], anyio.Event]] = []
        self._counter = itertools.count(1)
        self._last_ts = 0  # the last ts given, in microseconds (see next_ts)
        self._changed: anyio.Event | None = None
        self._runner: web.AppRunner | None = None
        # Events API request URLs (HTTP mode): several instances behind a load balancer that
        # hands each request to the next one in turn (:meth:`deliver_event`).
        self.request_urls: list[str] = []
        self._next_target = 0
        self.deliveries: list[Delivery] = []
        self.url = ""
        # A second origin (another port) for Slack's own file redirects.
        self.files_url = ""

    # ----- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._changed = anyio.Event()
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_get("/files-pri/{file_id}/{name}", self._download_final)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/ws", self._websocket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        files_site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await files_site.start()
        files_port = self._runner.addresses[1][1]
        self.files_url = f"http://127.0.0.1:{files_port}"

    async def close(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    # ----- test controls ----------------------------------------------------------------------

    def fail(self, method: str, *, status: int, times: int, retry_after: int | None = None) -> None:
        """Answer ``method`` with HTTP ``status`` (429 or 500) the next ``times`` calls."""
        self._failures.setdefault(method, []).append(_Failure(status, times, retry_after))

    def hold_replies(self, method: str, which: Callable[[dict[str, Any]], bool]) -> anyio.Event:
        """Calls of ``method`` whose arguments satisfy ``which`` take effect at once, but their
        answer waits until the returned event is set: a client killed meanwhile never learns
        what Slack did (the ``ts`` of the message it posted)."""
        release = anyio.Event()
        self._holds.append((method, which, release))
        return release

    def expire_streams(self) -> None:
        """Every live stream is now expired: appends and stops answer an error."""
        for message in self.messages.values():
            if message.streaming:
                message.streaming = False
                message.expired = True
        self._notify()

    def stop_stream_as_user(self, ts: str) -> None:
        """A person stopped the stream ``ts`` in Slack: later appends and stops answer
        ``stopped_by_user`` (the message keeps what it showed, and may be edited)."""
        message = self.messages[ts]
        assert message.streaming, "only a live stream can be stopped"
        message.streaming = False
        message.stopped_by_user = True
        self._notify()

    def add_user(self, user_id: str, name: str, email: str | None = None) -> None:
        profile: dict[str, Any] = {"display_name": name, "real_name": name.title()}
        if email:
            profile["email"] = email
        self.users[user_id] = {"id": user_id, "name": name.lower(), "profile": profile}

    def add_file(
        self,
        content: bytes,
        name: str,
        mimetype: str,
        *,
        html_instead: bool = False,
        redirect: str | None = None,
        connect: bool = False,
    ) -> dict[str, Any]:
        """Store a file and return its Slack file object (as in a message event's ``files``).

        ``connect``: a file shared from another organisation over Slack Connect: the event
        carries no URLs, only ``file_access: "check_file_info"`` (``files.info`` has them).
        """
        file_id = f"F{next(self._counter):08d}"
        self.files[file_id] = StoredFile(content, name, mimetype, html_instead, redirect)
        info = self._file_object(file_id)
        if connect:
            return {"id": file_id, "file_access": "check_file_info", "created": int(time.time())}
        return info

    def _file_object(self, file_id: str) -> dict[str, Any]:
        stored = self.files[file_id]
        name = stored.name
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": stored.mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(stored.content),
            "url_private": f"{self.url}/files/{file_id}/{name}",
            "url_private_download": f"{self.url}/files/{file_id}/{name}?download=1",
        }

    def add_message(
        self, channel: str, user: str, text: str, thread_ts: str | None = None
    ) -> Message:
        """A message written by a person (for history, or to reply under)."""
        message = Message(channel, self.next_ts(), user, thread_ts=thread_ts, text=text)
        self.messages[message.ts] = message
        return message

    def add_webhook_message(
        self, channel: str, bot_id: str, username: str, text: str, thread_ts: str | None = None
    ) -> Message:
        """A post by an incoming webhook: ``bot_message``, no user, the ``username`` its sender
        chose (Slack lets a webhook call itself anything)."""
        message = Message(
            channel,
            self.next_ts(),
            "",
            thread_ts=thread_ts,
            text=text,
            bot_id=bot_id,
            username=username,
        )
        self.messages[message.ts] = message
        return message

    def next_ts(self) -> str:
        """A message's ts as Slack makes it: the time it took the message, in microseconds
        (``<seconds>.<6 digits>``), unique and increasing. The bridge reads it as when a person
        sent a message (a bare typed answer's reaction time counts from it)."""
        self._last_ts = max(time.time_ns() // 1000, self._last_ts + 1)
        seconds, micros = divmod(self._last_ts, 1_000_000)
        return f"{seconds}.{micros:06d}"

    # ----- reading what happened --------------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def status_of(self, channel: str, thread_ts: str) -> str:
        """The status line a person sees in the thread now ("" when none)."""
        shown = self.statuses.get((channel, thread_ts))
        if shown is None or time.monotonic() - shown[1] >= self.status_lifetime:
            return ""
        return shown[0]

    def ok_calls(self, method: str) -> list[Call]:
        return [call for call in self.calls_to(method) if call.status == 200 and not call.error]

    def thread(self, channel: str, thread_ts: str, *, bot_only: bool = True) -> list[Message]:
        """The thread's messages in order (the bot's own by default), deleted ones left out."""
        found = [
            m
            for m in self.messages.values()
            if m.channel == channel
            and not m.deleted
            and (m.thread_ts == thread_ts or m.ts == thread_ts)
            and (not bot_only or m.user == BOT_USER)
        ]
        return sorted(found, key=lambda m: float(m.ts))

    def answer_messages(self, channel: str, thread_ts: str) -> list[Message]:
        """The bot's messages in a thread that carry answer text (not the tool/control one)."""
        return [
            m
            for m in self.thread(channel, thread_ts)
            if m.markdown is not None
            or (m.blocks is None and m.text)
            or any(b.get("type") == "markdown" for b in m.blocks or [])
        ]

    def answer_text(self, channel: str, thread_ts: str) -> str:
        return "\n\n".join(m.visible for m in self.answer_messages(channel, thread_ts))

    async def wait_for(self, predicate: Callable[[], bool], seconds: float = WAIT) -> None:
        with anyio.fail_after(seconds):
            while True:
                changed = self._changed
                assert changed is not None, "start() the fake first"
                if predicate():
                    return
                await changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()

    # ----- events: Socket Mode and HTTP -------------------------------------------------------

    def event_callback(
        self,
        event: dict[str, Any],
        event_id: str | None = None,
        authorizations: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """An Events API ``event_callback`` body around ``event`` (``authorizations``: the
        bot's, unless the event names someone else there, as ``app_context_changed`` does)."""
        return {
            "token": "verification-token-unused",
            "team_id": TEAM,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": authorizations
            or [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True, "enterprise_id": None}],
        }

    async def push_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        via: Any = None,
        authorizations: list[dict[str, Any]] | None = None,
    ) -> str:
        """Send an ``events_api`` envelope over Socket Mode; returns its envelope id.

        Slack spreads one app's events over all its open connections (up to 10): ``via`` picks
        one (a websocket from :attr:`sockets`); by default the newest."""
        return await self._push(
            {
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
                "payload": self.event_callback(event, event_id, authorizations),
            },
            via,
        )

    async def deliver_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_num: int = 0,
        to: str | None = None,
        secret: str = SIGNING_SECRET,
        retries: int = 3,
    ) -> list[Delivery]:
        """POST an ``event_callback`` to the request URL, as Slack does in HTTP mode; returns
        every attempt.

        Each request goes to the next of :attr:`request_urls` in turn (a round-robin load
        balancer), or to ``to``. As Slack does, a request not answered 2xx within
        :data:`HTTP_ANSWER_WITHIN` seconds is sent again (up to ``retries`` times, with
        ``X-Slack-Retry-Num`` and ``X-Slack-Retry-Reason``); the balancer hands each retry to
        the instance after the one that failed. ``retry_num`` marks a first attempt as a retry
        already (a redelivery of an event another instance was sent)."""
        body = json.dumps(self.event_callback(event, event_id))
        attempts: list[Delivery] = []
        for attempt in range(retry_num, retry_num + retries + 1):
            if not attempts:
                url, reason = to or self._target(), "http_timeout"
            else:
                # The balancer passes the retry on to the next instance in turn.
                url, reason = self._after(attempts[-1].url), attempts[-1].reason
            delivery = await self._post_signed(body, url, secret, attempt, reason)
            attempts.append(delivery)
            if delivery.status is not None and 200 <= delivery.status < 300:
                break
        return attempts

    async def post_interaction(
        self, payload: dict[str, Any], *, to: str | None = None, secret: str = SIGNING_SECRET
    ) -> Delivery:
        """POST an interactivity payload (a button click) to the request URL, form-encoded as
        Slack sends it; no retries (Slack does not retry interactions)."""
        body = urlencode({"payload": json.dumps(payload)})
        return await self._post_signed(
            body, to or self._target(), secret, 0, "", "application/x-www-form-urlencoded"
        )

    def _after(self, url: str) -> str:
        if url not in self.request_urls:
            return self._target()
        return self.request_urls[(self.request_urls.index(url) + 1) % len(self.request_urls)]

    def _target(self) -> str:
        assert self.request_urls, "set request_urls first"
        url = self.request_urls[self._next_target % len(self.request_urls)]
        self._next_target += 1
        return url

    async def _post_signed(
        self,
        body: str,
        url: str,
        secret: str,
        retry_num: int,
        retry_reason: str,
        content_type: str = "application/json",
    ) -> Delivery:
        headers = signed_headers(body, secret) | {"Content-Type": content_type}
        if retry_num:
            headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": retry_reason}
        delivery = Delivery(url, retry_num)
        try:
            async with aiohttp.ClientSession() as http:
                with anyio.fail_after(HTTP_ANSWER_WITHIN):
                    async with http.post(url, data=body.encode(), headers=headers) as response:
                        delivery.status = response.status
                        delivery.reason = "http_error"
        except TimeoutError:
            delivery.reason = "http_timeout"
        except aiohttp.ClientError:
            delivery.reason = "connection_failed"
        self.deliveries.append(delivery)
        self._notify()
        return delivery

    def block_action(self, message: Message, user: str, action_id: str) -> dict[str, Any]:
        """The ``block_actions`` payload of ``user`` clicking a button of ``message``."""
        button = next(b for b in message.buttons if b.get("action_id") == action_id)
        action = {
            "type": "button",
            "action_id": action_id,
            "block_id": "agy_bridge_controls",
            "value": button.get("value"),
        }
        return self._block_actions(message, user, action, {"blocks": message.blocks})

    def _block_actions(
        self,
        message: Message,
        user: str,
        action: dict[str, Any],
        seen: dict[str, Any],
        container: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A ``block_actions`` payload around one ``action`` on ``message``; ``seen``: what the
        payload's ``message`` carries besides its ts."""
        return {
            "type": "block_actions",
            "user": {"id": user, "team_id": TEAM},
            "team": {"id": TEAM},
            "api_app_id": APP_ID,
            "token": "verification-token-unused",
            "container": {
                "type": "message",
                "message_ts": message.ts,
                "channel_id": message.channel,
                **(container or {}),
                "is_ephemeral": False,
            },
            "trigger_id": "1.2.3",
            "channel": {"id": message.channel, "name": "general"},
            "message": {"ts": message.ts, **seen},
            "response_url": f"{self.url}/response",
            "actions": [{**action, "action_ts": str(time.time())}],
        }

    async def click_feedback(self, message: Message, user: str, *, positive: bool) -> str:
        """A person clicks 👍 or 👎 under an answer (a ``feedback_buttons`` element)."""
        element = message.feedback_buttons
        assert element is not None, "no feedback buttons on that message"
        button = element["positive_button" if positive else "negative_button"]
        action = {
            "type": "feedback_buttons",
            "action_id": element["action_id"],
            "block_id": "agy_bridge_feedback",
            "value": button["value"],
        }
        thread = {"thread_ts": message.thread_ts}
        payload = self._block_actions(message, user, action, thread, thread)
        envelope = {"type": "interactive", "accepts_response_payload": True, "payload": payload}
        return await self._push(envelope)

    async def click(self, message: Message, user: str, action_id: str, *, via: Any = None) -> str:
        return await self._push(
            {
                "type": "interactive",
                "accepts_response_payload": True,
                "payload": self.block_action(message, user, action_id),
            },
            via,
        )

    async def _push(self, envelope: dict[str, Any], via: Any = None) -> str:
        # Until the app is connected: a bridge process just started may take seconds to import
        # itself on a busy machine (5 s was too short under load).
        await self.wait_for(lambda: any(not ws.closed for ws in self.sockets), 60)
        envelope_id = str(uuid.uuid4())
        envelope["envelope_id"] = envelope_id
        if via is not None and via.closed:
            raise ConnectionError("that Socket Mode connection is closed")
        ws = via or next(ws for ws in reversed(self.sockets) if not ws.closed)
        await ws.send_str(json.dumps(envelope))
        return envelope_id

    async def wait_ack(self, envelope_id: str, seconds: float = WAIT) -> dict[str, Any]:
        await self.wait_for(lambda: envelope_id in self.acks, seconds)
        return self.acks[envelope_id]

    async def drop_sockets(self) -> None:
        """Close every Socket Mode connection from the server side (as Slack does on refresh)."""
        for ws in list(self.sockets):
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"refresh")
        self._notify()

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if self.connection_lost:
            return web.Response(status=503, text="the network is down")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            self.socket_peers[id(ws)] = (str(peer[0]), int(peer[1]))
        self.sockets.append(ws)
        self.socket_connections += 1
        self._notify()
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": 1,
                "connection_info": {"app_id": APP_ID},
                "debug_info": {"host": "fake", "approximate_connection_time": 3600},
            }
        )
        try:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    data = json.loads(message.data)
                    if "envelope_id" in data:
                        self.acks[data["envelope_id"]] = data
                        self._notify()
        finally:
            self.sockets.remove(ws)
            self._notify()
        return ws

    # ----- people writing, editing and deleting; a lost connection -----------------------

    async def write(self, event: dict[str, Any]) -> None:
        """A person posts ``event`` (a ``message`` or ``app_mention``): Slack keeps the message,
        readable through ``conversations.replies`` and ``conversations.history``, and sends the
        event to an open connection; while the connection is lost, to none (Slack does not
        promise to redeliver what no connection took)."""
        self.keep(event)
        await self._send_or_keep(event)

    def keep(self, event: dict[str, Any]) -> Message:
        """The message of a person's ``event`` as Slack keeps it (readable through
        ``conversations.replies`` and ``conversations.history``), sent by the caller."""
        message = Message(
            str(event["channel"]),
            str(event["ts"]),
            str(event.get("user") or ""),
            thread_ts=event.get("thread_ts"),
            text=str(event.get("text") or ""),
        )
        self.messages[message.ts] = message
        return message

    async def edit(self, channel: str, ts: str, text: str) -> None:
        """The author edits the message ``ts``: ``message_changed`` with the edited message and
        the previous one, and, when the new text still mentions the app, the message again as
        an ``app_mention`` with the same ``ts`` and an ``edited`` field, as Slack sends them."""
        message = self.messages[ts]
        previous = _as_api_message(message)
        message.text = text
        edited = {"user": message.user, "ts": self.next_ts()}
        now = {**_as_api_message(message), "edited": edited}
        await self._send_or_keep(
            {
                "type": "message",
                "subtype": "message_changed",
                "channel": channel,
                "hidden": True,
                "ts": edited["ts"],
                "message": now,
                "previous_message": previous,
            }
        )
        if f"<@{BOT_USER}>" in text:
            await self._send_or_keep({**now, "type": "app_mention", "channel": channel})

    async def delete(self, channel: str, ts: str) -> None:
        """The author deletes the message ``ts``: ``message_deleted`` with ``deleted_ts`` and
        the message as it was."""
        message = self.messages[ts]
        previous = _as_api_message(message)
        message.deleted = True
        await self._send_or_keep(
            {
                "type": "message",
                "subtype": "message_deleted",
                "channel": channel,
                "hidden": True,
                "ts": self.next_ts(),
                "deleted_ts": ts,
                "previous_message": previous,
            }
        )

    async def _send_or_keep(self, event: dict[str, Any]) -> None:
        if self.connection_lost:
            self.undelivered.append(event)
        else:
            await self.push_event(event)

    async def lose_connection(self) -> None:
        """Slack asks the app to reconnect (a ``disconnect`` envelope), closes the socket, and
        the network stays down: new connections fail until :meth:`restore_connection`."""
        self.connection_lost = True
        for ws in list(self.sockets):
            if not ws.closed:
                await ws.send_json(
                    {
                        "type": "disconnect",
                        "reason": "refresh_requested",
                        "debug_info": {"host": "fake"},
                    }
                )
                await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"refresh")
        self._notify()

    def restore_connection(self) -> None:
        self.connection_lost = False
        self._notify()

    # ----- the Web API ------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await _arguments(request)
        call = Call(method, args)
        self.calls.append(call)
        try:
            failure = self._next_failure(method)
            if failure is not None:
                call.status = failure.status
                if failure.status == 429 and failure.retry_after:
                    self._limited_for(method, args, failure.retry_after)
                return _failure_response(failure)
            self._check_token(method, request)
            wait = self._over_tier(method, args)
            if wait is not None:
                call.status = 429
                self.limited.append(call)
                return _failure_response(_Failure(429, 0, wait))
            handler = getattr(self, "_m_" + method.replace(".", "_"), None)
            if handler is None:
                raise SlackApiFail("unknown_method")
            body = handler(args)
            for held, which, release in self._holds:
                if held == method and which(args):
                    self._notify()
                    await release.wait()
            return web.json_response({"ok": True, **body})
        except SlackApiFail as exc:
            call.error = exc.error
            return web.json_response({"ok": False, "error": exc.error})
        finally:
            self._notify()

    def _over_tier(self, method: str, args: dict[str, Any]) -> int | None:
        """Seconds until ``method`` may be called again when this call is past its tier, or
        comes before the ``Retry-After`` of an earlier 429 has passed (Slack answers 429
        again then)."""
        tier = self.tiers.get(method)
        key = (method, scope_key(tier, args) if tier is not None else "")
        now = time.monotonic()
        blocked = self._blocked_until.get(key, -math.inf)
        if now < blocked:
            return max(1, math.ceil(blocked - now))
        if not self.enforce_tiers or tier is None:
            return None
        recent = self._recent.setdefault(key, collections.deque())
        while recent and now - recent[0] >= tier.window:
            recent.popleft()
        if len(recent) >= tier.limit:
            wait = max(1, math.ceil(recent[0] + tier.window - now))
            self._blocked_until[key] = now + wait
            return wait
        recent.append(now)
        return None

    def _limited_for(self, method: str, args: dict[str, Any], seconds: float) -> None:
        """A 429 a test asked for (:meth:`fail`): Slack keeps refusing until it has passed."""
        tier = self.tiers.get(method)
        key = (method, scope_key(tier, args) if tier is not None else "")
        self._blocked_until[key] = time.monotonic() + seconds

    def _next_failure(self, method: str) -> _Failure | None:
        queue = self._failures.get(method) or []
        while queue and queue[0].remaining <= 0:
            queue.pop(0)
        if not queue:
            return None
        queue[0].remaining -= 1
        return queue[0]

    def _check_token(self, method: str, request: web.Request) -> None:
        wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if request.headers.get("Authorization") != f"Bearer {wanted}":
            raise SlackApiFail("invalid_auth")

    def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "agy",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.url.replace("http://", "ws://") + "/ws"}

    def _m_users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(args.get("user")))
        if user is None:
            raise SlackApiFail("user_not_found")
        return {"user": user}

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        markdown = args.get("markdown_text")
        blocks = _json_list(args.get("blocks"))
        if markdown is not None and (blocks or args.get("text")):
            raise SlackApiFail("markdown_text_conflict")
        if not (markdown or blocks or args.get("text")):
            raise SlackApiFail("no_text")
        if markdown is not None and len(markdown) > 12_000:
            raise SlackApiFail("msg_too_long")
        _check_blocks(blocks)
        message = Message(
            channel=str(args["channel"]),
            ts=self.next_ts(),
            user=BOT_USER,
            thread_ts=args.get("thread_ts"),
            text=args.get("text"),
            markdown=markdown,
            blocks=blocks,
            unfurl_links=args.get("unfurl_links"),
            unfurl_media=args.get("unfurl_media"),
            metadata=_metadata(args.get("metadata")),
        )
        self.messages[message.ts] = message
        self._posted(message)
        return {"channel": message.channel, "ts": message.ts}

    def _posted(self, message: Message) -> None:
        # Slack takes a thread's status down when the app posts in it.
        if message.thread_ts:
            self.statuses.pop((message.channel, message.thread_ts), None)

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._own_message(args)
        if self._still_streaming(message):
            raise SlackApiFail("streaming_state_conflict")
        # An edit replaces what the message shows, the stream's task cards included (strict:
        # Slack does not say they survive one).
        message.tasks = {}
        markdown = args.get("markdown_text")
        if markdown is not None:
            if len(markdown) > 12_000:
                raise SlackApiFail("msg_too_long")
            message.markdown, message.blocks, message.text = markdown, None, None
        else:
            blocks = _json_list(args.get("blocks"))
            _check_blocks(blocks)
            message.markdown = None
            message.blocks = blocks
            message.text = args.get("text")
        return {"channel": message.channel, "ts": message.ts}

    def _m_chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._own_message(args)
        message.deleted = True
        return {"channel": message.channel, "ts": message.ts}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        self.ephemerals.append(args)
        return {"message_ts": self.next_ts()}

    def _m_chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_streaming:
            raise SlackApiFail(self.refuse_streaming)
        channel = str(args["channel"])
        user, team = args.get("recipient_user_id"), args.get("recipient_team_id")
        # The two go together (required outside DMs); Slack names the one that is missing.
        if (user or team or not channel.startswith("D")) and not (user and team):
            raise SlackApiFail("missing_recipient_team_id" if user else "missing_recipient_user_id")
        # "The encoded ID of the user to receive the streaming text" and of "the team the user
        # ... belongs to": a user of the workspace (the bot is one) and a team or enterprise id,
        # not a name the bridge made up for a schedule. Slack documents no error code for
        # these: the fake answers with its usual ones.
        if user and user != BOT_USER and user not in self.users:
            raise SlackApiFail("user_not_found")
        if team and not _TEAM_ID.match(str(team)):
            raise SlackApiFail("invalid_arguments")
        StreamChunks.check(args.get("chunks"))
        mode = args.get("task_display_mode")
        if mode is not None and mode not in TASK_DISPLAY_MODES:
            raise SlackApiFail("invalid_arguments")
        message = Message(
            channel=channel,
            ts=self.next_ts(),
            user=BOT_USER,
            thread_ts=args.get("thread_ts"),
            markdown=str(args.get("markdown_text") or "") + _chunks_text(args.get("chunks")),
            streaming=True,
            stream_started=time.monotonic(),
            stream_args=args,
        )
        StreamChunks.apply(message, args.get("chunks"))
        self.messages[message.ts] = message
        self._posted(message)
        return {"channel": channel, "ts": message.ts}

    def _m_chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._live_stream(args)
        StreamChunks.check(args.get("chunks"))
        message.markdown = (message.markdown or "") + str(args.get("markdown_text") or "")
        message.markdown += _chunks_text(args.get("chunks"))
        StreamChunks.apply(message, args.get("chunks"))
        return {"channel": message.channel, "ts": message.ts}

    def _m_chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._live_stream(args)
        StreamChunks.check(args.get("chunks"))
        message.markdown = (message.markdown or "") + str(args.get("markdown_text") or "")
        message.markdown += _chunks_text(args.get("chunks"))
        StreamChunks.apply(message, args.get("chunks"))
        blocks = _json_list(args.get("blocks"))
        if blocks:
            # Rendered at the bottom of the finalized message (feedback buttons, say).
            _check_blocks(blocks)
            message.blocks = blocks
        message.streaming = False
        self.sessions.stream_stopped(message, args)
        return {"channel": message.channel, "ts": message.ts, "message": {"ts": message.ts}}

    def _m_agents_sessions_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.sessions.set_status(args)

    def _m_agents_sessions_rename(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.sessions.rename(args)

    def _m_assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.experience == "agent_view":
            return self.agent_view.set_prompts(args)
        return self.assistant.set_prompts(args)

    def _m_chat_getPermalink(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.agent_view.permalink(args)

    def _m_views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.agent_view.publish(args)

    def _m_conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.agent_view.info(args)

    def _m_conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.agent_view.list_members(args)

    async def press_session_stop(self, channel: str, thread_ts: str, user: str) -> str:
        """Slack's own stop button, clicked (see :meth:`AgentSessions.press_stop`)."""
        return await self.sessions.press_stop(channel, thread_ts, user)

    def _m_reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        names = self.reactions.setdefault((str(args["channel"]), str(args["timestamp"])), set())
        if args["name"] in names:
            raise SlackApiFail("already_reacted")
        names.add(str(args["name"]))
        return {}

    def _m_reactions_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        names = self.reactions.get((str(args["channel"]), str(args["timestamp"])), set())
        if args["name"] not in names:
            raise SlackApiFail("no_reaction")
        names.discard(str(args["name"]))
        return {}

    def _m_assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(args.get("channel_id") or ""), str(args.get("thread_ts") or "")
        if not _CHANNEL_ID.match(channel) or channel in self.missing_channels:
            raise SlackApiFail("channel_not_found")
        if not _TS.match(thread_ts):
            raise SlackApiFail("invalid_thread_ts")
        status = str(args.get("status") or "")
        if status:
            self.statuses[(channel, thread_ts)] = (status, time.monotonic())
        else:
            self.statuses.pop((channel, thread_ts), None)
        self.status_log.append((channel, thread_ts, status))
        return {}

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        thread = self.thread(str(args["channel"]), str(args["ts"]), bot_only=False)
        if not thread:
            raise SlackApiFail("thread_not_found")
        # The parent comes first on every page; the replies are those in the time range.
        parent, replies = thread[0], _in_range(thread[1:], args)
        thread = [parent, *replies] if parent.ts == str(args["ts"]) else replies
        limit = int(args.get("limit") or 1000)
        offset = int(args.get("cursor") or 0)
        page = thread[offset : offset + limit]
        more = offset + limit < len(thread)
        return {
            "messages": [_as_api_message(m, _flag(args, "include_all_metadata")) for m in page],
            "has_more": more,
            "response_metadata": {"next_cursor": str(offset + limit) if more else ""},
        }

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        """A channel's top-level messages (and thread replies also sent to it), newest first."""
        channel = str(args["channel"])
        if channel in self.missing_channels:
            raise SlackApiFail("channel_not_found")
        self.agent_view.check_history(channel)
        top = [
            m
            for m in self.messages.values()
            if m.channel == channel and not m.deleted and (not m.thread_ts or m.thread_ts == m.ts)
        ]
        found = sorted(_in_range(top, args), key=lambda m: float(m.ts), reverse=True)
        limit = int(args.get("limit") or 100)
        offset = int(args.get("cursor") or 0)
        page = found[offset : offset + limit]
        more = offset + limit < len(found)
        return {
            "messages": [_as_api_message(m, _flag(args, "include_all_metadata")) for m in page],
            "has_more": more,
            "response_metadata": {"next_cursor": str(offset + limit) if more else ""},
        }

    def _m_files_info(self, args: dict[str, Any]) -> dict[str, Any]:
        file_id = str(args.get("file") or "")
        if file_id not in self.files:
            raise SlackApiFail("file_not_found")
        return {"file": self._file_object(file_id)}

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._counter):08d}"
        self.uploads[file_id] = {
            "filename": args.get("filename"),
            "length": int(args.get("length") or 0),
            "data": None,
        }
        return {"upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        files = _json_list(args.get("files")) or []
        done = []
        for entry in files:
            upload = self.uploads.get(str(entry.get("id")))
            if upload is None or upload["data"] is None:
                raise SlackApiFail("file_not_found")
            upload.update(
                title=entry.get("title"),
                channel=args.get("channel_id"),
                thread_ts=args.get("thread_ts"),
            )
            done.append({"id": entry["id"], "title": entry.get("title")})
        message = Message(
            channel=str(args.get("channel_id")),
            ts=self.next_ts(),
            user=BOT_USER,
            thread_ts=args.get("thread_ts"),
            files=done,
        )
        self.messages[message.ts] = message
        return {"files": done}

    def _own_message(self, args: dict[str, Any]) -> Message:
        message = self.messages.get(str(args.get("ts")))
        if message is None or message.deleted or message.channel != args.get("channel"):
            raise SlackApiFail("message_not_found")
        if message.user != BOT_USER:
            raise SlackApiFail("cant_update_message")
        return message

    def _still_streaming(self, message: Message) -> bool:
        """Whether ``message`` streams; Slack ends a stream some minutes after it started."""
        if message.streaming and time.monotonic() - message.stream_started >= self.stream_lifetime:
            message.streaming = False
            message.expired = True
        return message.streaming

    def _live_stream(self, args: dict[str, Any]) -> Message:
        message = self._own_message(args)
        if message.stopped_by_user:
            raise SlackApiFail("stopped_by_user")
        if not self._still_streaming(message):
            raise SlackApiFail("message_not_in_streaming_state")
        return message

    # ----- files ------------------------------------------------------------------------------

    async def _download(self, request: web.Request) -> web.StreamResponse:
        stored = self.files.get(request.match_info["file_id"])
        if stored is None:
            return web.Response(status=404)
        if stored.redirect is not None:
            self._record_download(request)
            # Slack's file servers answer a download with a redirect to another origin, where
            # the token is needed again (aiohttp drops it on a cross-origin redirect).
            port = self.files_url.rsplit(":", 1)[1]
            host = "127.0.0.1" if stored.redirect == "slack" else "localhost"
            path = request.path_qs.replace("/files/", "/files-pri/", 1)
            raise web.HTTPFound(f"http://{host}:{port}{path}")
        return await self._download_final(request)

    def _record_download(self, request: web.Request) -> bool:
        authorized = request.headers.get("Authorization") == f"Bearer {BOT_TOKEN}"
        self.downloads.append(Download(request.host, request.path, authorized))
        return authorized

    async def _download_final(self, request: web.Request) -> web.StreamResponse:
        stored = self.files.get(request.match_info["file_id"])
        if stored is None:
            return web.Response(status=404)
        authorized = self._record_download(request)
        if stored.html_instead or not authorized:
            # Slack's answer without a token or without files:read: a sign-in page.
            return web.Response(
                text="<!DOCTYPE html><html>Sign in</html>", content_type="text/html"
            )
        return web.Response(body=stored.content, content_type=stored.mimetype)

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404)
        upload["data"] = await request.read()
        self._notify()
        return web.Response(text=f"OK - {len(upload['data'])}")


async def _arguments(request: web.Request) -> dict[str, Any]:
    """Query string, form fields and JSON body merged, as Slack accepts all three."""
    args: dict[str, Any] = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                args.update(body)
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            args.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
    return args


# Slack refuses a message with more than 50 blocks, or a section whose text passes 3,000
# characters (Block Kit reference: "section" block, "text" field), with invalid_blocks.
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000


def _check_blocks(blocks: list[dict[str, Any]] | None) -> None:
    if not blocks:
        return
    if len(blocks) > MAX_BLOCKS:
        raise SlackApiFail("invalid_blocks")
    for block in blocks:
        text = block.get("text") if block.get("type") == "section" else None
        if isinstance(text, dict) and len(str(text.get("text", ""))) > MAX_SECTION_TEXT:
            raise SlackApiFail("invalid_blocks")


def _json_list(value: Any) -> list[dict[str, Any]] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = json.loads(value)
    return list(value)


def _failure_response(failure: _Failure) -> web.Response:
    if failure.status == 429:
        headers = {
            "Retry-After": str(failure.retry_after if failure.retry_after is not None else 1)
        }
        return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers=headers)
    return web.Response(status=failure.status, text="fake server error")


def _in_range(messages: list[Message], args: dict[str, Any]) -> list[Message]:
    """``oldest`` / ``latest`` / ``inclusive`` as Slack reads them (both ends exclusive unless
    ``inclusive``)."""
    inclusive = _flag(args, "inclusive")
    oldest = float(args["oldest"]) if args.get("oldest") else None
    latest = float(args["latest"]) if args.get("latest") else None

    def fits(ts: float) -> bool:
        if oldest is not None and (ts < oldest or (ts == oldest and not inclusive)):
            return False
        return not (latest is not None and (ts > latest or (ts == latest and not inclusive)))

    return [m for m in messages if fits(float(m.ts))]


def _flag(args: dict[str, Any], name: str) -> bool:
    """A boolean argument as Slack reads it (the SDK sends ``1``; ``true`` works too)."""
    return str(args.get(name) or "").lower() in ("1", "true")


def _metadata(value: Any) -> dict[str, Any] | None:
    """``chat.postMessage``'s ``metadata`` (an object, or its JSON in a form field), or
    ``invalid_metadata_format``."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise SlackApiFail("invalid_metadata_format") from None
    if not isinstance(value, dict) or set(value) != {"event_type", "event_payload"}:
        raise SlackApiFail("invalid_metadata_format")
    kind, payload = value["event_type"], value["event_payload"]
    if not isinstance(kind, str) or not kind.strip() or not isinstance(payload, dict):
        raise SlackApiFail("invalid_metadata_format")
    for field_value in payload.values():
        nested = field_value if isinstance(field_value, list) else [field_value]
        if isinstance(field_value, list) and not all(isinstance(v, dict) for v in nested):
            raise SlackApiFail("invalid_metadata_format")
        for item in nested:
            inner = item.values() if isinstance(item, dict) else [item]
            if not all(isinstance(v, (str, int, float, bool)) for v in inner):
                raise SlackApiFail("invalid_metadata_format")
    return {"event_type": kind, "event_payload": payload}


def _as_api_message(message: Message, with_metadata: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "message", "ts": message.ts, "text": message.visible}
    if with_metadata and message.metadata is not None:
        data["metadata"] = message.metadata
    if message.user == BOT_USER:
        data.update(user=BOT_USER, bot_id=BOT_ID)
    elif message.bot_id:
        data.update(subtype="bot_message", bot_id=message.bot_id)
        if message.username:
            data["username"] = message.username
    else:
        data["user"] = message.user
    if message.thread_ts:
        data["thread_ts"] = message.thread_ts
    if message.files:
        data["files"] = [{"id": f["id"], "name": f.get("title") or f["id"]} for f in message.files]
    return data


def signed_headers(
    body: str, secret: str = SIGNING_SECRET, *, at: int | None = None
) -> dict[str, str]:
    """The headers Slack sends with an HTTP-mode request."""
    timestamp = str(at if at is not None else int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    assert signature is not None
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature,
        "Content-Type": "application/json",
    }


@asynccontextmanager
async def serve_fake_slack() -> AsyncIterator[FakeSlack]:
    """A started :class:`FakeSlack`, closed at the end of the block."""
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()
