"""Edits and deletions of Slack messages, as the core's neutral :class:`MessageChange`.

Slack sends an edit as a ``message`` event with the subtype ``message_changed`` (``message``
holds the edited message, ``previous_message`` the old one) and a deletion with
``message_deleted`` (``deleted_ts``, ``previous_message``); an edited message that still
mentions the app can come again as an ``app_mention`` with the same ``ts`` and an ``edited``
field. Each change is named by the message and the edit's own time, so the two events of one
edit are one change to the core.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.chat.slack.events import PLATFORM, BotIdentity, to_plain_text
from bridge.core.events import ThreadRef


class _Tolerant(BaseModel):
    # Slack adds fields all the time: ignore what we do not read.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class _Edited(_Tolerant):
    user: str = ""
    ts: str = ""


class _Message(_Tolerant):
    user: str | None = None
    bot_id: str | None = None
    text: str = ""
    ts: str = ""
    thread_ts: str | None = None
    edited: _Edited | None = None


class _ChangeEvent(_Tolerant):
    type: str
    subtype: str | None = None
    channel: str = ""
    ts: str = ""
    deleted_ts: str | None = None
    message: _Message | None = None
    previous_message: _Message | None = None
    # An app_mention of an edited message carries these at the top level.
    user: str | None = None
    text: str = ""
    thread_ts: str | None = None
    edited: _Edited | None = None


class SlackChange(_Tolerant):
    """A person changed a message of theirs (``text`` None: deleted it)."""

    thread: ThreadRef
    ts: str  # the changed message's ts (its id in the inbox)
    user: str
    text: str | None = None
    change_id: str = Field(min_length=1)


def _thread(channel: str, message: _Message) -> ThreadRef:
    in_thread = bool(message.thread_ts) and message.thread_ts != message.ts
    root = message.thread_ts if in_thread and message.thread_ts else message.ts
    return ThreadRef(platform=PLATFORM, channel=channel, thread=root)


def parse_change(raw: dict[str, Any], bot: BotIdentity) -> SlackChange | None:
    """An edit or deletion of a person's message; None for anything else (our own posts too)."""
    try:
        event = _ChangeEvent.model_validate(raw)
    except ValidationError:
        return None
    if not event.channel:
        return None
    if event.subtype == "message_changed" and event.message is not None:
        message = event.message
        if message.edited is None or not message.ts:
            return None  # Slack also says "changed" when it unfurls a link: not an edit
        return _edit(event.channel, message, bot)
    if event.subtype == "message_deleted" and event.previous_message is not None:
        message = event.previous_message
        ts = event.deleted_ts or message.ts
        if not ts or not message.user or _ours(message, bot):
            return None
        return SlackChange(
            thread=_thread(event.channel, message.model_copy(update={"ts": ts})),
            ts=ts,
            user=message.user,
            change_id=f"{event.channel}:{ts}:deleted",
        )
    if event.type == "app_mention" and event.edited is not None and event.user:
        message = _Message(
            user=event.user,
            text=event.text,
            ts=event.ts,
            thread_ts=event.thread_ts,
            edited=event.edited,
        )
        return _edit(event.channel, message, bot)
    return None


def _edit(channel: str, message: _Message, bot: BotIdentity) -> SlackChange | None:
    if not message.user or _ours(message, bot) or message.edited is None:
        return None
    return SlackChange(
        thread=_thread(channel, message),
        ts=message.ts,
        user=message.user,
        text=to_plain_text(message.text, bot.user_id),
        change_id=f"{channel}:{message.ts}:edited:{message.edited.ts or message.ts}",
    )


def _ours(message: _Message, bot: BotIdentity) -> bool:
    return message.user == bot.user_id or bool(message.bot_id and message.bot_id == bot.bot_id)


def is_change(raw: dict[str, Any]) -> bool:
    """Whether the event is an edit or a deletion (handled apart from new messages)."""
    return raw.get("subtype") in ("message_changed", "message_deleted") or (
        raw.get("type") == "app_mention" and "edited" in raw
    )
