"""A person verifies the bot (issue 31): the SAS verification Element's *Verify* starts.

nio has only the legacy to-device SAS messages (matrix-nio #430, #344), so the flow is built
here on vodozemac's SAS: the person's client sends ``m.key.verification.request`` in a room
with the bot (Element: the DM), the bot answers ``ready``, the person's client ``start``s
``m.sas.v1``, the bot ``accept``s with its commitment, both exchange ``key``, and each side
computes the seven emoji. The bot's emoji are never shown in the room, where the homeserver
could change them: they wait in the store for the operator (``agy-bridge matrix verify``),
who compares them with what the person sees and confirms or rejects. On a confirmation the
bot sends its ``mac`` (its device key and master key), checks the person's (their device key
and master key), says ``done``, signs the person's master key with its user-signing key and
pins it as their identity (a changed identity the person verifies counts as acknowledged).

The same flow also runs to-device (Element's *Verify session*; events named by their
``transaction_id``, sent to the one device that asked); nio's own legacy SAS, which would answer
such a ``start`` or ``key`` itself, is kept out of it (:meth:`Verifier.quiet_nio`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import vodozemac
from anyio.abc import TaskGroup
from nio import AsyncClient, MatrixRoom, ToDeviceMessage, ToDeviceResponse
from nio.api import Api
from nio.crypto.sas import Sas
from nio.events import Event, ToDeviceEvent

from bridge.core.store.identities import (
    VERIFICATION_CONFIRMED,
    VERIFICATION_ENDED,
    VERIFICATION_REJECTED,
    IdentityPin,
    VerificationRow,
)

from .crosssign import CrossSigningKeys, call, public_b64, query_identities, sign
from .outbox import MatrixOutbox

log = logging.getLogger(__name__)

PREFIX = "m.key.verification."
REQUEST = PREFIX + "request"
_SIGNATURES = "/_matrix/client/v3/keys/signatures/upload"
# A verification ends after ten minutes (the spec's timeout; clients cancel then too).
TIMEOUT = 600.0
_AGREEMENT = "curve25519-hkdf-sha256"
# Preferred first: the fixed base64 of the v2 MAC, then the old one Element still accepts.
_MACS = ("hkdf-hmac-sha256.v2", "hkdf-hmac-sha256")


class VerificationStore(Protocol):
    """Where verifications wait for the operator (the store: :class:`bridge.core.store.Store`)."""

    async def add_verification(
        self, verification_id: str, user_id: str, device_id: str, emoji: str
    ) -> None: ...

    async def verification(self, verification_id: str) -> VerificationRow | None: ...

    async def answer_verification(self, verification_id: str, state: str) -> bool: ...

    async def end_waiting_verifications(self) -> int: ...

    async def check_identity(self, user_id: str, master_key: str) -> IdentityPin: ...

    async def acknowledge_identity(self, user_id: str) -> IdentityPin | None: ...


def kind_of(event: Event) -> str | None:
    """``request``, ``ready``, ``start`` … for a verification event in a room, else None."""
    source = event.source
    event_type = source.get("type")
    content = source.get("content")
    if not isinstance(content, dict) or not isinstance(event_type, str):
        return None
    if event_type == "m.room.message" and content.get("msgtype") == REQUEST:
        return "request"
    if event_type.startswith(PREFIX):
        return event_type.removeprefix(PREFIX)
    return None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode().rstrip("=")


def _mac_info(
    sender: str, sender_device: str, receiver: str, receiver_device: str, flow: str
) -> str:
    return f"MATRIX_KEY_VERIFICATION_MAC{sender}{sender_device}{receiver}{receiver_device}{flow}"


def emoji_of(indices: bytes) -> list[str]:
    return [Sas.emoji[i][0] for i in indices]


def emoji_names(symbols: str) -> str:
    names = dict(Sas.emoji)
    return ", ".join(f"{s} {names.get(s, '?')}" for s in symbols.split())


@dataclass
class _Flow:
    id: str
    room_id: str
    user_id: str
    device_id: str
    sas: Any = None
    established: Any = None
    start: dict[str, Any] | None = None
    mac_method: str = _MACS[0]
    their_key: str = ""
    their_mac: dict[str, Any] | None = None
    confirmed: bool = False
    waiting: bool = False
    started: float = field(default_factory=time.monotonic)


class Verifier:
    """The bot's side of in-room verifications, for one logged-in client."""

    def __init__(
        self,
        client: AsyncClient,
        keys: CrossSigningKeys,
        store: VerificationStore,
        send: Callable[[str, str, dict[str, Any]], Awaitable[Any]],
        notice: Callable[[str, str], Awaitable[None]],
    ) -> None:
        self._client = client
        self._keys = keys
        self._store = store
        self._send = send
        self._notice = notice
        self._flows: dict[str, _Flow] = {}

    @property
    def _me(self) -> tuple[str, str]:
        return str(self._client.user_id), str(self._client.device_id)

    @staticmethod
    def handles(event: Event) -> bool:
        return kind_of(event) is not None

    async def _reply(self, flow: _Flow, kind: str, content: dict[str, Any]) -> None:
        if not flow.room_id:
            # To-device: to the one device that asked, the flow named by its transaction id.
            content["transaction_id"] = flow.id
            message = ToDeviceMessage(PREFIX + kind, flow.user_id, flow.device_id, content)
            response = await self._client.to_device(message)
            if not isinstance(response, ToDeviceResponse):
                log.warning("Matrix: sending %s%s failed: %s", PREFIX, kind, response)
            return
        content["m.relates_to"] = {"rel_type": "m.reference", "event_id": flow.id}
        await self._send(flow.room_id, PREFIX + kind, content)

    async def cancel(self, flow: _Flow, code: str, reason: str) -> None:
        self._flows.pop(flow.id, None)
        log.info("Matrix: verification %s with %s cancelled: %s", flow.id, flow.user_id, reason)
        await self._store.answer_verification(flow.id, VERIFICATION_ENDED)
        await self._reply(flow, "cancel", {"code": code, "reason": reason})

    async def on_room_event(self, room: MatrixRoom, event: Event) -> None:
        kind = kind_of(event)
        content = event.source.get("content") or {}
        if kind == "request":
            user_id = self._me[0]
            if content.get("to") == user_id and isinstance(content.get("from_device"), str):
                asked = _Flow(event.event_id, room.room_id, event.sender, content["from_device"])
                await self._on_request(asked, content)
            return
        relation = content.get("m.relates_to") or {}
        flow = self._flows.get(str(relation.get("event_id", "")))
        if flow is not None and event.sender == flow.user_id and flow.room_id == room.room_id:
            await self._on_step(flow, str(kind), content)

    async def on_to_device(self, event: ToDeviceEvent) -> None:
        """A verification event sent to the bot's device (Element: *Verify session*)."""
        event_type = event.source.get("type")
        content = event.source.get("content")
        if not isinstance(event_type, str) or not event_type.startswith(PREFIX):
            return
        if not isinstance(content, dict) or not isinstance(content.get("transaction_id"), str):
            return
        kind = event_type.removeprefix(PREFIX)
        transaction = content["transaction_id"]
        if kind == "request":
            if isinstance(content.get("from_device"), str) and transaction not in self._flows:
                await self._on_request(
                    _Flow(transaction, "", event.sender, content["from_device"]), content
                )
            return
        flow = self._flows.get(transaction)
        if flow is not None and not flow.room_id and event.sender == flow.user_id:
            await self._on_step(flow, kind, content)

    def quiet_nio(self) -> None:
        """nio answers to-device ``start``/``key`` events with its own legacy SAS (it would
        send a key or a cancel of its own): forget what it made of ours."""
        olm = self._client.olm
        if olm is None:
            return
        ours = {flow.id for flow in self._flows.values() if not flow.room_id}
        for transaction in ours:
            olm.key_verifications.pop(transaction, None)
        self._client.outgoing_to_device_messages[:] = [
            m
            for m in self._client.outgoing_to_device_messages
            if not (m.type.startswith(PREFIX) and m.content.get("transaction_id") in ours)
        ]

    async def _on_step(self, flow: _Flow, kind: str, content: dict[str, Any]) -> None:
        try:
            if kind == "start":
                await self._on_start(flow, content)
            elif kind == "key":
                await self._on_key(flow, content)
            elif kind == "mac":
                flow.their_mac = content
                await self._finish(flow)
            elif kind == "cancel":
                self._flows.pop(flow.id, None)
                await self._store.answer_verification(flow.id, VERIFICATION_ENDED)
                log.info("Matrix: %s cancelled verification %s", flow.user_id, flow.id)
        except (vodozemac.SasException, ValueError, KeyError, TypeError) as exc:
            await self.cancel(flow, "m.unexpected_message", f"malformed {kind}: {exc}")

    async def _on_request(self, flow: _Flow, content: dict[str, Any]) -> None:
        device_id = self._me[1]
        methods = content.get("methods") or []
        if "m.sas.v1" not in methods:
            await self.cancel(flow, "m.unknown_method", "the bot verifies with emoji only")
            return
        self._flows[flow.id] = flow
        log.info("Matrix: %s (%s) asks to verify the bot", flow.user_id, flow.device_id)
        await self._reply(flow, "ready", {"from_device": device_id, "methods": ["m.sas.v1"]})
        if not flow.room_id:
            return
        await self._notice(
            flow.room_id,
            "🔐 A verification of the bot is waiting for its operator, who compares the emoji "
            "your client shows with the bot's (shown to the operator only, with "
            "`agy-bridge matrix verify`). Keep your client's verification open until then.",
        )

    async def _on_start(self, flow: _Flow, content: dict[str, Any]) -> None:
        if content.get("method") != "m.sas.v1" or flow.sas is not None:
            await self.cancel(flow, "m.unknown_method", "only one m.sas.v1 start is accepted")
            return
        offered_macs = content.get("message_authentication_codes") or []
        mac = next((m for m in _MACS if m in offered_macs), None)
        if (
            _AGREEMENT not in (content.get("key_agreement_protocols") or [])
            or "sha256" not in (content.get("hashes") or [])
            or mac is None
            or "emoji" not in (content.get("short_authentication_string") or [])
        ):
            await self.cancel(flow, "m.unknown_method", "no method both sides know")
            return
        flow.sas = vodozemac.Sas()
        flow.start = content
        flow.mac_method = mac
        public = flow.sas.public_key.to_base64()
        commitment = _b64(
            hashlib.sha256((public + Api.to_canonical_json(content)).encode()).digest()
        )
        await self._reply(
            flow,
            "accept",
            {
                "method": "m.sas.v1",
                "key_agreement_protocol": _AGREEMENT,
                "hash": "sha256",
                "message_authentication_code": mac,
                "short_authentication_string": ["emoji"],
                "commitment": commitment,
            },
        )

    async def _on_key(self, flow: _Flow, content: dict[str, Any]) -> None:
        if flow.sas is None or flow.established is not None:
            await self.cancel(flow, "m.unexpected_message", "a key before the start")
            return
        user_id, device_id = self._me
        flow.their_key = str(content["key"])
        public = flow.sas.public_key.to_base64()
        flow.established = flow.sas.diffie_hellman(
            vodozemac.Curve25519PublicKey.from_base64(flow.their_key)
        )
        await self._reply(flow, "key", {"key": public})
        info = (
            f"MATRIX_KEY_VERIFICATION_SAS|{flow.user_id}|{flow.device_id}|{flow.their_key}"
            f"|{user_id}|{device_id}|{public}|{flow.id}"
        )
        symbols = " ".join(emoji_of(flow.established.bytes(info).emoji_indices))
        flow.waiting = True
        await self._store.add_verification(flow.id, flow.user_id, flow.device_id, symbols)
        log.warning(
            "Matrix: %s (%s) is verifying the bot: compare the emoji with "
            "`agy-bridge matrix verify`, then confirm or reject it",
            flow.user_id,
            flow.device_id,
        )

    # -- the operator's answer ------------------------------------------------------------

    async def start(self) -> None:
        """Verifications an earlier run left waiting cannot finish: not offered any more."""
        if ended := await self._store.end_waiting_verifications():
            log.info("Matrix: %d verification(s) of an earlier run ended", ended)

    async def poll(self) -> None:
        """Read the operator's answers to the verifications waiting here; end those past the
        spec's ten minutes."""
        now = time.monotonic()
        for flow in [f for f in self._flows.values() if now - f.started > TIMEOUT]:
            await self.cancel(flow, "m.timeout", "the verification took more than ten minutes")
        for flow in [f for f in self._flows.values() if f.waiting and not f.confirmed]:
            row = await self._store.verification(flow.id)
            if row is None:
                continue
            if row.state == VERIFICATION_CONFIRMED:
                flow.confirmed = True
                await self._send_mac(flow)
                await self._finish(flow)
            elif row.state in (VERIFICATION_REJECTED, VERIFICATION_ENDED):
                await self.cancel(flow, "m.user", "the bot's operator rejected the verification")

    def _mac(self, flow: _Flow, key: str, info: str) -> str:
        if flow.mac_method == _MACS[0]:
            return str(flow.established.calculate_mac(key, info))
        return str(flow.established.calculate_mac_invalid_base64(key, info))

    async def _send_mac(self, flow: _Flow) -> None:
        user_id, device_id = self._me
        olm = self._client.olm
        assert olm is not None
        base = _mac_info(user_id, device_id, flow.user_id, flow.device_id, flow.id)
        master = public_b64(self._keys.master)
        keys = {
            f"ed25519:{device_id}": olm.account.identity_keys["ed25519"],
            f"ed25519:{master}": master,
        }
        mac = {key_id: self._mac(flow, key, base + key_id) for key_id, key in keys.items()}
        key_ids = ",".join(sorted(keys))
        await self._reply(
            flow, "mac", {"mac": mac, "keys": self._mac(flow, key_ids, base + "KEY_IDS")}
        )

    async def _finish(self, flow: _Flow) -> None:
        """Both sides confirmed and the person's MAC is here: check it, sign, say done."""
        if not flow.confirmed or flow.their_mac is None or flow.established is None:
            return
        user_id, device_id = self._me
        base = _mac_info(flow.user_id, flow.device_id, user_id, device_id, flow.id)
        macs = flow.their_mac.get("mac") or {}
        if self._mac(flow, ",".join(sorted(macs)), base + "KEY_IDS") != flow.their_mac.get("keys"):
            await self.cancel(flow, "m.key_mismatch", "the key list's MAC does not match")
            return
        identity = (await query_identities(self._client, [flow.user_id]))[flow.user_id]
        known = {f"ed25519:{flow.device_id}": identity.device_ed25519(flow.device_id)}
        if identity.master is not None:
            known[f"ed25519:{identity.master}"] = identity.master
        checked: set[str] = set()
        for key_id, tag in macs.items():
            key = known.get(key_id)
            if key is None:
                continue
            if self._mac(flow, key, base + key_id) != tag:
                await self.cancel(flow, "m.key_mismatch", f"the MAC of {key_id} does not match")
                return
            checked.add(key_id)
        master_id = f"ed25519:{identity.master}"
        if identity.master is None or master_id not in checked:
            await self.cancel(flow, "m.key_mismatch", "the person's identity was not verified")
            return
        self._flows.pop(flow.id, None)
        await self._reply(flow, "done", {})
        await self._store.answer_verification(flow.id, VERIFICATION_ENDED)
        await self._sign_master(flow.user_id, identity.master)
        pin = await self._store.check_identity(flow.user_id, identity.master)
        if pin.master_key != identity.master:
            # Verified with the bot: the changed identity is acknowledged by the verification.
            await self._store.acknowledge_identity(flow.user_id)
        log.info("Matrix: %s verified (master key %s)", flow.user_id, identity.master)

    async def _sign_master(self, user_id: str, master: str) -> None:
        status, body = await call(
            self._client, "POST", "/_matrix/client/v3/keys/query", {"device_keys": {user_id: []}}
        )
        obj = (body.get("master_keys") or {}).get(user_id) if isinstance(body, dict) else None
        if status != 200 or not isinstance(obj, dict):
            log.warning("Matrix: %s's master key could not be fetched to sign it", user_id)
            return
        signed = {k: v for k, v in obj.items() if k not in ("signatures", "unsigned")}
        usk = self._keys.user_signing
        sign(signed, usk, str(self._client.user_id), public_b64(usk))
        status, answer = await call(self._client, "POST", _SIGNATURES, {user_id: {master: signed}})
        failures = answer.get("failures") if isinstance(answer, dict) else None
        if status != 200 or failures:
            log.warning(
                "Matrix: signing %s's identity failed (HTTP %s): %s",
                user_id,
                status,
                json.dumps(failures)[:200],
            )


def start_verifier(
    client: AsyncClient,
    store: VerificationStore | None,
    key_file: Path,
    outbox: MatrixOutbox,
    task_group: TaskGroup,
    poll: float,
) -> Verifier | None:
    """People verify the bot when encryption works, the store keeps their requests and the
    bot has its cross-signing keys; the operator's answers are read from the store every
    ``poll`` seconds."""
    if client.olm is None or store is None:
        return None
    keys = CrossSigningKeys.load(key_file, str(client.user_id))
    if keys is None:
        return None
    verifier = Verifier(client, keys, store, outbox.send_event, outbox.notice)
    task_group.start_soon(_poll_verifications, verifier, poll)
    return verifier


async def _poll_verifications(verifier: Verifier, poll: float) -> None:
    try:
        await verifier.start()
    except Exception:
        log.exception("Matrix: ending the verifications of an earlier run failed")
    while True:
        await anyio.sleep(poll)
        try:
            await verifier.poll()
        except Exception:
            log.exception("Matrix: answering a verification failed")
