"""A schedule on the console (`make run`'s terminal chat): at its time its prompt and the
agent's answer appear in the terminal, as the bridge's turn."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import anyio
import pytest

from bridge.app import open_bridge
from bridge.chat.console.adapter import ConsoleAdapter
from bridge.config import build_config
from tests.core.harness import SIMULATOR_ENV
from tests.core.schedules.fake_clock import FakeClock, utc
from tests.doubles import signed_in

pytestmark = pytest.mark.anyio


async def test_a_schedule_runs_in_the_console(tmp_path: Path) -> None:
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path / "data")},
            "agy": {
                "command": [sys.executable, "-m", "bridge.simulator"],
                "init_timeout": 30,
                "isolation": "none",
                "pass_env": SIMULATOR_ENV,
            },
            "approvals": {"mode": "off"},
            "schedules": [
                {
                    "name": "tidy",
                    "cron": "*/10 * * * *",
                    "chat": "console",
                    "channel": "local",
                    "prompt": "tidy the notes [[reply notes tidied]]",
                }
            ],
        },
        environ={},
    )
    out = io.StringIO()
    adapter = ConsoleAdapter(user="ada", stdin=io.StringIO(), stdout=out)
    clock = FakeClock(utc("2027-01-04 07:55"))
    async with open_bridge(config, {"console": adapter}, clock=clock) as bridge:
        await bridge.core.recover()  # as start_adapters does once the chat is connected
        await clock.idle()
        assert "tidy" not in out.getvalue()
        await clock.move_to(utc("2027-01-04 08:00"))
        assert "**schedule tidy** asks:" in out.getvalue()
        with anyio.fail_after(30):
            while out.getvalue().count("notes tidied") < 2:  # the prompt, then the answer
                await anyio.sleep(0.05)
        await clock.move_to(utc("2027-01-04 08:05"))
        assert out.getvalue().count("asks:") == 1
        await bridge.core.shutdown()
