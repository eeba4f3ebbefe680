"""Device trust (issue 31): which devices the bot obeys and shares room keys with.

The spec's recommended client behaviour (v1.18, MSC4153) says a client should neither send room
keys to a device its owner did not cross-sign nor show that device's messages. For a bot that
runs commands, the same rule decides what it obeys. With ``[matrix] trust = "cross-signed"``
(the default):

- every decrypted event is traced to the sending device by the Curve25519 key of its Megolm
  session, and that device must carry a valid signature of its owner's self-signing key, which
  the owner's master key signed (``/keys/query``, checked with :mod:`.crosssign`);
- the master key of every user the bot obeys is pinned the first time it is seen (trust on
  first use, in the store); a different master key later is untrusted until the operator
  acknowledges it (``agy-bridge matrix trust @user:server``);
- room keys go only to devices that pass the same check (nio: verified); every other device is
  blacklisted in nio's store and gets ``m.room_key.withheld`` with ``m.unverified``, which nio
  never sends.

``trust = "any"`` trusts every device (servers and clients without cross-signing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Protocol

from aiohttp import ClientError
from nio import AsyncClient, ToDeviceMessage
from nio.crypto import OlmDevice
from nio.events import Event

from bridge.core.store.identities import IdentityPin

from .crosssign import CrossSigningError, UserIdentity, query_identities

log = logging.getLogger(__name__)

WITHHELD = "m.room_key.withheld"
_NETWORK_ERRORS = (ClientError, TimeoutError, OSError)


class Problem(Enum):
    """Why an event is not obeyed (or a device gets no keys)."""

    NO_IDENTITY = "no cross-signing identity"
    IDENTITY_CHANGED = "identity changed, not acknowledged"
    UNSIGNED_DEVICE = "device not signed by its owner"
    UNKNOWN = "identity could not be checked"


class IdentityPins(Protocol):
    """Where master keys are pinned (the store: :class:`bridge.core.store.Store`)."""

    async def check_identity(self, user_id: str, master_key: str) -> IdentityPin: ...


class MemoryPins:
    """Pins kept in memory, for an adapter run without the bridge's store (tests, tools): the
    same rules as the store's, forgotten when the process ends."""

    def __init__(self) -> None:
        self._pins: dict[str, IdentityPin] = {}

    async def check_identity(self, user_id: str, master_key: str) -> IdentityPin:
        now = time.time()
        pin = self._pins.get(user_id)
        if pin is None:
            pin = IdentityPin(user_id, master_key, now, None, None)
        elif pin.master_key == master_key:
            pin = replace(pin, changed_key=None, changed_at=None)
        elif pin.changed_key != master_key:
            pin = replace(pin, changed_key=master_key, changed_at=now)
        self._pins[user_id] = pin
        return pin

    def acknowledge(self, user_id: str) -> None:
        pin = self._pins.get(user_id)
        if pin is not None and pin.changed_key is not None:
            self._pins[user_id] = IdentityPin(user_id, pin.changed_key, time.time(), None, None)


@dataclass(frozen=True)
class Verdict:
    problem: Problem | None
    device_id: str = ""

    @property
    def trusted(self) -> bool:
        return self.problem is None


TRUSTED = Verdict(None)


class DeviceTrust:
    """Cross-signing checks of other users' devices for one logged-in client."""

    def __init__(
        self,
        client: AsyncClient,
        pins: IdentityPins,
        *,
        pinned: Callable[[str], bool],
        any_device: bool = False,
    ) -> None:
        self._client = client
        self._pins = pins
        self._pinned = pinned
        self.any_device = any_device
        self._identities: dict[str, UserIdentity] = {}
        # (user, master key) pairs the pins accepted; a refused pair is asked again each time,
        # so an acknowledgement counts at once.
        self._accepted: set[tuple[str, str]] = set()
        self._withheld: set[tuple[str, str, str]] = set()

    def forget(self, user_ids: Iterable[str]) -> None:
        """Their devices or keys changed (the homeserver said so): query them again."""
        for user_id in user_ids:
            self._identities.pop(user_id, None)

    async def _load(self, user_ids: Iterable[str]) -> None:
        missing = sorted({u for u in user_ids if u not in self._identities})
        if not missing:
            return
        try:
            self._identities.update(await query_identities(self._client, missing))
        except (CrossSigningError, *_NETWORK_ERRORS) as exc:
            log.warning("Matrix: querying the keys of %s failed: %s", ", ".join(missing), exc)

    async def identity(self, user_id: str) -> UserIdentity | None:
        await self._load([user_id])
        return self._identities.get(user_id)

    async def check_device(self, user_id: str, device_id: str) -> Verdict:
        if self.any_device:
            return TRUSTED
        identity = await self.identity(user_id)
        if identity is None:
            return Verdict(Problem.UNKNOWN, device_id)
        return await self._judge(identity, device_id)

    async def _judge(self, identity: UserIdentity, device_id: str) -> Verdict:
        user_id = identity.user_id
        if identity.master is None or identity.self_signing is None:
            return Verdict(Problem.NO_IDENTITY, device_id)
        if self._pinned(user_id) and (user_id, identity.master) not in self._accepted:
            pin = await self._pins.check_identity(user_id, identity.master)
            if pin.master_key != identity.master:
                return Verdict(Problem.IDENTITY_CHANGED, device_id)
            self._accepted.add((user_id, identity.master))
        if not identity.signed(device_id):
            return Verdict(Problem.UNSIGNED_DEVICE, device_id)
        return Verdict(None, device_id)

    async def check_sender(self, room_id: str, event: Event) -> Verdict:
        """The device that encrypted a decrypted event, judged (found by its session's key)."""
        if self.any_device:
            return TRUSTED
        sender_key = getattr(event, "sender_key", None)
        if not isinstance(sender_key, str):
            return Verdict(Problem.UNSIGNED_DEVICE)
        identity = await self.identity(event.sender)
        device_id = identity.device_by_curve(sender_key) if identity else None
        if device_id is None:
            # A device newer than what we know: ask the homeserver once more.
            self.forget([event.sender])
            identity = await self.identity(event.sender)
            device_id = identity.device_by_curve(sender_key) if identity else None
        if identity is None:
            return Verdict(Problem.UNKNOWN)
        if device_id is None:
            return Verdict(Problem.UNSIGNED_DEVICE)
        olm = self._client.olm
        session_id = getattr(event, "session_id", None)
        session = (
            olm.inbound_group_store.get(room_id, sender_key, session_id)
            if olm is not None and isinstance(session_id, str)
            else None
        )
        if session is None or session.ed25519 != identity.device_ed25519(device_id):
            # The session claims another signing key than the device has.
            return Verdict(Problem.UNSIGNED_DEVICE, device_id)
        return await self._judge(identity, device_id)

    # -- room keys ------------------------------------------------------------------------

    async def prepare_share(self, room_id: str) -> list[OlmDevice]:
        """Mark every device of the room's members in nio's store: verified (gets the room
        key) or blacklisted (does not). A change makes nio start a new room key. The
        blacklisted devices are returned (they are told with :meth:`withhold`)."""
        client = self._client
        room = client.rooms.get(room_id)
        olm = client.olm
        if room is None or olm is None:
            return []
        users = list(room.users)
        if not self.any_device:
            await self._load(users)
        refused: list[OlmDevice] = []
        for user_id in users:
            for device in client.device_store.active_user_devices(user_id):
                if user_id == client.user_id and device.id == client.device_id:
                    continue
                # Only a change is marked: nio's file trust store reports every mark as one
                # (it adds the device again), and each made a new room key, shared again with
                # every device: a room key per message.
                if await self._device_ok(device):
                    if not (device.verified and olm.is_device_verified(device)):
                        client.verify_device(device)
                else:
                    if not (device.blacklisted and olm.is_device_blacklisted(device)):
                        client.blacklist_device(device)
                    refused.append(device)
        return refused

    async def _device_ok(self, device: OlmDevice) -> bool:
        if self.any_device:
            return True
        identity = self._identities.get(device.user_id)
        if identity is None or identity.device_ed25519(device.id) != device.ed25519:
            return False
        return (await self._judge(identity, device.id)).trusted

    async def withhold(self, room_id: str, devices: list[OlmDevice]) -> None:
        """Tell each device refused the room's current key why (``m.unverified``), once."""
        client = self._client
        olm = client.olm
        session = olm.outbound_group_sessions.get(room_id) if olm is not None else None
        if olm is None or session is None:
            return
        for device in devices:
            key = (session.id, device.user_id, device.id)
            if key in self._withheld:
                continue
            self._withheld.add(key)
            content: dict[str, Any] = {
                "algorithm": "m.megolm.v1.aes-sha2",
                "room_id": room_id,
                "session_id": session.id,
                "sender_key": olm.account.identity_keys["curve25519"],
                "code": "m.unverified",
                "reason": "The bot shares room keys only with devices their owner verified.",
            }
            try:
                await client.to_device(
                    ToDeviceMessage(WITHHELD, device.user_id, device.id, content)
                )
            except _NETWORK_ERRORS as exc:
                log.warning("Matrix: sending %s failed: %s", WITHHELD, type(exc).__name__)


async def without_identity(client: AsyncClient, user_ids: Iterable[str]) -> list[str]:
    """Which of ``user_ids`` have no cross-signing identity (so, with ``trust =
    "cross-signed"``, command nothing in an encrypted room); raises
    :class:`CrossSigningError` or a network error when the homeserver cannot say."""
    users = sorted({u for u in user_ids if u.startswith("@")})
    if not users:
        return []
    found = await query_identities(client, users)
    return [u for u in users if found[u].master is None or found[u].self_signing is None]


async def log_users_without_identity(client: AsyncClient, user_ids: Iterable[str]) -> list[str]:
    """At start: name the allowed users whose encrypted messages the bot will not obey (and
    return them)."""
    try:
        missing = await without_identity(client, user_ids)
    except (CrossSigningError, *_NETWORK_ERRORS) as exc:
        log.warning("Matrix: could not check the allowed users' identities: %s", exc)
        return []
    if missing:
        log.warning(
            "Matrix: allowed users without a cross-signing identity (their messages in "
            "encrypted rooms reach nobody until they set one up in their client, see "
            "docs/matrix.md, Trust): %s",
            ", ".join(missing),
        )
    return missing
