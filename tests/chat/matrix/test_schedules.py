"""Schedules on a real Synapse: the operator's schedule posts in a room without threads at its
time (as the bridge) and its answer follows in the room; a person's `!schedule add` in the
room runs as them, and `!schedule list` shows the run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from bridge.app import open_bridge, start_adapters
from bridge.chat.matrix import MatrixAdapter
from bridge.config import build_config
from tests.chat.matrix.conftest import FAST_TUNING, Human
from tests.chat.matrix.synapse import Synapse
from tests.chat.matrix.test_end_to_end import content
from tests.core.harness import SIMULATOR_ENV
from tests.core.schedules.fake_clock import FakeClock, utc
from tests.doubles import signed_in

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.slow]


async def test_schedules_in_a_matrix_room(synapse: Synapse, tmp_path: Path) -> None:
    alice = synapse.register(f"alice{os.urandom(3).hex()}", displayname="Alice Liddell")
    bot = synapse.register(f"bot{os.urandom(3).hex()}", displayname="Agy Bot")
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))

    def from_bot(*words: str, without: str = "\0") -> object:
        def match(e: object) -> bool:
            body = content(e).get("body", "")
            return (
                getattr(e, "sender", "") == bot.user_id
                and all(w in body for w in words)
                and without not in body
            )

        return match

    async with Human.connect(synapse, alice) as human:
        room = await human.create_room([bot.user_id])
        config = build_config(
            {
                "bridge": {"data_dir": str(tmp_path / "data")},
                "agy": {
                    "command": [sys.executable, "-m", "bridge.simulator"],
                    "init_timeout": 30,
                    "isolation": "none",
                    "pass_env": SIMULATOR_ENV,
                },
                "matrix": {
                    "homeserver": synapse.base_url,
                    "user_id": bot.user_id,
                    "password": bot.password,
                    "allowed_users": [alice.user_id],
                },
                "approvals": {"mode": "off"},
                "schedules": [
                    {
                        "name": "standup",
                        "cron": "0 8 * * *",
                        "room": room,
                        "prompt": "what changed yesterday? [[reply two merges]]",
                    }
                ],
            },
            environ={},
        )
        adapter = MatrixAdapter(config.matrix, data_dir=config.bridge.data_dir, tuning=FAST_TUNING)
        clock = FakeClock(utc("2027-01-04 07:59"))
        async with open_bridge(config, {"matrix": adapter}, clock=clock) as bridge:
            async with anyio.create_task_group() as tg:
                await start_adapters(bridge, tg)
                await human.wait_joined(room, bot.user_id)
                await clock.idle()
                await clock.move_to(utc("2027-01-04 08:00"))
                await human.wait_event(room, from_bot("schedule standup", "asks:"), within=60)
                await human.wait_event(room, from_bot("two merges", without="asks:"), within=60)

                await human.say(room, '!schedule add "5 8 * * *" status [[reply all green]]')
                added = await human.wait_event(room, from_bot("Scheduled `"), within=60)
                assert "for Alice Liddell" in content(added)["body"]
                await clock.move_to(utc("2027-01-04 08:05"))
                asked = await human.wait_event(room, from_bot("(schedule ", "asks:"), within=60)
                assert "Alice Liddell" in content(asked)["body"]
                await human.wait_event(room, from_bot("all green", without="asks:"), within=60)
                await human.say(room, "!schedule list")
                listing = await human.wait_event(room, from_bot("Schedules in this"), within=60)
                body = content(listing)["body"]
                assert "standup" in body and "by the bridge" in body
                assert "2027-01-04 08:00 UTC: done" in body
                await bridge.core.shutdown()
                tg.cancel_scope.cancel()
