"""Keys that run out or arrive late, against a real Synapse: the fallback key, stored events."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import vodozemac
from nio import RoomKeyRequest, RoomMessageNotice, RoomSendResponse, ToDeviceMessage
from nio.api import Api

from bridge.chat.matrix import MatrixAdapter, MatrixTuning

from .conftest import (
    FAST_TUNING,
    Human,
    RecordingInbound,
    bot_config,
    element_user,
    running_adapter,
)
from .synapse import MatrixUser, Synapse
from .test_crosssign import _post

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


def _claim(synapse: Synapse, asker: MatrixUser, user_id: str, device_id: str) -> dict[str, Any]:
    """One key claimed for the device, as a sender's client claims it ({} when none is left)."""
    answer = _post(
        synapse,
        asker.access_token,
        "/_matrix/client/v3/keys/claim",
        {"one_time_keys": {user_id: {device_id: "signed_curve25519"}}},
    )
    keys = answer.get("one_time_keys", {}).get(user_id, {}).get(device_id, {})
    assert isinstance(keys, dict)
    return keys


def use_up_one_time_keys(synapse: Synapse, user_id: str, device_id: str) -> int:
    """Claim the device's one-time keys until only a fallback key (or nothing) is left."""
    eve = synapse.register("eve")
    claimed = 0
    for _ in range(200):
        keys = _claim(synapse, eve, user_id, device_id)
        if not keys or any(k.get("fallback") for k in keys.values() if isinstance(k, dict)):
            return claimed
        claimed += 1
    raise AssertionError("the one-time keys never ran out")


async def test_one_time_keys_used_up_while_the_bot_is_down_do_not_stop_a_new_sender(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice.user_id])
    data_dir = tmp_path / "bridge"
    async with element_user(synapse, alice, tmp_path) as human:
        room_id = await human.create_room([bot.user_id], encrypted=True)
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, RecordingInbound()):
            await human.wait_joined(room_id, bot.user_id)
            device_id = str(adapter._connected().client.device_id)
        # While the bot is down, others claim all its one-time keys.
        assert use_up_one_time_keys(synapse, bot.user_id, device_id) >= 1
        # Alice has never written to the bot: her client needs a key of the bot's device for
        # the secure channel that carries the room key.
        await human.sync()
        await human.say(room_id, "a new sender")
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await inbound.wait_for(lambda i: "a new sender" in i.texts())
        # A fallback key is published again at the next start, the one-time keys refilled.
        keys = _claim(synapse, alice, bot.user_id, device_id)
        assert keys


async def send_unshared(
    human: Human, room_id: str, text: str, thread_root: str = ""
) -> tuple[vodozemac.InboundGroupSession, str]:
    """A message encrypted with a room key the sender's client has not shared with anyone."""
    olm = human.client.olm
    assert olm is not None
    session = vodozemac.GroupSession()
    # The key as it was before the message (what a forward exports).
    inbound = vodozemac.InboundGroupSession(session.session_key)
    plaintext = json.dumps(
        {
            "type": "m.room.message",
            "room_id": room_id,
            "content": {"msgtype": "m.text", "body": text},
        }
    )
    content: dict[str, Any] = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "sender_key": olm.account.identity_keys["curve25519"],
        "ciphertext": session.encrypt(plaintext.encode()).to_base64(),
        "session_id": session.session_id,
        "device_id": human.user.device_id,
    }
    if thread_root:
        # Relations stay in clear in an encrypted event.
        content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread_root}
    method, path, data = Api.room_send(
        human.client.access_token, room_id, "m.room.encrypted", content, session.session_id
    )
    response = await human.client._send(RoomSendResponse, method, path, data, (room_id,))
    assert isinstance(response, RoomSendResponse), response
    return inbound, str(response.event_id)


async def wait_key_request(human: Human, session_id: str) -> RoomKeyRequest:
    with anyio.fail_after(30):
        while True:
            for event in human.to_device:
                if isinstance(event, RoomKeyRequest) and event.session_id == session_id:
                    return event
            await human.sync()


async def forward_key(
    human: Human,
    room_id: str,
    session: vodozemac.InboundGroupSession,
    user_id: str,
    device_id: str,
    *,
    creator: Human | None = None,
) -> None:
    """``human``'s device forwards the key of a session ``creator`` (by default ``human``)
    created, over the Olm channel it has with the bot's device."""
    olm = human.client.olm
    assert olm is not None
    creator_olm = (creator or human).client.olm
    assert creator_olm is not None
    device = olm.device_store[user_id][device_id]
    channel = olm.session_store.get(device.curve25519)
    assert channel is not None, "no Olm channel to the bot's device"
    content = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "forwarding_curve25519_key_chain": [],
        "room_id": room_id,
        "sender_claimed_ed25519_key": creator_olm.account.identity_keys["ed25519"],
        "sender_key": creator_olm.account.identity_keys["curve25519"],
        "session_id": session.session_id,
        "session_key": session.export_at(0).to_base64(),
    }
    encrypted = olm._olm_encrypt(channel, device, "m.forwarded_room_key", content)
    response = await human.client.to_device(
        ToDeviceMessage("m.room.encrypted", user_id, device_id, encrypted)
    )
    assert not hasattr(response, "status_code"), response


async def test_a_key_forwarded_by_its_sender_after_a_restart_brings_the_message_back_once(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice")
    mallory = synapse.register("mallory")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice.user_id])
    data_dir = tmp_path / "bridge"
    async with (
        element_user(synapse, alice, tmp_path) as human,
        Human.connect(synapse, mallory, tmp_path / "mallory-store") as other,
    ):
        room_id = await human.create_room([bot.user_id, mallory.user_id], encrypted=True)
        await other.join(room_id)
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await human.wait_joined(room_id, bot.user_id)
            device_id = str(adapter._connected().client.device_id)
            # Ordinary messages first: they open the Olm channels to the bot's device.
            await other.sync()
            await other.say(room_id, "mallory here")
            await human.sync()
            await human.say(room_id, "hello")
            await inbound.wait_for(lambda i: "hello" in i.texts())
            session, event_id = await send_unshared(human, room_id, "for your eyes only")
            # The bot asks the sender's device for the key...
            await wait_key_request(human, session.session_id)
        assert inbound.texts() == ["hello"]
        # ... which answers only after the bot restarted (Element Web forwards a key only to
        # a device it shared it with; here the device that created the session answers).
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            # The attack: someone else relays the (genuine) key under Alice's name. Only the
            # device that made the session may forward it.
            await other.sync()
            await forward_key(other, room_id, session, bot.user_id, device_id, creator=human)
            await human.say(room_id, "ping")
            await inbound.wait_for(lambda i: "ping" in i.texts())
            await human.say(room_id, "ping again")
            await inbound.wait_for(lambda i: "ping again" in i.texts())
            assert "for your eyes only" not in inbound.texts()
            # The creator's own forward is taken.
            await forward_key(human, room_id, session, bot.user_id, device_id)
            await inbound.wait_for(lambda i: "for your eyes only" in i.texts())
            # A few more syncs: the message is handed over once, not at every sync.
            await human.say(room_id, "and then")
            await inbound.wait_for(lambda i: "and then" in i.texts())
        assert [m.event_id for m in inbound.messages].count(event_id) == 1
        assert event_id not in (data_dir / "matrix" / "undecrypted.json").read_text()


async def test_a_message_whose_key_never_comes_is_told_to_its_thread_after_a_restart(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice.user_id])
    data_dir = tmp_path / "bridge"
    async with element_user(synapse, alice, tmp_path) as human:
        room_id = await human.create_room([bot.user_id], encrypted=True)
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, RecordingInbound()):
            await human.wait_joined(room_id, bot.user_id)
            root = await human.say(room_id, "a thread starts")
            session, _ = await send_unshared(human, room_id, "never readable", thread_root=root)
            await wait_key_request(human, session.session_id)
        # The day is over by the next start (a wait of zero stands for it).
        over = MatrixTuning(
            reply=FAST_TUNING.reply,
            retry=FAST_TUNING.retry,
            sync=dataclasses.replace(FAST_TUNING.sync, key_wait=0.0),
        )
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=over)
        async with running_adapter(adapter, RecordingInbound()):
            notice = await human.wait_event(
                room_id,
                lambda e: isinstance(e, RoomMessageNotice) and e.sender == bot.user_id,
            )
        assert notice.body.startswith(f"🔒 I could not decrypt a message from {alice.user_id}")
        relation = notice.source["content"].get("m.relates_to", {})
        assert relation.get("rel_type") == "m.thread"
        assert relation.get("event_id") == root
