"""The bot's Matrix session: login, cross-signing, and the nio client built from them.

A password login happens once; later starts reuse the stored token (``login.json``) and, with
it, the same device and the same encryption keys. When the homeserver no longer knows the token
(``M_UNKNOWN_TOKEN``: the device was deleted or logged out), the bot logs in on a *new* device
with new keys: the old device's keys are gone from the server, and nobody could use them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import anyio
from aiohttp import ClientError
from nio import (
    AsyncClient,
    AsyncClientConfig,
    KeysUploadResponse,
    LoginResponse,
    WhoamiResponse,
)
from nio.crypto import ENCRYPTION_ENABLED
from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.config import MatrixSection

from .crosssign import CrossSigner, CrossSigningError
from .files import MatrixFiles, write_private
from .keys import publish_fallback_key
from .nio_private import accept_forwards_from_creators
from .recovery import login_device_lost, retire_device, store_lost, token_device_lost

log = logging.getLogger(__name__)

_UNKNOWN_TOKEN = "M_UNKNOWN_TOKEN"


class MatrixLoginError(Exception):
    """The bot cannot log in; the message says why (never with a secret in it)."""


class StoredLogin(BaseModel):
    model_config = ConfigDict(extra="ignore")

    homeserver: str
    user_id: str
    device_id: str
    access_token: str


class SyncTokenStore:
    """The last ``next_batch`` whose events were all handed to the core."""

    def __init__(self, path: Path, user_id: str) -> None:
        self._path = path
        self._user_id = user_id

    def load(self) -> str | None:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            log.warning("ignoring an unreadable Matrix sync token file")
            return None
        # A token from another account would skip or replay that account's events.
        if not isinstance(data, dict) or data.get("user_id") != self._user_id:
            return None
        token = data.get("next_batch")
        return token if isinstance(token, str) and token else None

    def save(self, token: str) -> None:
        write_private(self._path, json.dumps({"user_id": self._user_id, "next_batch": token}))


def _load_login(files: MatrixFiles, config: MatrixSection) -> StoredLogin | None:
    try:
        stored = StoredLogin.model_validate_json(files.login.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValidationError):
        log.warning("ignoring an unreadable %s", files.login.name)
        return None
    if stored.homeserver != config.homeserver or stored.user_id != config.user_id:
        return None
    return stored


def client_config(*, encryption: bool, request_timeout: float = 60.0) -> AsyncClientConfig:
    return AsyncClientConfig(
        # 429s come back to us at once: RoomSendQueue waits them out per room, bounded.
        max_limit_exceeded=0,
        max_timeouts=3,
        request_timeout=request_timeout,
        encryption_enabled=encryption and ENCRYPTION_ENABLED,
        # We store next_batch ourselves, after the events are handed over (nio saves it first).
        store_sync_tokens=False,
    )


@dataclass
class Session:
    client: AsyncClient
    # Why end-to-end encryption is off, when it is ("" when it works).
    encryption_problem: str

    def with_problem(self, problem: str) -> Session:
        return Session(self.client, problem)


def _new_client(
    config: MatrixSection, files: MatrixFiles, device_id: str, encryption: bool
) -> AsyncClient:
    return AsyncClient(
        config.homeserver.rstrip("/"),
        user=config.user_id,
        device_id=device_id or None,
        store_path=str(files.store),
        config=client_config(encryption=encryption),
    )


@dataclass(frozen=True)
class _Identity:
    user_id: str
    device_id: str
    access_token: str


async def _whoami(client: AsyncClient) -> WhoamiResponse | None:
    """Who the client's token belongs to; None when the server no longer knows the token."""
    response = await client.whoami()
    if isinstance(response, WhoamiResponse):
        return response
    if getattr(response, "status_code", None) == _UNKNOWN_TOKEN:
        return None
    raise MatrixLoginError(f"the homeserver did not accept the access token: {response}")


async def _check_token(
    config: MatrixSection, files: MatrixFiles, token: str, device_id: str = ""
) -> _Identity | None:
    probe = _new_client(config, files, device_id, encryption=False)
    probe.access_token = token
    try:
        who = await _whoami(probe)
    finally:
        await probe.close()
    if who is None:
        return None
    device = who.device_id or device_id
    if not device:
        raise MatrixLoginError("the access token has no device id (needed for encryption)")
    return _Identity(who.user_id, device, token)


async def _password_login(config: MatrixSection, files: MatrixFiles, device_id: str) -> _Identity:
    if config.password is None:
        raise MatrixLoginError("set matrix.password or matrix.access_token (MATRIX_PASSWORD)")
    # A client without encryption logs in: the store is loaded afterwards, on its own, so
    # that a broken store cannot lose a fresh login.
    plain = _new_client(config, files, device_id, encryption=False)
    try:
        response = await plain.login(
            password=config.password.get_secret_value(), device_name=config.device_name
        )
    finally:
        await plain.close()
    if not isinstance(response, LoginResponse):
        raise MatrixLoginError(f"Matrix login as {config.user_id} failed: {response}")
    identity = _Identity(response.user_id, response.device_id, response.access_token)
    stored = StoredLogin(
        homeserver=config.homeserver,
        user_id=identity.user_id,
        device_id=identity.device_id,
        access_token=identity.access_token,
    )
    write_private(files.login, stored.model_dump_json())
    return identity


async def _identity(config: MatrixSection, files: MatrixFiles) -> _Identity:
    if config.access_token is not None:
        identity = await _check_token(config, files, config.access_token.get_secret_value())
        if identity is None:
            raise MatrixLoginError("the configured Matrix access token is not valid")
        return identity
    stored = _load_login(files, config)
    if stored is None:
        return await _password_login(config, files, "")
    identity = await _check_token(config, files, stored.access_token, stored.device_id)
    if identity is not None:
        return identity
    log.info("the stored Matrix login is no longer valid; logging in on a new device")
    return await _password_login(config, files, "")


def _restore(
    config: MatrixSection, files: MatrixFiles, identity: _Identity, encryption: bool
) -> Session:
    client = _new_client(config, files, identity.device_id, encryption)
    try:
        client.restore_login(identity.user_id, identity.device_id, identity.access_token)
    except Exception as exc:
        # A broken encryption store must not keep the bot out of unencrypted rooms.
        log.exception("the Matrix encryption store could not be loaded")
        client = _new_client(config, files, identity.device_id, encryption=False)
        client.restore_login(identity.user_id, identity.device_id, identity.access_token)
        return Session(client, f"the encryption store could not be loaded ({type(exc).__name__})")
    if not encryption:
        reason = (
            "encryption is switched off in the configuration"
            if not config.encryption
            else "the encryption libraries are not installed"
        )
        return Session(client, reason)
    if client.olm is None:
        return Session(client, "the encryption store could not be opened")
    # A key the bot asked the sender's device for is taken from that device.
    accept_forwards_from_creators(client.olm)
    return Session(client, "")


async def open_session(config: MatrixSection, data_dir: Path) -> Session:
    """Log in (or reuse the stored login) and load the encryption store.

    Raises :class:`MatrixLoginError` for credentials the homeserver refuses, and the network
    errors of aiohttp when the homeserver cannot be reached.
    """
    files = MatrixFiles.under(data_dir)
    files.prepare()
    identity = await _identity(config, files)
    encryption = config.encryption and ENCRYPTION_ENABLED
    if encryption:
        identity, lost = await _after_a_lost_store(config, files, identity)
        if lost:
            log.error("Matrix: %s", lost)
            return _restore(config, files, identity, encryption=False).with_problem(lost)
    session = _restore(config, files, identity, encryption)
    if session.encryption_problem:
        return session
    try:
        problem = await _cross_sign(session.client, files, config)
    except BaseException:
        await session.client.close()
        raise
    if not problem:
        return session
    # Without a signed device, Element neither shares its keys with the bot nor trusts what
    # the bot encrypts: say so in encrypted rooms instead of half-working there.
    await session.client.close()
    return _restore(config, files, identity, encryption=False).with_problem(problem)


async def _after_a_lost_store(
    config: MatrixSection, files: MatrixFiles, identity: _Identity
) -> tuple[_Identity, str]:
    """A new device when the store of the current one is gone (see ``recovery.py``); with
    it, "" or else what the operator must do."""
    probe = _new_client(config, files, identity.device_id, encryption=False)
    probe.restore_login(identity.user_id, identity.device_id, identity.access_token)
    try:
        if not await store_lost(probe, files):
            return identity, ""
        if config.access_token is not None:
            return identity, token_device_lost(identity.device_id)
        if config.password is None:
            return identity, login_device_lost(identity.device_id)
        log.warning(
            "Matrix: the encryption store of device %s is gone; logging in as a new device",
            identity.device_id,
        )
        await retire_device(probe)
    finally:
        await probe.close()
    return await _password_login(config, files, ""), ""


async def _cross_sign(client: AsyncClient, files: MatrixFiles, config: MatrixSection) -> str:
    """Publish the device keys and the cross-signing identity; "" when done, else why not."""
    if client.should_upload_keys:
        response = await client.keys_upload()
        if not isinstance(response, KeysUploadResponse):
            return f"the device keys could not be uploaded: {response}"
    # New senders reach the bot also when its one-time keys ran out while it was down.
    await publish_fallback_key(client)
    password = config.password.get_secret_value() if config.password is not None else None
    try:
        await CrossSigner(client, files.cross_signing, password).ensure()
    except CrossSigningError as exc:
        log.error("Matrix cross-signing: %s", exc)
        return str(exc)
    return ""


async def open_session_retrying(
    config: MatrixSection, data_dir: Path, backoff_max: float
) -> Session:
    """Log in, waiting for a homeserver that cannot be reached yet (bad credentials raise)."""
    backoff = 1.0
    while True:
        try:
            return await open_session(config, data_dir)
        except (ClientError, TimeoutError) as exc:
            log.warning(
                "Matrix homeserver unreachable (%s); retrying in %.0f s",
                type(exc).__name__,
                backoff,
            )
        await anyio.sleep(backoff)
        backoff = min(backoff * 2, backoff_max)
