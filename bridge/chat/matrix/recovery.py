"""A lost encryption store with the login kept: come back as a new device, or say what to do.

When ``data_dir/matrix/store/`` is lost but ``login.json`` (or the configured access token)
still names a device, nio would create a new Olm account under the *same* device id. The
homeserver still holds the old account's keys for that device: Synapse refuses the new
one-time keys ("One time key … already exists"), and clients refuse a changed key for a device
they know. Encryption would stay off at every start.

The only cure is a new device. With the password the bridge takes it itself: it logs the old
device out (the homeserver deletes it and its keys, which nobody holds any more) and logs in
again; the new device is cross-signed with the kept identity as at first start. With only an
access token the token *is* the device, so the bridge says exactly what the operator must do
and keeps encryption off until then.
"""

from __future__ import annotations

import logging
from pathlib import Path

from nio import AsyncClient, LogoutResponse

from .crosssign import CrossSigner, CrossSigningError
from .files import MatrixFiles

log = logging.getLogger(__name__)


def store_database(files: MatrixFiles, user_id: str, device_id: str) -> Path:
    """Where nio's default store keeps the device's keys (``<user>_<device>.db``)."""
    return files.store / f"{user_id}_{device_id}.db"


async def keys_published(client: AsyncClient, files: MatrixFiles) -> bool:
    """Whether the homeserver holds identity keys for the client's device."""
    published = await CrossSigner(client, files.cross_signing, None).published()
    return published.device is not None


async def store_lost(client: AsyncClient, files: MatrixFiles) -> bool:
    """The device's keys are on the homeserver, but the store that held them is gone."""
    database = store_database(files, str(client.user_id), str(client.device_id))
    if database.exists():
        return False
    try:
        return await keys_published(client, files)
    except CrossSigningError as exc:
        # Then the cross-signing step fails too and says so; nothing to recover here.
        log.warning("Matrix: could not check the device's published keys: %s", exc)
        return False


async def retire_device(client: AsyncClient) -> None:
    """Log the client's device out: the homeserver deletes the device and its keys."""
    response = await client.logout()
    if not isinstance(response, LogoutResponse):
        # Not fatal: the new device works anyway; the old one lingers in the session list.
        log.warning("Matrix: logging out the device whose keys were lost failed: %s", response)


def token_device_lost(device_id: str) -> str:
    """What the operator must do when the store of an access token's device is gone."""
    return (
        f"the encryption store of device {device_id} is gone (data_dir/matrix/store/ was "
        "lost), and the homeserver still holds that device's old keys, so the device cannot "
        "encrypt again: give the bridge a new access token (log in once more, which makes a "
        "new device, e.g. with curl -X POST <homeserver>/_matrix/client/v3/login) in "
        "MATRIX_ACCESS_TOKEN and log the old device out, or set MATRIX_PASSWORD for one start "
        "so the bridge makes the new device itself (see docs/matrix.md, Backups)"
    )


def login_device_lost(device_id: str) -> str:
    """The same, for a stored login the bridge cannot replace (no password configured)."""
    return (
        f"the encryption store of device {device_id} is gone (data_dir/matrix/store/ was "
        "lost), and the homeserver still holds that device's old keys: set MATRIX_PASSWORD "
        "for one start, and the bridge logs in as a new device and signs it (see "
        "docs/matrix.md, Backups)"
    )
