"""Room upgrades against a real Synapse: the conversation follows a real ``/upgrade``."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import anyio
import pytest
from nio import (
    RoomCreateResponse,
    RoomGetStateEventResponse,
    RoomMessageNotice,
    RoomPutStateResponse,
)
from nio.api import RoomPreset

from bridge.chat.matrix import MatrixAdapter
from bridge.core.events import ThreadRef

from .conftest import (
    FAST_TUNING,
    WAIT,
    Human,
    RecordingInbound,
    bot_config,
    matrix_world,
    running_adapter,
)
from .synapse import MatrixUser, Synapse
from .test_crosssign import _post

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


def upgrade(synapse: Synapse, user: MatrixUser, room_id: str) -> str:
    """``POST /rooms/{room}/upgrade``, as Element's "upgrade this room" does."""
    path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room_id)}/upgrade"
    answer = _post(synapse, user.access_token, path, {"new_version": "12"})
    replacement = answer["replacement_room"]
    assert isinstance(replacement, str)
    return replacement


async def give_power(human: Human, room_id: str, user_id: str, level: int) -> None:
    """After an upgrade only members with power 50 may still write in the old room: a bot
    meant to say there where the conversation went needs that much (a moderator)."""
    current = await human.client.room_get_state_event(room_id, "m.room.power_levels")
    assert isinstance(current, RoomGetStateEventResponse), current
    content = dict(current.content)
    content["users"] = {**content.get("users", {}), user_id: level}
    response = await human.client.room_put_state(room_id, "m.room.power_levels", content)
    assert isinstance(response, RoomPutStateResponse), response


def room_of(room_id: str) -> ThreadRef:
    return ThreadRef(platform="matrix", channel=room_id, thread="")


async def bot_notice(human: Human, room_id: str, bot: str, words: str) -> RoomMessageNotice:
    event = await human.wait_event(
        room_id,
        lambda e: isinstance(e, RoomMessageNotice) and e.sender == bot and words in e.body,
    )
    assert isinstance(event, RoomMessageNotice)
    return event


async def test_an_upgraded_room_with_the_bot_invited_carries_on_in_the_new_room(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        alice, bot, old = world.human, world.bot_user.user_id, world.room_id
        await alice.say(old, "before the upgrade")
        await world.inbound.wait_for(lambda i: "before the upgrade" in i.texts())
        await give_power(alice, old, bot, 50)
        new = upgrade(synapse, alice.user, old)
        # A private room: the bot cannot join the new one by itself, and says so.
        await bot_notice(alice, old, bot, "invite me")
        assert world.inbound.moves == []
        # Element invites the old members when the upgrader ticks the box.
        await alice.client.room_invite(new, bot)
        await world.inbound.wait_for(lambda i: bool(i.moves))
        [(moved_from, moved_to, by)] = world.inbound.moves
        assert (moved_from, moved_to) == (room_of(old), room_of(new))
        assert by.id == alice.user_id
        await alice.sync()
        await bot_notice(alice, old, bot, new)
        await bot_notice(alice, new, bot, old)
        await alice.say(new, "after the upgrade")
        await world.inbound.wait_for(lambda i: "after the upgrade" in i.texts())
        assert world.inbound.messages[-1].thread == room_of(new)


async def test_an_upgraded_public_room_is_followed_without_an_invite(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice")
    bot = synapse.register("bot")
    # allowed_rooms lists the old room only: the config keeps applying to its successor.
    async with Human.connect(synapse, alice) as human:
        created = await human.client.room_create(
            preset=RoomPreset.public_chat, invite=[bot.user_id]
        )
        assert isinstance(created, RoomCreateResponse), created
        old = str(created.room_id)
        config = bot_config(synapse, bot, allowed_rooms=[old])
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=tmp_path / "bridge", tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await human.wait_joined(old, bot.user_id)
            new = upgrade(synapse, alice, old)
            await inbound.wait_for(lambda i: bool(i.moves))
            assert [(a, b) for a, b, _ in inbound.moves] == [(room_of(old), room_of(new))]
            await human.join(new)
            await human.wait_joined(new, bot.user_id)
            await human.say(new, "in the new room")
            await inbound.wait_for(lambda i: "in the new room" in i.texts())
        # After a restart too.
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=tmp_path / "bridge", tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await human.say(new, "still served")
            await inbound.wait_for(lambda i: "still served" in i.texts())


async def test_a_tombstone_from_someone_not_allowed_changes_nothing_but_a_notice(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice")
    mallory = synapse.register("mallory")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice.user_id])
    async with Human.connect(synapse, alice) as human, Human.connect(synapse, mallory) as other:
        created = await human.client.room_create(
            preset=RoomPreset.private_chat,
            invite=[bot.user_id, mallory.user_id],
            # Room version 12 leaves upgrades to the creators unless the room says otherwise.
            power_level_override={
                "users": {mallory.user_id: 100, bot.user_id: 50},
                "events": {"m.room.tombstone": 100, "m.room.power_levels": 100},
            },
        )
        assert isinstance(created, RoomCreateResponse), created
        old = str(created.room_id)
        await other.join(old)
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=tmp_path / "bridge", tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await human.wait_joined(old, bot.user_id)
            new = upgrade(synapse, mallory, old)
            # Mallory even invites the bot to the new room.
            await other.client.room_invite(new, bot.user_id)
            await bot_notice(human, old, bot.user_id, "not allowed")
            with anyio.move_on_after(3):
                await inbound.wait_for(lambda i: bool(i.moves), within=WAIT)
            assert inbound.moves == []
            assert new not in adapter._connected().client.rooms
            # The conversation stays in the old room.
            await human.say(old, "still here")
            await inbound.wait_for(lambda i: "still here" in i.texts())
