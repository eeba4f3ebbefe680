"""`agy-bridge run` as an operator runs it: Slack (the local fake), the admin endpoint, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import anyio
import pytest

from tests.chat.slack.conftest import ALICE, CHANNEL, mention_event
from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.doubles import signed_in
from tests.ports import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_run_serves_slack_and_stops_gracefully_on_sigterm(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake_slack.add_user(ALICE, "alice")
    admin_port = free_port()
    config = tmp_path / "config.toml"
    command = json.dumps([sys.executable, "-m", "bridge.simulator"])
    # isolation "none": the test signals the agent through a file outside its workspace.
    config.write_text(
        f'[bridge]\ndata_dir = "data"\n[approvals]\nmode = "off"\n'
        f'[agy]\ncommand = {command}\nisolation = "none"\npass_env = ["AGY_SIM_HOME"]\n'
        f'[slack]\napi_url = "{fake_slack.api_url}"\nallowed_users = ["{ALICE}"]\n'
        f"[admin]\nenabled = true\nport = {admin_port}\n"
    )
    env = {
        **os.environ,
        "AGY_SIM_HOME": str(signed_in(tmp_path / "home")),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_APP_TOKEN": APP_TOKEN,
    }
    process = await anyio.open_process(
        [sys.executable, "-m", "bridge", "run", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as http:
            with anyio.fail_after(30):
                while True:
                    try:
                        async with http.get(f"http://127.0.0.1:{admin_port}/healthz") as r:
                            health = await r.json()
                            if r.status == 200 and health.get("adapters") == ["slack"]:
                                break
                    except aiohttp.ClientError:
                        pass
                    await anyio.sleep(0.1)
            ts = fake_slack.next_ts()
            await fake_slack.push_event(mention_event("hello from run", ts=ts))
            await fake_slack.wait_for(
                lambda: "hello from run" in fake_slack.answer_text(CHANNEL, ts), 30
            )
            async with http.get(f"http://127.0.0.1:{admin_port}/metrics") as r:
                metrics = await r.text()
            assert 'agy_bridge_turns_total{platform="slack",state="done"} 1.0' in metrics
            started = tmp_path / "started"
            ts2 = fake_slack.next_ts()
            await fake_slack.push_event(
                mention_event(f"long [[touch {started}]] [[sleep 60]]", ts=ts2)
            )
            with anyio.fail_after(30):
                while not started.exists():
                    await anyio.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            code = await process.wait()
        assert code == 0
        # The running turn was told it ended because the bridge stopped.
        answer = fake_slack.answer_text(CHANNEL, ts2)
        assert "shutting down" in answer
        assert process.stderr is not None
        log = (await process.stderr.receive(1 << 20)).decode()
        for secret in (BOT_TOKEN, APP_TOKEN):
            assert secret not in log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
