"""The adapter's outgoing Matrix calls: per room, rate-limited, encrypted where the room is.

Encrypted sends do what nio's ``room_send`` does, with three differences: every event type is
encrypted (nio sends reactions in the clear), each send has a deadline, and a room-key share
that died half-way is cleaned up. nio's ``share_group_session`` marks the room as sharing and
then claims one-time keys outside its try/finally: when that claim fails (the homeserver is
away), the mark stays, and every later ``room_send`` to the room would wait on it forever.
The send of the prepared event goes through ``nio_private`` (why: its docstring).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from aiohttp import ClientError
from nio import AsyncClient, RoomReadMarkersResponse, RoomRedactResponse, RoomSendResponse
from nio.exceptions import (
    GroupEncryptionError,
    LocalProtocolError,
    MembersSyncError,
    OlmUnverifiedDeviceError,
)

from .format import edit_content, with_mentions, with_relation
from .nio_private import send_encrypted, send_in_the_clear
from .pacing import Priority
from .ratelimit import RoomSendQueue, retry_after
from .reply import RateLimited, SendFailed
from .trust import DeviceTrust

log = logging.getLogger(__name__)

# What a send can raise besides returning an error response: unknown room, members not
# synced, no group session, the connection.
_SEND_ERRORS = (
    LocalProtocolError,
    GroupEncryptionError,
    MembersSyncError,
    ClientError,
    TimeoutError,
    OSError,
)


class MatrixOutbox:
    """Implements :class:`bridge.chat.matrix.reply.Outbox` for a logged-in client."""

    def __init__(
        self,
        client: AsyncClient,
        queue: RoomSendQueue,
        known_room: Callable[[str], Awaitable[bool]] | None = None,
        outage_patience: float = 300.0,
        send_deadline: float = 90.0,
        trust: DeviceTrust | None = None,
    ) -> None:
        self._client = client
        self._queue = queue
        self._known_room = known_room
        self._outage_patience = outage_patience
        self._send_deadline = send_deadline
        # Which devices get room keys (None: every device, as nio's "ignore unverified").
        self._trust = trust

    def encrypts(self, room_id: str) -> bool:
        """Whether events sent to ``room_id`` are encrypted."""
        room = self._client.rooms.get(room_id)
        return self._client.olm is not None and room is not None and room.encrypted

    async def send_event(
        self,
        room_id: str,
        event_type: str,
        content: dict[str, Any],
        priority: Priority = Priority.ORDINARY,
        *,
        in_the_clear: bool = False,
        tx_id: str | None = None,
    ) -> str:
        """Send one event; ``tx_id`` (else a new one) is its transaction id, which the
        homeserver recognises when this device sends it again."""
        client = self._client
        if self._known_room is not None and not await self._known_room(room_id):
            raise SendFailed(f"the bot is not in room {room_id}")

        # One transaction id for every try: if a try reached the homeserver after all, the
        # next one is recognised as the same event, so nothing arrives twice.
        tx_id = tx_id or str(uuid.uuid4())

        async def call() -> Any:
            if in_the_clear:
                return await send_in_the_clear(client, room_id, event_type, content, tx_id)
            if not self.encrypts(room_id):
                return await client.room_send(room_id, event_type, content, tx_id=tx_id)
            with anyio.fail_after(self._send_deadline):
                return await self._encrypted_send(room_id, event_type, content, tx_id)

        response = await self._through_outages(room_id, call, priority)
        if isinstance(response, RoomSendResponse):
            return str(response.event_id)
        if retry_after(response) is not None:
            raise RateLimited(str(response))
        raise SendFailed(str(response))

    async def _encrypted_send(
        self, room_id: str, event_type: str, content: dict[str, Any], tx_id: str
    ) -> Any:
        client = self._client
        room = client.rooms[room_id]
        if not room.members_synced:
            # Every member's devices must get the room key.
            await client.joined_members(room_id)
            if client.should_query_keys:
                await client.keys_query()
        await self._share_room_key(room_id)
        kind, encrypted = client.encrypt(room_id, event_type, content)
        return await send_encrypted(client, room_id, kind, encrypted, tx_id)

    async def _share_room_key(self, room_id: str) -> None:
        client = self._client
        olm = client.olm
        assert olm is not None
        # Devices marked verified or blacklisted first: a device whose trust changed makes nio
        # start a new room key, which the devices it no longer trusts never get.
        refused = await self._trust.prepare_share(room_id) if self._trust is not None else []
        if not olm.should_share_group_session(room_id):
            return
        pending = client.sharing_session.get(room_id)
        if pending is not None:
            # Another send shares the key right now; it has a deadline, so this wait ends.
            await pending.wait()
            return
        try:
            # With device trust, every device is verified or blacklisted by now, so none is
            # merely "ignored" (nio sends ignored devices the key too).
            try:
                await client.share_group_session(
                    room_id, ignore_unverified_devices=self._trust is None
                )
            except OlmUnverifiedDeviceError:
                # A device appeared (a key query) since they were marked: mark again.
                self._drop_mark(room_id)
                assert self._trust is not None
                refused = await self._trust.prepare_share(room_id)
                await client.share_group_session(room_id)
        except BaseException:
            # The claim of one-time keys runs outside nio's try/finally: drop a mark it left,
            # and wake whoever waits on it, so the next try can share again.
            self._drop_mark(room_id)
            raise
        if refused and self._trust is not None:
            await self._trust.withhold(room_id, refused)

    def _drop_mark(self, room_id: str) -> None:
        stale = self._client.sharing_session.pop(room_id, None)
        if stale is not None:
            stale.set()

    async def _through_outages(
        self, room_id: str, call: Callable[[], Awaitable[Any]], priority: Priority
    ) -> Any:
        """Retry a send the homeserver could not be reached for (down, restarting), with
        backoff, for up to ``outage_patience`` seconds: a reply must not be dropped because
        the server was away for a minute."""
        deadline = anyio.current_time() + self._outage_patience
        wait = 0.5
        while True:
            try:
                return await self._queue.send(room_id, call, priority)
            except (ClientError, TimeoutError, OSError) as exc:
                if priority is Priority.INTERMEDIATE or anyio.current_time() + wait > deadline:
                    raise SendFailed(f"{type(exc).__name__}: {exc}") from None
                log.info("homeserver unreachable (%s); sending again in %.1f s", exc, wait)
                if self._queue.on_retry is not None:
                    self._queue.on_retry("connection")
                await anyio.sleep(wait)
                wait = min(wait * 2, 15.0)
            except _SEND_ERRORS as exc:
                raise SendFailed(f"{type(exc).__name__}: {exc}") from None

    async def send(
        self,
        room_id: str,
        content: dict[str, Any],
        priority: Priority = Priority.ORDINARY,
        *,
        tx_id: str | None = None,
    ) -> str:
        return await self.send_event(room_id, "m.room.message", content, priority, tx_id=tx_id)

    async def edit(
        self,
        room_id: str,
        event_id: str,
        new_content: dict[str, Any],
        priority: Priority = Priority.ORDINARY,
    ) -> None:
        await self.send_event(
            room_id, "m.room.message", edit_content(new_content, event_id), priority
        )

    async def react(self, room_id: str, event_id: str, key: str) -> str:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return await self.send_event(room_id, "m.reaction", content)

    async def redact(
        self, room_id: str, event_id: str, priority: Priority = Priority.ORDINARY
    ) -> None:
        client = self._client

        async def call() -> Any:
            return await client.room_redact(room_id, event_id)

        try:
            response = await self._queue.send(room_id, call, priority)
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

    async def receipt(self, room_id: str, event_id: str) -> None:
        """Mark ``event_id`` as read by the bot: shown under the message, and no event in the
        room (receipts are not counted against the account's message rate)."""
        try:
            response = await self._client.room_read_markers(
                room_id, fully_read_event=event_id, read_event=event_id
            )
        except _SEND_ERRORS as exc:
            log.debug("read receipt in %s failed: %s", room_id, type(exc).__name__)
            return
        if not isinstance(response, RoomReadMarkersResponse):
            log.debug("read receipt in %s failed: %s", room_id, response)

    async def notice(
        self, room_id: str, text: str, thread_root: str = "", *, in_the_clear: bool = False
    ) -> None:
        """A short bridge notice (``m.notice``), best effort but patient (it may say that an
        answer was lost). It mentions nobody. ``in_the_clear``: unencrypted also in an
        encrypted room (for a device the bot shares no keys with; nothing secret in it)."""
        content: dict[str, Any] = with_mentions({"msgtype": "m.notice", "body": text})
        with_relation(content, thread_root=thread_root)
        try:
            await self.send_event(
                room_id, "m.room.message", content, Priority.FINAL, in_the_clear=in_the_clear
            )
        except SendFailed as exc:
            log.warning("notice in %s failed: %s", room_id, exc)
