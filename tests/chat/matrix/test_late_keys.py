"""Keys that run out or arrive late, against a real Synapse: the fallback key, stored events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.chat.matrix import MatrixAdapter

from .conftest import FAST_TUNING, Human, RecordingInbound, bot_config, running_adapter
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
    async with Human.connect(synapse, alice, tmp_path / "alice-store") as human:
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
