"""Encrypted events the bot cannot read yet: their keys asked of the sender, the reasons a
sender's client withheld one, the room told when a key stays missing, and what nio's
``sync_forever`` does between syncs (keys uploaded, queried, claimed)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientError
from anyio.abc import TaskGroup
from nio import AsyncClient, MatrixRoom, MegolmEvent, SyncResponse, UnknownToDeviceEvent
from nio.events import Event
from nio.exceptions import EncryptionError, LocalProtocolError

from bridge.chat.common.lru import LRUMap

from .events import content_of, thread_root
from .late_keys import (
    Undecrypted,
    Verdict,
    WaitingEvents,
    never_readable_notice,
    now,
    still_waiting_notice,
    verdict,
)
from .nio_private import request_key_from_sender
from .obeying import TrustGate
from .outbox import MatrixOutbox

log = logging.getLogger(__name__)

NETWORK_ERRORS = (ClientError, TimeoutError, OSError)

_WITHHELD = "m.room_key.withheld"
# What the codes of m.room_key.withheld mean, in words a user understands.
_WITHHELD_CODES = {
    "m.unverified": "it does not send keys to devices it has not verified",
    "m.blacklisted": "it blocked the bot's device",
    "m.unauthorised": "the bot was not allowed to read that message",
    "m.unavailable": "it no longer has the key",
    "m.no_olm": "it could not open a secure channel to the bot",
}


def withheld_reason(content: dict[str, Any]) -> str:
    """The reason of an ``m.room_key.withheld``: the sender's words, else the code's meaning."""
    code = str(content.get("code") or "")
    reason = content.get("reason")
    meaning = _WITHHELD_CODES.get(code, code or "no reason given")
    if isinstance(reason, str) and reason.strip():
        return f"{meaning}: {reason.strip()}" if code in _WITHHELD_CODES else reason.strip()
    return meaning


class Decryption:
    def __init__(
        self,
        client: AsyncClient,
        *,
        outbox: MatrixOutbox,
        task_group: TaskGroup,
        gate: TrustGate,
        encryption_problem: str,
        decrypt_grace: float,
        key_wait: float,
        waiting: WaitingEvents | None = None,
    ) -> None:
        self._client = client
        self._outbox = outbox
        self._tg = task_group
        self._gate = gate
        self._encryption_problem = encryption_problem
        self._grace = decrypt_grace
        self._key_wait = key_wait
        # Kept on disk until their key comes (or the wait is over).
        self.waiting = waiting if waiting is not None else WaitingEvents()
        self._withheld: LRUMap[str, str] = LRUMap(1_000)
        self._told_no_encryption: set[str] = set()

    def try_decrypt(self, event: MegolmEvent) -> Event | None:
        if self._client.olm is None:
            return None
        try:
            decrypted: Event = self._client.decrypt_event(event)
        except (EncryptionError, LocalProtocolError):
            return None
        return decrypted

    async def undecryptable(self, room: MatrixRoom, event: MegolmEvent) -> None:
        if self._client.olm is None:
            if room.room_id not in self._told_no_encryption:
                self._told_no_encryption.add(room.room_id)
                problem = self._encryption_problem or "encryption is not available"
                self._tg.start_soon(
                    self._outbox.notice,
                    room.room_id,
                    f"🔒 I cannot read encrypted messages in this room: {problem}.",
                )
            return
        event.room_id = room.room_id
        self.waiting[event.event_id] = Undecrypted(room.room_id, event, now())
        await self._request_key(event)

    async def _request_key(self, event: MegolmEvent) -> None:
        """Ask the device that encrypted ``event`` for its key (nio would ask our own devices,
        and the bot has no other device that could have it)."""
        client = self._client
        if event.session_id in client.outgoing_key_requests or not event.device_id:
            return
        try:
            # Sent the way nio sends its own request, so that nio records it and accepts the
            # forwarded key when it comes.
            await request_key_from_sender(client, event)
        except NETWORK_ERRORS as exc:
            log.warning("asking for a room key failed: %s", type(exc).__name__)

    def note_withheld(self, response: SyncResponse) -> None:
        """Remember why a sender's client refused us a key (``m.room_key.withheld``)."""
        for event in response.to_device_events:
            if not isinstance(event, UnknownToDeviceEvent) or event.type != _WITHHELD:
                continue
            content = event.source.get("content")
            if not isinstance(content, dict) or not isinstance(content.get("session_id"), str):
                continue
            self._withheld.put(str(content["session_id"]), withheld_reason(content))

    async def retry(
        self,
        handle: Callable[[MatrixRoom, Event], Awaitable[None]],
        forget: Callable[[str], object],
    ) -> None:
        """The waiting events whose key came are handled (``forget``: the event was seen
        undecrypted; ``handle``: as a fresh event); the others' rooms are told in time."""
        at = now()
        for event_id, pending in list(self.waiting.items()):
            decrypted = self.try_decrypt(pending.event)
            room = self._client.rooms.get(pending.room_id)
            if decrypted is not None and room is not None:
                forget(event_id)
                # Its batch is stored already: kept (on disk too) until the core has it; an
                # event that cannot be handled is skipped, not kept to fail at every start.
                await handle(room, decrypted)
                del self.waiting[event_id]
                continue
            withheld = self._withheld.peek(pending.event.session_id)
            sender, root = pending.event.sender, thread_root(content_of(pending.event))
            if withheld is not None:
                del self.waiting[event_id]
                self._tg.start_soon(
                    self._outbox.notice,
                    pending.room_id,
                    f"🔒 I could not decrypt a message from {sender}: their client "
                    f"withheld the key ({withheld}).",
                    root,
                )
                continue
            action = verdict(
                pending, at, grace=self._grace, key_wait=self._key_wait, room_known=room is not None
            )
            if action is Verdict.GIVE_UP:
                del self.waiting[event_id]
                text = never_readable_notice(sender)
            elif action is Verdict.TELL_WAITING:
                pending.told = True
                self.waiting.save()
                text = still_waiting_notice(sender)
            else:
                continue
            self._tg.start_soon(self._outbox.notice, pending.room_id, text, root)

    async def housekeeping(self) -> None:
        """What nio's sync_forever does between syncs: keys up, keys queried, sessions made."""
        client = self._client
        if client.olm is None:
            return
        try:
            if client.outgoing_to_device_messages:
                await client.send_to_device_messages()
            if client.should_upload_keys:
                await client.keys_upload()
            if client.should_query_keys:
                changed = set(client.users_for_key_query)
                await client.keys_query()
                # Their devices or identities changed: checked afresh at their next event.
                if self._gate.trust is not None:
                    self._gate.trust.forget(changed)
            if client.should_claim_keys:
                await client.keys_claim(client.get_users_for_key_claiming())
        except (LocalProtocolError, *NETWORK_ERRORS) as exc:
            log.warning("Matrix key maintenance failed: %s", type(exc).__name__)
