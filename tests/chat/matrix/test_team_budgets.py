"""Budgets as a Matrix room sees them, on a real Synapse (issue 43): the warning once, then a
refused message kept as refused, with the budget's words in the room."""

from __future__ import annotations

import os
import sys
import time
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
from tests.doubles import signed_in

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.slow]


async def test_warned_then_refused_in_a_room(synapse: Synapse, tmp_path: Path) -> None:
    alice = synapse.register(f"alice{os.urandom(3).hex()}", displayname="Alice Liddell")
    bot = synapse.register(f"bot{os.urandom(3).hex()}", displayname="Agy Bot")
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path / "data"), "timezone": "Europe/Paris"},
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
            "budgets": [{"scope": "user", "period": "week", "limit_tokens": 1000}],
        },
        environ={},
    )
    adapter = MatrixAdapter(config.matrix, data_dir=config.bridge.data_dir, tuning=FAST_TUNING)

    def from_bot(text: str) -> object:
        return lambda e: (
            getattr(e, "sender", "") == bot.user_id and text in content(e).get("body", "")
        )

    async with Human.connect(synapse, alice) as human:
        room = await human.create_room([bot.user_id])
        async with open_bridge(config, {"matrix": adapter}) as bridge:
            async with anyio.create_task_group() as tg:
                await start_adapters(bridge, tg)
                await human.wait_joined(room, bot.user_id)

                async def spend(tokens: int, turn: int) -> None:
                    await bridge.store.database.execute(
                        "INSERT INTO usage_shares (turn_id, person, person_name, thread_key,"
                        " platform, channel, model, at, input_tokens, output_tokens,"
                        " thinking_tokens, cache_read_tokens, total_tokens, cost) VALUES"
                        " (?, ?, 'Alice', 'matrix|x|', 'matrix', ?, 'default', ?, ?, 0, 0, 0,"
                        " ?, NULL)",
                        (-turn, alice.user_id, room, time.time(), tokens, tokens),
                    )

                await spend(850, 1)
                await human.say(room, "hello [[reply first answer]]")
                warned = await human.wait_event(room, from_bot("is at 85%"), within=60)
                assert (
                    "Budget `user-week` (Alice Liddell's weekly budget)" in content(warned)["body"]
                )
                await human.wait_event(room, from_bot("first answer"), within=60)

                await spend(1000, 2)
                late = await human.say(room, "one more [[reply never]]")
                refused = await human.wait_event(room, from_bot("was not sent"), within=60)
                body = content(refused)["body"]
                assert "Alice Liddell: your message was not sent to the agent." in body
                assert "this week; it resets " in body and ("CET" in body or "CEST" in body)
                rows = await bridge.store.database.fetch(
                    "SELECT state FROM inbox WHERE message_id = ?", (late,)
                )
                assert [r["state"] for r in rows] == ["refused"]
                await bridge.core.shutdown()
                tg.cancel_scope.cancel()
