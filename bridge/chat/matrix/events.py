"""nio room events to neutral :class:`IncomingMessage` objects (and the few facts we need)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nio import (
    MatrixRoom,
    ReactionEvent,
    RoomEncryptedMedia,
    RoomMessageEmote,
    RoomMessageMedia,
    RoomMessageText,
)
from nio.events import Event

from bridge.core.events import Author, IncomingMessage, ThreadRef

from .media import attachment_ref, caption

PLATFORM = "matrix"
STOP_KEYS = frozenset({"🛑"})
# Events that may start a turn.
MESSAGE_TYPES = (RoomMessageText, RoomMessageEmote, RoomMessageMedia, RoomEncryptedMedia)


def content_of(event: Event) -> dict[str, Any]:
    content = event.source.get("content")
    return content if isinstance(content, dict) else {}


def relation_of(content: dict[str, Any]) -> dict[str, Any]:
    relation = content.get("m.relates_to")
    return relation if isinstance(relation, dict) else {}


def is_edit(content: dict[str, Any]) -> bool:
    return relation_of(content).get("rel_type") == "m.replace"


def thread_root(content: dict[str, Any]) -> str:
    """The thread root event id when the content belongs to an ``m.thread``, else ""."""
    relation = relation_of(content)
    if relation.get("rel_type") == "m.thread" and isinstance(relation.get("event_id"), str):
        return str(relation["event_id"])
    return ""


def thread_ref(room_id: str, content: dict[str, Any], threads: bool) -> ThreadRef:
    root = thread_root(content) if threads else ""
    return ThreadRef(platform=PLATFORM, channel=room_id, thread=root)


def strip_reply_fallback(body: str) -> str:
    """Drop the quoted ``> <@user> ...`` block older clients put before a reply's text."""
    if not body.startswith("> "):
        return body
    lines = body.split("\n")
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    if index < len(lines) and lines[index] == "":
        return "\n".join(lines[index + 1 :])
    return body


def is_stop_key(key: str) -> bool:
    # Some clients add the emoji presentation selector (U+FE0F) to the reaction key.
    return key.replace("\ufe0f", "").strip() in STOP_KEYS


def author_of(room: MatrixRoom, user_id: str) -> Author:
    member = room.users.get(user_id)
    name = (member.display_name if member is not None else None) or ""
    return Author(id=user_id, display_name=name)


def message_text(event: Event) -> str:
    content = content_of(event)
    if isinstance(event, (RoomMessageText, RoomMessageEmote)):
        body = event.body
        relation = relation_of(content)
        # A real reply carries a quoted fallback from older clients, also inside a thread; a
        # thread message's in_reply_to that only falls back (is_falling_back) quotes nothing.
        if "m.in_reply_to" in relation and not relation.get("is_falling_back"):
            body = strip_reply_fallback(body)
        if isinstance(event, RoomMessageEmote):
            return f"* {body}"
        return body
    return caption(content)


def to_incoming(event: Event, room: MatrixRoom, *, threads: bool) -> IncomingMessage | None:
    """The neutral message for a text or media event, or None for anything else."""
    if not isinstance(event, MESSAGE_TYPES):
        return None
    content = content_of(event)
    if is_edit(content):
        # Edits of earlier messages are not new messages for the agent.
        return None
    attachments = []
    if isinstance(event, (RoomMessageMedia, RoomEncryptedMedia)):
        ref = attachment_ref(content)
        if ref is None:
            return None
        attachments.append(ref)
    return IncomingMessage(
        thread=thread_ref(room.room_id, content, threads),
        event_id=event.event_id,
        message_id=event.event_id,
        author=author_of(room, event.sender),
        text=message_text(event),
        attachments=attachments,
        sent_at=datetime.fromtimestamp(event.server_timestamp / 1000, tz=UTC),
        reply_to=reply_target(content),
    )


def reply_target(content: dict[str, Any]) -> str | None:
    """The event a real reply answers (not a thread message's fallback in_reply_to)."""
    relation = relation_of(content)
    target = relation.get("m.in_reply_to")
    if not isinstance(target, dict) or relation.get("is_falling_back"):
        return None
    event_id = target.get("event_id")
    return event_id if isinstance(event_id, str) else None


def stop_target(event: Event) -> str | None:
    """The event a 🛑 reaction points at, or None when ``event`` is no such reaction."""
    if isinstance(event, ReactionEvent) and is_stop_key(event.key):
        return event.reacts_to
    return None
