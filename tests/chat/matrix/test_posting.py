"""A cut-off notice said once per key on Matrix (bridge/chat/matrix/posting.py), against the
real homeserver: told, the bridge dies before recording it, starts again with the same files
(the same device: a restart, or an instance taking the leader's role over), and tells it again
under the same transaction ids. Synapse answers with the first event and posts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from nio.events import Event

from bridge.chat.matrix import MatrixAdapter
from bridge.core.events import ThreadRef
from tests.chat.matrix.conftest import (
    FAST_TUNING,
    Human,
    RecordingInbound,
    bot_config,
    cross_sign,
    running_adapter,
)
from tests.chat.matrix.synapse import Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]

KEY = "cut-off-7-1700000000000"


def body(event: Event) -> str:
    return str(event.source.get("content", {}).get("body") or "")


async def test_a_notice_told_again_after_a_restart_arrives_once(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice", displayname="Alice Liddell")
    bot = synapse.register("bot", displayname="Agy Bot")
    config = bot_config(synapse, bot, allowed_users=[alice.user_id])
    data_dir = tmp_path / "bridge"
    async with Human.connect(synapse, alice, tmp_path / "alice-store") as human:
        await cross_sign(human, tmp_path / "alice-cross-signing.json")
        room = await human.create_room([bot.user_id], encrypted=True)
        thread = ThreadRef(platform="matrix", channel=room)
        first = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(first, RecordingInbound()):
            await human.wait_joined(room, bot.user_id)
            assert await first.tell_once(thread, KEY, "turn 7 was cut off (told first)")
        # Killed before the turn was recorded as told: the next start tells it again.
        again = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(again, RecordingInbound()):
            await again.tell_once(thread, KEY, "turn 7 was cut off (told again)")
            await again.tell_once(thread, "cut-off-8-1700000000500", "turn 8 was cut off")
            await human.wait_event(room, lambda e: body(e) == "turn 8 was cut off")
        said = [body(e) for e in human.timeline[room] if e.sender == bot.user_id and body(e)]
        assert said == ["turn 7 was cut off (told first)", "turn 8 was cut off"]
