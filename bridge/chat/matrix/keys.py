"""The device's fallback key (spec v1.2): new senders reach the bot when one-time keys run out.

A sender's client opens the secure channel that carries a room key with one of the bot's
one-time keys. nio uploads 50 and tops them up while it runs; while the bot is down, others may
claim them all, and a new sender then gets none and withholds the room key (``m.no_olm``). The
homeserver hands out the fallback key when no one-time key is left (and keeps handing it out).

Each start makes a fresh fallback key and publishes it, after nio's own key upload. vodozemac
keeps the previous one as well, so a channel opened with it while the bot was down still opens
(Synapse replaces the published fallback key on upload). Rotating when the homeserver reports
the key used (``device_unused_fallback_key_types``) is not done: nio does not hand that field
out, and the spec lets a client rotate at its own pace.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import ClientError
from nio import AsyncClient

from .nio_private import new_fallback_key

log = logging.getLogger(__name__)

_UPLOAD = "/_matrix/client/v3/keys/upload"


def fallback_body(client: AsyncClient, key_id: str, key: str) -> dict[str, Any]:
    """The ``/keys/upload`` body for one fallback key, signed by the device."""
    olm = client.olm
    assert olm is not None
    signed: dict[str, Any] = {"key": key, "fallback": True}
    signature = olm.sign_json(dict(signed))
    signed["signatures"] = {str(client.user_id): {f"ed25519:{client.device_id}": signature}}
    return {"fallback_keys": {f"signed_curve25519:{key_id}": signed}}


async def publish_fallback_key(client: AsyncClient) -> bool:
    """Make and publish a fresh fallback key; whether the homeserver took it."""
    olm = client.olm
    if olm is None:
        return False
    if olm.account.one_time_keys["curve25519"]:
        # Marking the fallback key published would mark these too, and they were never sent.
        log.warning("Matrix: one-time keys wait for their upload; no fallback key this time")
        return False
    key_id, key = new_fallback_key(olm.account)
    body = fallback_body(client, key_id, key)
    headers = {
        "Authorization": f"Bearer {client.access_token}",
        "Content-Type": "application/json",
    }
    try:
        response = await client.send("POST", _UPLOAD, json.dumps(body), headers=headers, timeout=60)
        status = response.status
        response.release()
    except (ClientError, TimeoutError, OSError) as exc:
        log.warning("Matrix: publishing the fallback key failed: %s", type(exc).__name__)
        return False
    if status != 200:
        log.warning("Matrix: the homeserver refused the fallback key (HTTP %s)", status)
        return False
    olm.account.mark_keys_as_published()
    olm.save_account()
    return True
