"""A room's or a thread's earlier messages, oldest first, with edits applied; each says
whether its sender is someone the access lists serve here (or the bot itself)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import ClientError
from nio import (
    AsyncClient,
    MatrixRoom,
    MegolmEvent,
    RoomEncryptedMedia,
    RoomGetEventResponse,
    RoomMessageMedia,
    RoomMessageNotice,
    RoomMessagesResponse,
)
from nio.api import MessageDirection, RelationshipType
from nio.events import Event
from nio.exceptions import EncryptionError, LocalProtocolError

from bridge.chat.common.access import AccessRule
from bridge.core.events import HistoryEntry, ThreadRef

from .events import MESSAGE_TYPES, author_of, content_of, is_edit, message_text, relation_of

log = logging.getLogger(__name__)

_HISTORY_TYPES = (*MESSAGE_TYPES, RoomMessageNotice)
# Edits and reactions share the timeline with messages: fetch more events than asked for.
_OVERFETCH = 4
_MAX_FETCH = 400


def _decrypted(client: AsyncClient, room_id: str, event: Event) -> Event:
    if not isinstance(event, MegolmEvent) or client.olm is None:
        return event
    event.room_id = room_id
    try:
        result: Event = client.decrypt_event(event)
    except (EncryptionError, LocalProtocolError):
        return event
    # nio drops the server's ``unsigned`` (where the newest edit is bundled): keep it.
    unsigned = event.source.get("unsigned")
    if isinstance(unsigned, dict):
        result.source["unsigned"] = {**unsigned, **result.source.get("unsigned", {})}
    return result


def _bundled_replace(event: Event) -> dict[str, Any] | None:
    """The newest edit the server bundled with ``event`` (whole, or only its id)."""
    unsigned = event.source.get("unsigned")
    relations = unsigned.get("m.relations") if isinstance(unsigned, dict) else None
    replace = relations.get("m.replace") if isinstance(relations, dict) else None
    return replace if isinstance(replace, dict) else None


def _new_body(edit: Event | dict[str, Any], sender: str) -> str | None:
    source = edit.source if isinstance(edit, Event) else edit
    if source.get("sender", sender) != sender:
        return None  # only the author's own edits count
    content = source.get("content")
    new = content.get("m.new_content") if isinstance(content, dict) else None
    body = new.get("body") if isinstance(new, dict) else None
    return body if isinstance(body, str) else None


async def _bundled_edit(client: AsyncClient, room_id: str, event: Event) -> str | None:
    """The newest edit's text. In encrypted rooms the bundled edit is itself encrypted (or only
    its id is given): decrypt it, or fetch it first."""
    replace = _bundled_replace(event)
    if replace is None:
        return None
    body = _new_body(replace, event.sender)
    if body is not None:
        return body
    edit: Event | None = None
    content = replace.get("content")
    if isinstance(content, dict) and "ciphertext" in content:
        parsed = Event.parse_encrypted_event(replace)
        edit = parsed if isinstance(parsed, Event) else None
    elif isinstance(replace.get("event_id"), str):
        response = await client.room_get_event(room_id, str(replace["event_id"]))
        edit = response.event if isinstance(response, RoomGetEventResponse) else None
    if edit is None:
        return None
    return _new_body(_decrypted(client, room_id, edit), event.sender)


async def bundled_edits(client: AsyncClient, room_id: str, events: list[Event]) -> dict[str, str]:
    """The newest edit's text of every event that has one bundled, by event id."""
    out: dict[str, str] = {}
    for event in events:
        if isinstance(event, _HISTORY_TYPES):
            body = await _bundled_edit(client, room_id, event)
            if body is not None:
                out[event.event_id] = body
    return out


def entries(
    room: MatrixRoom,
    events: list[Event],
    limit: int,
    bundled: dict[str, str] | None = None,
    *,
    listed: Callable[[str], bool] = lambda sender: False,
    untrusted: frozenset[str] = frozenset(),
) -> list[HistoryEntry]:
    """Messages among ``events`` (oldest first) as history, each with its newest edit;
    ``listed(sender)`` says whose words are a teammate's, except for the events in
    ``untrusted`` (sent from a device the bot does not obey)."""
    bundled = bundled or {}
    edits: dict[tuple[str, str], str] = {}
    for event in events:
        content = content_of(event)
        if isinstance(event, _HISTORY_TYPES) and is_edit(content):
            new: Any = content.get("m.new_content")
            target = relation_of(content).get("event_id")
            if isinstance(new, dict) and isinstance(new.get("body"), str) and target:
                edits[(str(target), event.sender)] = new["body"]
    out: list[HistoryEntry] = []
    for event in events:
        if not isinstance(event, _HISTORY_TYPES) or is_edit(content_of(event)):
            continue
        text = edits.get((event.event_id, event.sender)) or bundled.get(event.event_id)
        if text is None:
            is_file = isinstance(event, (RoomMessageMedia, RoomEncryptedMedia))
            text = _file_text(event) if is_file else message_text(event)
        out.append(
            HistoryEntry(
                author=author_of(room, event.sender),
                text=text,
                at=datetime.fromtimestamp(event.server_timestamp / 1000, tz=UTC),
                listed=listed(event.sender) and event.event_id not in untrusted,
            )
        )
    return out[-limit:] if limit > 0 else []


def _file_text(event: Event) -> str:
    content = content_of(event)
    name = content.get("filename") or content.get("body") or "file"
    caption = message_text(event)
    return f"[file: {name}] {caption}".strip()


async def room_history(client: AsyncClient, room: MatrixRoom, limit: int) -> list[Event]:
    """The room's latest events, oldest first."""
    wanted = min(max(limit, 1) * _OVERFETCH, _MAX_FETCH)
    collected: list[Event] = []
    token: str | None = None
    while len(collected) < wanted:
        response = await client.room_messages(
            room.room_id, start=token, direction=MessageDirection.back, limit=min(wanted, 100)
        )
        if not isinstance(response, RoomMessagesResponse) or not response.chunk:
            break
        collected.extend(response.chunk)
        if not response.end or response.end == token:
            break
        token = response.end
    return [_decrypted(client, room.room_id, e) for e in reversed(collected)]


async def thread_history(
    client: AsyncClient, room: MatrixRoom, root_id: str, limit: int
) -> list[Event]:
    """The thread's root and its latest replies, oldest first."""
    wanted = min(max(limit, 1) * _OVERFETCH, _MAX_FETCH)
    replies: list[Event] = []
    async for event in client.room_get_event_relations(
        room.room_id,
        root_id,
        rel_type=RelationshipType.thread,
        direction=MessageDirection.back,
        limit=min(wanted, 100),
    ):
        replies.append(event)
        if len(replies) >= wanted:
            break
    events = [_decrypted(client, room.room_id, e) for e in reversed(replies)]
    root = await client.room_get_event(room.room_id, root_id)
    if isinstance(root, RoomGetEventResponse):
        events.insert(0, _decrypted(client, room.room_id, root.event))
    return events


async def history(
    client: AsyncClient,
    thread: ThreadRef,
    limit: int,
    policy: AccessRule,
    refused: Callable[[MatrixRoom, Event], Awaitable[bool]] | None = None,
) -> list[HistoryEntry]:
    """The thread's messages; with ``refused``, those it says the bot would not obey (device
    trust) are not a teammate's words."""
    room = client.rooms.get(thread.channel)
    if room is None or limit <= 0:
        return []
    try:
        if thread.thread:
            events = await thread_history(client, room, thread.thread, limit)
        else:
            events = await room_history(client, room, limit)
        bundled = await bundled_edits(client, room.room_id, events)
    except (ClientError, TimeoutError, OSError) as exc:
        log.warning("history of %s failed: %s", thread.key, type(exc).__name__)
        return []
    own = client.user_id

    def listed(sender: str) -> bool:
        return sender == own or policy.allows(sender, room.room_id)

    untrusted: set[str] = set()
    for event in events:
        if refused is not None and event.sender != own and listed(event.sender):
            if await refused(room, event):
                untrusted.add(event.event_id)
    return entries(room, events, limit, bundled, listed=listed, untrusted=frozenset(untrusted))
