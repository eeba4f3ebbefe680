"""Slack message events as the bridge sees them: which ones count, their thread and text."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.core.events import AttachmentRef, ThreadRef

PLATFORM = "slack"

# Message subtypes that are a person writing: plain messages (no subtype), messages with files,
# and thread replies also sent to the channel. Edits, deletions, joins, bot posts and the rest
# never start or continue a turn.
_COUNTED_SUBTYPES = {None, "file_share", "thread_broadcast"}


class _Tolerant(BaseModel):
    # Slack adds fields all the time: ignore what we do not read.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class BotIdentity(_Tolerant):
    """The bot as ``auth.test`` describes it."""

    user_id: str
    bot_id: str = ""
    team_id: str = ""
    name: str = ""

    def wrote(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` (as the Web API returns one) is this bot's own post."""
        user = str(message.get("user") or "")
        return user == self.user_id or bool(self.bot_id and message.get("bot_id") == self.bot_id)


class SlackFile(_Tolerant):
    id: str = ""
    name: str = ""
    title: str = ""
    mimetype: str = "application/octet-stream"
    size: int | None = None
    url_private_download: str | None = None
    url_private: str | None = None
    # "check_file_info" for a Slack Connect file: the event has no URLs, files.info does.
    file_access: str | None = None


class SlackMessageEvent(_Tolerant):
    type: str
    subtype: str | None = None
    channel: str = ""
    channel_type: str | None = None
    user: str | None = None
    bot_id: str | None = None
    app_id: str | None = None
    text: str = ""
    ts: str
    thread_ts: str | None = None
    team: str | None = None
    # The author's own team when it differs from the channel's (Slack Connect).
    user_team: str | None = None
    files: list[SlackFile] = Field(default_factory=list)


class Candidate(_Tolerant):
    """A message that may start or continue a turn (access and conversation not yet checked)."""

    thread: ThreadRef
    ts: str
    user: str
    # The author's team, or their enterprise on Enterprise Grid: a stream's recipient_team_id.
    org: str | None
    text: str
    attachments: list[AttachmentRef]
    mentioned: bool  # the bot was @mentioned (an app_mention, or the mention in the text)
    is_dm: bool
    in_thread: bool  # a reply under another message (not a top-level message)

    @property
    def event_id(self) -> str:
        # app_mention and message carry different event ids for the same message, and retries
        # repeat them: channel+ts names the message itself, so the core drops both duplicates.
        return f"{self.thread.channel}:{self.ts}"


def is_dm_channel(channel: str, channel_type: str | None = None) -> bool:
    return channel_type == "im" or (channel_type is None and channel.startswith("D"))


def parse_event(
    raw: dict[str, Any],
    bot: BotIdentity,
    *,
    allowed_bots: frozenset[str] = frozenset(),
    enterprise_id: str | None = None,
) -> Candidate | None:
    """A ``message`` or ``app_mention`` event as a :class:`Candidate`, or None to ignore it.

    Apps posting with their bot token send a ``user`` *and* a ``bot_id``/``app_id`` with no
    subtype: such a message counts only when its app (bot id or app id) is in
    ``allowed_bots``, so another bot in an allowed channel cannot start turns or ping-pong
    with ours. ``enterprise_id`` (from the event envelope) names the author's organisation on
    Enterprise Grid when the event carries no team.
    """
    try:
        event = SlackMessageEvent.model_validate(raw)
    except ValidationError:
        return None
    if event.subtype not in _COUNTED_SUBTYPES or not event.user or not event.channel:
        return None
    if event.user == bot.user_id or (event.bot_id and event.bot_id == bot.bot_id):
        return None
    apps = {name for name in (event.bot_id, event.app_id) if name}
    if apps and not apps & allowed_bots:
        return None
    is_dm = is_dm_channel(event.channel, event.channel_type)
    in_thread = bool(event.thread_ts) and event.thread_ts != event.ts
    root = event.thread_ts if in_thread and event.thread_ts else event.ts
    return Candidate(
        thread=ThreadRef(platform=PLATFORM, channel=event.channel, thread=root),
        ts=event.ts,
        user=event.user,
        org=event.user_team or event.team or enterprise_id,
        text=to_plain_text(event.text, bot.user_id),
        attachments=attachments(event.files),
        mentioned=event.type == "app_mention" or mentions(event.text, bot.user_id),
        is_dm=is_dm,
        in_thread=in_thread,
    )


def mentions(text: str, user_id: str) -> bool:
    return re.search(rf"<@{re.escape(user_id)}(?:\|[^>]*)?>", text) is not None


_USER = re.compile(r"<@([A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL = re.compile(r"<#([A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!([a-z]+)(?:\^[^|>]*)?(?:\|([^>]*))?>")
_LINK = re.compile(r"<((?:https?|mailto|ftp|tel):[^|>]+)(?:\|([^>]*))?>")


def to_plain_text(text: str, bot_user_id: str) -> str:
    """Slack's message markup as plain text for the agent.

    The bot's own mention is removed; other mentions, channels and links become readable; and
    Slack's escaping of ``&``, ``<`` and ``>`` is undone (last, so escaped text stays text).
    """

    def user(match: re.Match[str]) -> str:
        if match.group(1) == bot_user_id:
            return ""
        return f"@{match.group(2) or match.group(1)}"

    def link(match: re.Match[str]) -> str:
        url, label = match.group(1), match.group(2)
        if not label or label == url or url.endswith(label):
            return url.removeprefix("mailto:")
        return f"{label} ({url})"

    text = _USER.sub(user, text)
    text = _CHANNEL.sub(lambda m: f"#{m.group(2) or m.group(1)}", text)
    text = _SPECIAL.sub(lambda m: m.group(2) or f"@{m.group(1)}", text)
    text = _LINK.sub(link, text)
    text = re.sub(r"[ \t]{2,}", " ", text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.strip()


# The source of a file the event described without URLs: fetch asks files.info first.
FILES_INFO = "files.info:"


def attachments(files: list[SlackFile]) -> list[AttachmentRef]:
    """The files of a message. A file without URLs (Slack Connect sends
    ``file_access: "check_file_info"``) is looked up with ``files.info`` when fetched."""
    refs: list[AttachmentRef] = []
    for file in files:
        source = file.url_private_download or file.url_private
        if not source:
            if not file.id:
                continue
            source = FILES_INFO + file.id
        refs.append(
            AttachmentRef(
                name=file.name or file.title or file.id or "file",
                mimetype=file.mimetype or "application/octet-stream",
                size=file.size,
                source=source,
            )
        )
    return refs


def ts_to_datetime(ts: str) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC)
    except (TypeError, ValueError):
        return None
