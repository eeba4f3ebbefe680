"""Encrypted rooms that keep working: outages during key sharing, encrypted reactions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import vodozemac
from nio import (
    AsyncClient,
    MegolmEvent,
    ReactionEvent,
    RoomKeyRequest,
    RoomMessageNotice,
    RoomMessageText,
    RoomSendResponse,
    ToDeviceMessage,
)
from nio.api import Api
from nio.events import Event

from bridge.core.events import Reaction, TurnOutcome

from .conftest import matrix_world
from .outage import AddressOutage, address_outage
from .synapse import Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


@pytest.fixture
def outage(synapse: Synapse) -> Iterator[AddressOutage]:
    """The shared homeserver behind an address the test can take away and give back."""
    with address_outage(synapse) as outage:
        yield outage


def _bot_said(sender: str, text: str) -> Any:
    def match(event: Event) -> bool:
        return isinstance(event, RoomMessageText) and event.sender == sender and event.body == text

    return match


async def test_homeserver_outage_while_keys_are_claimed_loses_nothing(
    outage: AddressOutage, tmp_path: Path
) -> None:
    async with matrix_world(outage.synapse, tmp_path, encrypted=True) as world:
        client: AsyncClient = world.adapter._connected().client
        claims = 0
        original = client.keys_claim

        async def claim_during_outage(users: dict[str, list[str]]) -> Any:
            nonlocal claims
            claims += 1
            if claims == 1:
                # The homeserver goes away just as the bot claims Alice's one-time keys, and
                # comes back a little later.
                await anyio.to_thread.run_sync(outage.down)
                tg.start_soon(back_later)
            return await original(users)

        async def back_later() -> None:
            await anyio.sleep(3)
            await anyio.to_thread.run_sync(outage.up)

        client.keys_claim = claim_during_outage  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(120):
                await world.adapter.post_message(world.thread(), "the answer")
        assert claims >= 1
        bot = world.bot_user.user_id
        await world.human.wait_event(world.room_id, _bot_said(bot, "the answer"), within=60)
        # The next answer in the same room is not stuck behind a stale key share.
        with anyio.fail_after(60):
            await world.adapter.post_message(world.thread(), "and another")
        await world.human.wait_event(world.room_id, _bot_said(bot, "and another"))
        said = [e for e in world.human.timeline[world.room_id] if _bot_said(bot, "the answer")(e)]
        assert len(said) == 1


async def test_the_bots_messages_in_a_room_share_one_room_key(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True) as world:
        bot = world.bot_user.user_id
        for n in range(3):
            await world.adapter.post_message(world.thread(), f"note {n}")
        await world.human.wait_event(world.room_id, _bot_said(bot, "note 2"))
        said = [
            e
            for e in world.human.timeline[world.room_id]
            if isinstance(e, RoomMessageText) and e.sender == bot
        ]
        assert [e.body for e in said] == ["note 0", "note 1", "note 2"]
        assert all(e.decrypted for e in said)
        # A new room key only when a device's trust changes (or at nio's own rotation, after
        # 100 messages): not one per message, each shared again with every device.
        assert len({e.session_id for e in said}) == 1


async def test_reactions_in_encrypted_rooms_are_encrypted(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True) as world:
        question = await world.human.say(world.room_id, "a question")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        await world.adapter.react(world.thread(), question, Reaction.QUEUED)
        bot = world.bot_user.user_id
        reaction = await world.human.wait_event(
            world.room_id,
            lambda e: isinstance(e, (ReactionEvent, MegolmEvent)) and e.sender == bot,
        )
        # The human's client decrypted it: it travelled as m.room.encrypted.
        assert isinstance(reaction, ReactionEvent)
        assert reaction.decrypted
        assert reaction.key == "⏳"
        assert reaction.reacts_to == question


async def test_missing_key_is_asked_of_the_sender_and_a_withheld_reason_shown(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True) as world:
        alice = world.human
        bot = world.bot_user.user_id
        bot_device = str(world.adapter._connected().client.device_id)
        olm = alice.client.olm
        assert olm is not None
        # A message encrypted with a room key Alice's client never shared with the bot.
        session = vodozemac.GroupSession()
        plaintext = json.dumps(
            {
                "type": "m.room.message",
                "room_id": world.room_id,
                "content": {"msgtype": "m.text", "body": "for your eyes only"},
            }
        )
        content = {
            "algorithm": "m.megolm.v1.aes-sha2",
            "sender_key": olm.account.identity_keys["curve25519"],
            "ciphertext": session.encrypt(plaintext.encode()).to_base64(),
            "session_id": session.session_id,
            "device_id": alice.user.device_id,
        }
        method, path, data = Api.room_send(
            alice.client.access_token, world.room_id, "m.room.encrypted", content, "tx-withheld"
        )
        response = await alice.client._send(RoomSendResponse, method, path, data, (world.room_id,))
        assert isinstance(response, RoomSendResponse), response
        # The bot asks Alice's device for that key (not its own devices, which cannot have it).
        with anyio.fail_after(30):
            while True:
                requests = [
                    e
                    for e in alice.to_device
                    if isinstance(e, RoomKeyRequest) and e.session_id == session.session_id
                ]
                if requests:
                    break
                await alice.sync()
        [request] = requests
        assert request.sender == bot
        assert request.requesting_device_id == bot_device
        # Alice's client refuses, and says why.
        withheld = ToDeviceMessage(
            "m.room_key.withheld",
            bot,
            bot_device,
            {
                "algorithm": "m.megolm.v1.aes-sha2",
                "room_id": world.room_id,
                "session_id": session.session_id,
                "sender_key": content["sender_key"],
                "code": "m.unverified",
                "reason": "Device not verified",
            },
        )
        await alice.client.to_device(withheld)
        notice = await alice.wait_event(
            world.room_id,
            lambda e: isinstance(e, RoomMessageNotice) and e.sender == bot,
        )
        assert "withheld the key" in notice.body
        assert "does not send keys to devices it has not verified" in notice.body
        assert "Device not verified" in notice.body
        assert world.inbound.messages == []


async def test_thread_history_in_an_encrypted_room_shows_the_newest_edit(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, threads=True, encrypted=True) as world:
        root = await world.human.say(world.room_id, "root message")
        await world.human.say(
            world.room_id,
            "in the thread",
            **{
                "m.relates_to": {
                    "rel_type": "m.thread",
                    "event_id": root,
                    "is_falling_back": True,
                    "m.in_reply_to": {"event_id": root},
                }
            },
        )
        await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
        message = world.inbound.messages[1]
        async with world.adapter.open_reply(message.thread, message.message_id) as live:
            await live.append("first fragment")
            await world.human.wait_event(
                world.room_id, _bot_said(world.bot_user.user_id, "first fragment")
            )
            await live.append(" and the rest of the answer")
            await live.finish(TurnOutcome(final_text="first fragment and the rest of the answer"))
        entries = await world.adapter.history(message.thread, 10)
        assert [e.text for e in entries] == [
            "root message",
            "in the thread",
            "first fragment and the rest of the answer",
        ]
