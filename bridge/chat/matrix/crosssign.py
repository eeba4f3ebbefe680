"""Cross-signing for the bot's account: an identity Element trusts, and a device it signed.

Clients that exclude insecure devices (MSC4153, Element's default) neither share room keys
with a user who has no cross-signing identity nor decrypt events from a device its owner did
not sign. nio cannot cross-sign (matrix-nio#229), so this module does it by hand:

- three ed25519 keys (master, self-signing, user-signing), generated once and kept in
  ``data_dir/matrix/cross_signing.json`` (0600);
- the public halves uploaded with ``/keys/device_signing/upload`` (user-interactive auth with
  the password; Synapse lets the very first upload through without it);
- the bot's device key object signed with the self-signing key and posted to
  ``/keys/signatures/upload``.

Each start checks ``/keys/query`` and does only what is missing, so a restart reuses the keys.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nio import AsyncClient
from nio.api import Api
from pydantic import BaseModel, ConfigDict, ValidationError

from .files import RESET_FILE, write_private

log = logging.getLogger(__name__)

_QUERY = "/_matrix/client/v3/keys/query"
_DEVICE_SIGNING = "/_matrix/client/v3/keys/device_signing/upload"
_SIGNATURES = "/_matrix/client/v3/keys/signatures/upload"

_ONE_TIME_STEP = (
    "set matrix.password (or MATRIX_PASSWORD) for one start; once the keys are published the "
    "password may be removed again (see docs/matrix.md, Encryption)"
)
NEEDS_PASSWORD_TO_REPLACE = (
    "cross-signing is not set up: the bot's account already has cross-signing keys this "
    "bridge does not hold, and replacing them needs the account's password: " + _ONE_TIME_STEP
)
NEEDS_PASSWORD = (
    "cross-signing is not set up: the homeserver asks for the account's password to publish "
    "the bot's keys: " + _ONE_TIME_STEP
)


# The user-interactive stage of a homeserver whose logins Matrix Authentication Service (MAS)
# handles: the reset is approved in MAS's account page, then the same upload goes through.
_OAUTH_STAGES = ("m.oauth", "org.matrix.cross_signing_reset")


def oauth_reset_url(answer: Any) -> str | None:
    """The approval URL of an ``m.oauth`` stage (or its unstable name, MSC4312) in a 401."""
    if not isinstance(answer, dict):
        return None
    params = answer.get("params")
    for stage in _OAUTH_STAGES:
        entry = params.get(stage) if isinstance(params, dict) else None
        url = entry.get("url") if isinstance(entry, dict) else None
        if isinstance(url, str) and url.startswith("https://"):
            return url
    return None


def needs_approval(url: str) -> str:
    return (
        "cross-signing is not set up: the homeserver's account management (Matrix "
        "Authentication Service) must approve replacing the bot's cross-signing identity: "
        f"open {url} signed in as the bot, approve the reset, then restart the bridge within "
        "the time it allows (the password does not help here; see docs/matrix.md, Encryption)"
    )


class CrossSigningError(Exception):
    """Cross-signing could not be set up; the message says why and what to do."""


def _b64(raw: bytes) -> str:
    # Matrix uses unpadded base64.
    return base64.b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def public_b64(key: Ed25519PrivateKey) -> str:
    return _b64(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def canonical(obj: dict[str, Any]) -> bytes:
    """The bytes a Matrix signature covers: canonical JSON without signatures and unsigned."""
    stripped = {k: v for k, v in obj.items() if k not in ("signatures", "unsigned")}
    return Api.to_canonical_json(stripped).encode()


def sign(obj: dict[str, Any], key: Ed25519PrivateKey, user_id: str, key_id: str) -> None:
    """Add the signature of ``key`` (named ``ed25519:key_id``) to ``obj`` in place."""
    signature = _b64(key.sign(canonical(obj)))
    obj.setdefault("signatures", {}).setdefault(user_id, {})[f"ed25519:{key_id}"] = signature


def verify(obj: dict[str, Any], public_key: str, user_id: str) -> bool:
    """Whether ``obj`` carries a valid signature by the ed25519 key ``public_key``."""
    signature = obj.get("signatures", {}).get(user_id, {}).get(f"ed25519:{public_key}")
    if not isinstance(signature, str):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(_unb64(public_key)).verify(
            _unb64(signature), canonical(obj)
        )
    except (InvalidSignature, ValueError):
        return False
    return True


class _StoredKeys(BaseModel):
    model_config = ConfigDict(extra="ignore")

    user_id: str
    master: str
    self_signing: str
    user_signing: str


@dataclass(frozen=True)
class CrossSigningKeys:
    user_id: str
    master: Ed25519PrivateKey
    self_signing: Ed25519PrivateKey
    user_signing: Ed25519PrivateKey

    @classmethod
    def generate(cls, user_id: str) -> CrossSigningKeys:
        return cls(
            user_id,
            Ed25519PrivateKey.generate(),
            Ed25519PrivateKey.generate(),
            Ed25519PrivateKey.generate(),
        )

    @classmethod
    def load(cls, path: Path, user_id: str) -> CrossSigningKeys | None:
        try:
            stored = _StoredKeys.model_validate_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValidationError):
            log.warning("ignoring an unreadable %s", path.name)
            return None
        if stored.user_id != user_id:
            return None
        try:
            return cls(
                user_id,
                Ed25519PrivateKey.from_private_bytes(_unb64(stored.master)),
                Ed25519PrivateKey.from_private_bytes(_unb64(stored.self_signing)),
                Ed25519PrivateKey.from_private_bytes(_unb64(stored.user_signing)),
            )
        except ValueError:
            log.warning("ignoring an unreadable %s", path.name)
            return None

    def to_json(self) -> str:
        def seed(key: Ed25519PrivateKey) -> str:
            return _b64(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

        return _StoredKeys(
            user_id=self.user_id,
            master=seed(self.master),
            self_signing=seed(self.self_signing),
            user_signing=seed(self.user_signing),
        ).model_dump_json()

    def _key_object(self, usage: str, key: Ed25519PrivateKey) -> dict[str, Any]:
        pub = public_b64(key)
        return {"user_id": self.user_id, "usage": [usage], "keys": {f"ed25519:{pub}": pub}}

    def upload_body(self) -> dict[str, Any]:
        """The three public keys, the two lesser ones signed by the master key."""
        master = self._key_object("master", self.master)
        self_signing = self._key_object("self_signing", self.self_signing)
        user_signing = self._key_object("user_signing", self.user_signing)
        master_id = public_b64(self.master)
        sign(self_signing, self.master, self.user_id, master_id)
        sign(user_signing, self.master, self.user_id, master_id)
        return {
            "master_key": master,
            "self_signing_key": self_signing,
            "user_signing_key": user_signing,
        }


def _only_key(obj: Any) -> str | None:
    keys = obj.get("keys") if isinstance(obj, dict) else None
    if not isinstance(keys, dict) or len(keys) != 1:
        return None
    value = next(iter(keys.values()))
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class PublishedIdentity:
    """What ``/keys/query`` says about the bot's own cross-signing keys and device."""

    master: str | None
    self_signing: str | None
    device: dict[str, Any] | None


async def call(
    client: AsyncClient, method: str, path: str, body: dict[str, Any]
) -> tuple[int, Any]:
    """One authenticated JSON request nio has no method for: the status and the answer."""
    headers = {
        "Authorization": f"Bearer {client.access_token}",
        "Content-Type": "application/json",
    }
    response: ClientResponse = await client.send(
        method, path, json.dumps(body), headers=headers, timeout=60
    )
    try:
        try:
            payload = await response.json(content_type=None)
        except (ValueError, json.JSONDecodeError):
            payload = {}
        return response.status, payload
    finally:
        response.release()


# -- other users' identities (device trust, issue 31) ----------------------------------------


@dataclass(frozen=True)
class UserIdentity:
    """A user's cross-signing identity and devices as ``/keys/query`` gave them.

    ``self_signing`` is set only when the master key's signature on it verifies; ``devices``
    holds the device key objects whose own signature verifies, by device id.
    """

    user_id: str
    master: str | None
    self_signing: str | None
    devices: dict[str, dict[str, Any]]

    def device_by_curve(self, curve25519: str) -> str | None:
        """The id of the device whose identity key is ``curve25519``."""
        for device_id, device in self.devices.items():
            if device.get("keys", {}).get(f"curve25519:{device_id}") == curve25519:
                return device_id
        return None

    def device_ed25519(self, device_id: str) -> str | None:
        key = self.devices.get(device_id, {}).get("keys", {}).get(f"ed25519:{device_id}")
        return key if isinstance(key, str) else None

    def signed(self, device_id: str) -> bool:
        """Whether the owner's self-signing key signed this device."""
        device = self.devices.get(device_id)
        return (
            device is not None
            and self.self_signing is not None
            and verify(device, self.self_signing, self.user_id)
        )


def _usage_key(obj: Any, user_id: str, usage: str) -> str | None:
    if not isinstance(obj, dict) or obj.get("user_id") != user_id:
        return None
    if usage not in (obj.get("usage") or []):
        return None
    return _only_key(obj)


def user_identity(answer: dict[str, Any], user_id: str) -> UserIdentity:
    """The identity of ``user_id`` in a ``/keys/query`` answer, every signature checked."""
    master = _usage_key(answer.get("master_keys", {}).get(user_id), user_id, "master")
    ssk_object = answer.get("self_signing_keys", {}).get(user_id)
    ssk = _usage_key(ssk_object, user_id, "self_signing")
    if master is None or ssk is None or not verify(ssk_object, master, user_id):
        ssk = None
    devices: dict[str, dict[str, Any]] = {}
    listed = answer.get("device_keys", {}).get(user_id)
    for device_id, device in (listed if isinstance(listed, dict) else {}).items():
        if not isinstance(device, dict) or device.get("device_id") != device_id:
            continue
        if device.get("user_id") != user_id:
            continue
        own = device.get("keys", {}).get(f"ed25519:{device_id}")
        # The device signs its own keys with its ed25519 key, named by its device id.
        signature = device.get("signatures", {}).get(user_id, {}).get(f"ed25519:{device_id}")
        if isinstance(own, str) and isinstance(signature, str):
            renamed = {
                **device,
                "signatures": {user_id: {f"ed25519:{own}": signature}},
            }
            if verify(renamed, own, user_id):
                devices[device_id] = device
    return UserIdentity(user_id, master, ssk, devices)


async def query_identities(client: AsyncClient, user_ids: list[str]) -> dict[str, UserIdentity]:
    """``/keys/query`` for ``user_ids``; raises :class:`CrossSigningError` when it fails."""
    status, body = await call(client, "POST", _QUERY, {"device_keys": {u: [] for u in user_ids}})
    if status != 200 or not isinstance(body, dict):
        raise CrossSigningError(f"/keys/query failed (HTTP {status})")
    return {user_id: user_identity(body, user_id) for user_id in user_ids}


class CrossSigner:
    """Sets up cross-signing for one logged-in client (device keys already uploaded)."""

    def __init__(self, client: AsyncClient, key_file: Path, password: str | None) -> None:
        self._client = client
        self._key_file = key_file
        self._password = password

    @property
    def _user_id(self) -> str:
        return str(self._client.user_id)

    async def _call(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return await call(self._client, method, path, body)

    async def published(self) -> PublishedIdentity:
        status, body = await self._call("POST", _QUERY, {"device_keys": {self._user_id: []}})
        if status != 200 or not isinstance(body, dict):
            raise CrossSigningError(f"/keys/query failed (HTTP {status})")
        user = self._user_id
        device = body.get("device_keys", {}).get(user, {}).get(self._client.device_id)
        return PublishedIdentity(
            master=_only_key(body.get("master_keys", {}).get(user)),
            self_signing=_only_key(body.get("self_signing_keys", {}).get(user)),
            device=device if isinstance(device, dict) else None,
        )

    def _save(self, keys: CrossSigningKeys) -> None:
        write_private(self._key_file, keys.to_json())

    async def ensure(self) -> CrossSigningKeys:
        """Make the published identity ours and our device signed; return the keys.

        Raises :class:`CrossSigningError` when that is not possible (the message says why).
        """
        keys = CrossSigningKeys.load(self._key_file, self._user_id)
        published = await self.published()
        if keys is None:
            keys = CrossSigningKeys.generate(self._user_id)
            # Kept before the upload: a crash in between must not leave keys nobody holds.
            self._save(keys)
        if published.master != public_b64(keys.master) or published.self_signing != public_b64(
            keys.self_signing
        ):
            await self._upload_keys(keys, replacing=published.master is not None)
            self._key_file.with_name(RESET_FILE).unlink(missing_ok=True)
            log.info(
                "Matrix: cross-signing keys published for %s (master key %s)",
                self._user_id,
                public_b64(keys.master),
            )
        if published.device is None:
            raise CrossSigningError("the bot's device keys are not on the homeserver yet")
        if not verify(published.device, public_b64(keys.self_signing), self._user_id):
            await self._sign_device(keys, published.device)
            log.info("Matrix: device %s signed by the bot's identity", self._client.device_id)
        return keys

    async def _upload_keys(self, keys: CrossSigningKeys, *, replacing: bool) -> None:
        body = keys.upload_body()
        olm = self._client.olm
        if olm is not None:
            # The device vouches for the master key too (Element shows the identity as set
            # up from this device).
            master = body["master_key"]
            signature = olm.sign_json(
                {k: v for k, v in master.items() if k not in ("signatures", "unsigned")}
            )
            master.setdefault("signatures", {}).setdefault(self._user_id, {})[
                f"ed25519:{self._client.device_id}"
            ] = signature
        status, answer = await self._call("POST", _DEVICE_SIGNING, body)
        if status == 200:
            return
        session = answer.get("session") if isinstance(answer, dict) else None
        if status != 401 or not isinstance(session, str):
            raise CrossSigningError(f"uploading the cross-signing keys failed (HTTP {status})")
        self._stop_at_oauth(answer)
        if self._password is None:
            raise CrossSigningError(NEEDS_PASSWORD_TO_REPLACE if replacing else NEEDS_PASSWORD)
        body["auth"] = {
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": self._user_id},
            "password": self._password,
            "session": session,
        }
        status, answer = await self._call("POST", _DEVICE_SIGNING, body)
        if status != 200:
            code = answer.get("errcode", "") if isinstance(answer, dict) else ""
            raise CrossSigningError(
                f"the homeserver refused the cross-signing keys (HTTP {status} {code})".strip()
            )

    def _stop_at_oauth(self, answer: Any) -> None:
        """MAS answers with an ``m.oauth`` stage: only the operator can approve the reset."""
        url = oauth_reset_url(answer)
        if url is None:
            return
        log.error("Matrix cross-signing: approve the identity reset at %s, then restart", url)
        write_private(self._key_file.with_name(RESET_FILE), json.dumps({"url": url}))
        raise CrossSigningError(needs_approval(url))

    async def _sign_device(self, keys: CrossSigningKeys, device: dict[str, Any]) -> None:
        signed = {k: v for k, v in device.items() if k not in ("signatures", "unsigned")}
        sign(signed, keys.self_signing, self._user_id, public_b64(keys.self_signing))
        body = {self._user_id: {str(self._client.device_id): signed}}
        status, answer = await self._call("POST", _SIGNATURES, body)
        failures = answer.get("failures") if isinstance(answer, dict) else None
        if status != 200 or failures:
            raise CrossSigningError(
                f"signing the bot's device failed (HTTP {status}): {json.dumps(failures)[:200]}"
            )
