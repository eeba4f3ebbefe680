"""The one place the adapter calls a private method of nio: ``AsyncClient._send``.

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
"""

from __future__ import annotations

import uuid
from typing import Any

from nio import AsyncClient, MegolmEvent, RoomKeyRequestResponse, RoomSendResponse
from nio.api import Api


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
