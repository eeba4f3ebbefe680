"""The adapter's outgoing Matrix calls: per room, rate-limited, encrypted where the room is."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientError
from nio import AsyncClient, RoomRedactResponse, RoomSendResponse
from nio.exceptions import GroupEncryptionError, LocalProtocolError

from .format import edit_content
from .ratelimit import RoomSendQueue
from .reply import SendFailed

log = logging.getLogger(__name__)

# What a send can raise besides returning an error response: unknown room, members not
# synced, no group session, the connection.
_SEND_ERRORS = (LocalProtocolError, GroupEncryptionError, ClientError, TimeoutError, OSError)


class MatrixOutbox:
    """Implements :class:`bridge.chat.matrix.reply.Outbox` for a logged-in client."""

    def __init__(
        self,
        client: AsyncClient,
        queue: RoomSendQueue,
        known_room: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._client = client
        self._queue = queue
        self._known_room = known_room

    async def send_event(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        client = self._client
        if self._known_room is not None and not await self._known_room(room_id):
            raise SendFailed(f"the bot is not in room {room_id}")

        async def call() -> Any:
            # Devices we could not verify still get the keys: the bot cannot verify
            # interactively, and going silent in an encrypted room helps nobody.
            return await client.room_send(
                room_id, event_type, content, ignore_unverified_devices=True
            )

        try:
            response = await self._queue.send(room_id, call)
        except _SEND_ERRORS as exc:
            raise SendFailed(f"{type(exc).__name__}: {exc}") from None
        if isinstance(response, RoomSendResponse):
            return str(response.event_id)
        raise SendFailed(str(response))

    async def send(self, room_id: str, content: dict[str, Any]) -> str:
        return await self.send_event(room_id, "m.room.message", content)

    async def edit(self, room_id: str, event_id: str, new_content: dict[str, Any]) -> None:
        await self.send_event(room_id, "m.room.message", edit_content(new_content, event_id))

    async def react(self, room_id: str, event_id: str, key: str) -> str:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return await self.send_event(room_id, "m.reaction", content)

    async def redact(self, room_id: str, event_id: str) -> None:
        client = self._client

        async def call() -> Any:
            return await client.room_redact(room_id, event_id)

        try:
            response = await self._queue.send(room_id, call)
        except _SEND_ERRORS as exc:
            log.warning("redaction in %s failed: %s", room_id, type(exc).__name__)
            return
        if not isinstance(response, RoomRedactResponse):
            log.warning("redaction in %s failed: %s", room_id, response)

    async def typing(self, room_id: str, busy: bool, timeout_ms: int) -> None:
        # Typing notices are advisory: never queued behind messages, never retried.
        try:
            await self._client.room_typing(room_id, busy, timeout=timeout_ms or 30_000)
        except _SEND_ERRORS as exc:
            log.debug("typing notice in %s failed: %s", room_id, type(exc).__name__)

    async def notice(self, room_id: str, text: str, thread_root: str = "") -> None:
        """A short bridge notice (``m.notice``), best effort."""
        content: dict[str, Any] = {"msgtype": "m.notice", "body": text}
        if thread_root:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread_root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread_root},
            }
        try:
            await self.send(room_id, content)
        except SendFailed as exc:
            log.warning("notice in %s failed: %s", room_id, exc)
