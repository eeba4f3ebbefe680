"""The one place the adapter takes private names of nio: ``AsyncClient._send``,
``OlmAccount._account``, ``Olm._should_accept_forward``.

``_send`` sends a request nio has already built and hands the answer to nio's own response
handling, which is what the three callers need and no public method offers:

- **An encrypted event we prepared ourselves** (``outbox.py``). nio's public ``room_send``
  waits on the room's "key sharing" mark, and ``share_group_session`` claims one-time keys
  outside its try/finally: a claim that fails (the homeserver is away) leaves the mark, and
  every later ``room_send`` to that room waits forever. The outbox shares the key itself,
  drops such a stale mark, encrypts every event type and puts a deadline on each send; then
  only the send of the ready event is left, and ``_send`` makes nio read its answer as for
  ``room_send``.
- **A notice in the clear in an encrypted room** (``outbox.py``, issue 31). The notices that
  tell a person their device or identity is not trusted must be readable by exactly that
  device, which gets no room keys from the bot; nio's ``room_send`` always encrypts in an
  encrypted room. They say nothing secret.
- **A room-key request to the device that encrypted an event** (``sync.py``). nio's public
  ``request_room_key`` asks our own devices, and the bot has no other device that could hold
  the key. Sent through ``_send``, nio records the request and accepts the forwarded key when
  it comes.

What it waits for upstream: a ``share_group_session`` that clears its mark when it fails, and a
key request that may name the sender's device (or a public way to send a prepared request).
No matrix-nio issue number is on record for either; when nio has them, this module goes and
the callers use the public methods. Nothing else in ``bridge/`` may call ``_send``
(``tests/test_private_names.py`` allows it here only).

**The fallback key** (``keys.py``). nio uploads one-time keys only; when the 50 run out while
the bot is down, a new sender gets no key and withholds the room key (``m.no_olm``). vodozemac's
``Account`` can make and use a fallback key (spec v1.2), but nio's ``OlmAccount`` keeps that
account in ``_account`` and offers no fallback methods. :func:`new_fallback_key` makes one
there (nio's public ``mark_keys_as_published`` then marks it published); what it waits for
upstream is fallback-key support in nio's ``OlmAccount`` and ``keys_upload`` (no matrix-nio
issue number on record).

**A room key forwarded by the device that created it** (:func:`accept_forwards_from_creators`).
The bot asks the sender's device for a missing key; nio's ``Olm._should_accept_forward``
accepts ``m.forwarded_room_key`` only from the bot's *own* verified devices, so the answer
would be dropped. The override adds exactly one more case, after nio's own checks on the
request (a key the bot asked for, same room, session and algorithm): the Olm channel the
forward came through belongs to the device that created the session (its curve25519 key is
the session's ``sender_key``, its known ed25519 key the claimed one, no forwarding chain), and
that device is the one of the user who sent it. Such a device could have sent the key as an
``m.room_key`` anyway; keys relayed by anyone else are still refused. What it waits for
upstream: a way to tell nio which forwarders to trust (no matrix-nio issue number on record).
"""

from __future__ import annotations

import uuid
from typing import Any

from nio import (
    AsyncClient,
    ForwardedRoomKeyEvent,
    MegolmEvent,
    RoomKeyRequestResponse,
    RoomSendResponse,
)
from nio.api import Api
from nio.crypto import Olm, OlmAccount


async def send_encrypted(
    client: AsyncClient, room_id: str, kind: str, encrypted: dict[str, Any], tx_id: str
) -> Any:
    """Send an event already encrypted for ``room_id``; nio's answer as ``room_send`` gives it
    (a :class:`RoomSendResponse` or an error response)."""
    method, path, data = Api.room_send(client.access_token, room_id, kind, encrypted, tx_id)
    return await client._send(RoomSendResponse, method, path, data, (room_id,))


async def send_in_the_clear(
    client: AsyncClient, room_id: str, event_type: str, content: dict[str, Any], tx_id: str
) -> Any:
    """Send an event unencrypted, also to an encrypted room; nio's answer as for
    ``room_send``."""
    method, path, data = Api.room_send(client.access_token, room_id, event_type, content, tx_id)
    return await client._send(RoomSendResponse, method, path, data, (room_id,))


async def request_key_from_sender(client: AsyncClient, event: MegolmEvent) -> Any:
    """Ask the device that encrypted ``event`` for its room key, recorded by nio as its own."""
    message = event.as_key_request(event.sender, str(client.device_id), device_id=event.device_id)
    method, path, data = Api.to_device(
        client.access_token, message.type, message.as_dict(), uuid.uuid4()
    )
    return await client._send(
        RoomKeyRequestResponse,
        method,
        path,
        data,
        (event.session_id, event.session_id, event.room_id, event.algorithm),
    )


def new_fallback_key(account: OlmAccount) -> tuple[str, str]:
    """Make a fresh fallback key in nio's account (see above): its key id and public key.

    (vodozemac 0.10 has these methods; its type stubs lack them, hence ``Any``.)"""
    inner: Any = account._account
    inner.generate_fallback_key()
    [(key_id, key)] = inner.fallback_key.items()
    return str(key_id), str(key.to_base64())


_MEGOLM = "m.megolm.v1.aes-sha2"


def forwarded_by_its_creator(
    olm: Olm, sender: str, sender_key: str, event: ForwardedRoomKeyEvent
) -> bool:
    """Whether a forwarded key we asked for comes from the device that created the session."""
    request = olm.outgoing_key_requests.get(event.session_id)
    if request is None or event.algorithm != _MEGOLM:
        return False
    if (request.algorithm, request.room_id, request.session_id) != (
        event.algorithm,
        event.room_id,
        event.session_id,
    ):
        return False
    content = event.source.get("content")
    if not isinstance(content, dict):
        return False
    if content.get("sender_key") != sender_key or content.get("forwarding_curve25519_key_chain"):
        return False
    device = olm.device_store.device_from_sender_key(sender, sender_key)
    return (
        device is not None
        and device.user_id == sender
        and device.ed25519 == content.get("sender_claimed_ed25519_key")
    )


def accept_forwards_from_creators(olm: Olm) -> None:
    """Make ``olm`` accept a requested key forwarded by the device that created it (see
    above), besides what nio accepts itself."""
    nio_rule = olm._should_accept_forward

    def should_accept(sender: str, sender_key: str, event: ForwardedRoomKeyEvent) -> bool:
        return forwarded_by_its_creator(olm, sender, sender_key, event) or nio_rule(
            sender, sender_key, event
        )

    olm._should_accept_forward = should_accept
