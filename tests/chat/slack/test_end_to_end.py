"""Slack through the whole bridge: the local Slack fake, the core, and the agy simulator."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.app import Bridge, open_bridge, start_adapters
from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.budget import RateBudget
from bridge.config import build_config
from bridge.core.schedules.clock import Clock
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, FakeSlack, quicker_tiers
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in

pytestmark = pytest.mark.anyio
SIMULATOR = [sys.executable, "-m", "bridge.simulator"]


@dataclass
class Live:
    bridge: Bridge
    fake: FakeSlack
    tmp: Path

    async def answer(self, ts: str, text: str, seconds: float = 30) -> str:
        await self.fake.wait_for(lambda: text in self.fake.answer_text(CHANNEL, ts), seconds)
        return self.fake.answer_text(CHANNEL, ts)

    async def stored(self, ts: str) -> None:
        key = f"slack|{CHANNEL}|{ts}"
        with anyio.fail_after(20):
            while not await self.bridge.store.pending(key):
                await anyio.sleep(0.02)


@asynccontextmanager
async def live_bridge(
    fake: FakeSlack,
    tmp_path: Path,
    extra: dict[str, Any] | None = None,
    clock: Clock | None = None,
    quicker: float | None = None,
    **slack: Any,
) -> AsyncIterator[Live]:
    """The whole bridge on ``fake``; ``quicker``: Slack's rate windows that many times shorter
    for the fake and the app alike (:func:`quicker_tiers`), for a scenario that posts much."""
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))
    budget = None
    if quicker is not None:
        fake.tiers = quicker_tiers(quicker)
        budget = RateBudget(tiers=dict(fake.tiers))
    fake.add_user(ALICE, "alice", "alice@example.org")
    fake.add_user(BOB, "bob")
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path / "data")},
            "agy": {
                "command": SIMULATOR,
                "init_timeout": 30,
                "isolation": "none",
                "pass_env": SIMULATOR_ENV,
            },
            "slack": {
                "bot_token": BOT_TOKEN,
                "app_token": APP_TOKEN,
                "api_url": fake.api_url,
                "allowed_users": [ALICE, BOB],
                **slack,
            },
            "approvals": {"mode": "off"},  # approvals have tests of their own
            **(extra or {}),
        },
        environ={},
    )
    adapter = SlackAdapter(
        config.slack,
        data_dir=config.bridge.data_dir,
        reply_interval=0.05,
        socket_ping_interval=1.0,
        retry_backoff=0.05,
        home_interval=0.3,
        budget=budget,
    )
    async with open_bridge(config, {"slack": adapter}, clock=clock) as bridge:
        async with anyio.create_task_group() as tg:
            await start_adapters(bridge, tg)
            yield Live(bridge, fake, tmp_path)
            await bridge.core.shutdown()
            tg.cancel_scope.cancel()


async def wait_file(path: Path) -> None:
    with anyio.fail_after(30):
        while not path.exists():
            await anyio.sleep(0.02)


async def test_mention_gets_a_streamed_answer_in_its_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("hello [[long 40]] [[chunks 8]]", ts=ts))
        answer = await live.answer(ts, "line 40")
        assert answer.startswith("line 1\nline 2\n")
        # A reply in the thread, no mention: the same conversation.
        ts2 = fake_slack.next_ts()
        await fake_slack.push_event(message_event("and now?", ts=ts2, thread_ts=ts))
        second = await live.answer(ts, "and now?")
        assert "alice (UALICE01, alice@example.org): and now?" in second
        # The status line worked in the channel, and is down once the answer is there.
        statuses = fake_slack.calls_to("assistant.threads.setStatus")
        assert statuses and all(c.status == 200 and c.error is None for c in statuses)
        await fake_slack.wait_for(lambda: fake_slack.status_of(CHANNEL, ts) == "")
        assert len(await live.bridge.store.threads_with_pending()) == 0


async def test_a_message_mid_turn_is_injected_and_marked(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        started, go = tmp_path / "started", tmp_path / "go"
        ts = fake_slack.next_ts()
        text = f"task [[calls 2]] [[touch {started}]] [[wait {go}]]"
        await fake_slack.push_event(mention_event(text, ts=ts))
        await wait_file(started)
        late = fake_slack.next_ts()
        await fake_slack.push_event(
            message_event("use the staging db", user=BOB, ts=late, thread_ts=ts)
        )
        await live.stored(ts)
        go.touch()
        answer = await live.answer(ts, "Injected:")
        assert answer.count("use the staging db") == 1
        await fake_slack.wait_for(lambda: "eyes" in fake_slack.reactions.get((CHANNEL, late), ()))


async def test_the_stop_button_interrupts(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        started = tmp_path / "started"
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event(f"long [[touch {started}]] [[sleep 60]]", ts=ts))
        await wait_file(started)
        await fake_slack.wait_for(
            lambda: any(m.buttons for m in fake_slack.thread(CHANNEL, ts)), 10
        )
        button = next(m for m in fake_slack.thread(CHANNEL, ts) if m.buttons)
        await fake_slack.click(button, ALICE, "agy_bridge_stop")
        answer = await live.answer(ts, "Stopped by")
        assert "interrupted" in answer.lower()


async def test_an_image_reaches_the_agent_as_a_file(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        root = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("I will send a screenshot", ts=root))
        await live.answer(root, "screenshot")
        image = fake_slack.add_file(b"\x89PNG fake image", "screen shot.png", "image/png")
        ts = fake_slack.next_ts()
        await fake_slack.push_event(
            message_event("here", ts=ts, thread_ts=root, subtype="file_share", files=[image])
        )
        answer = await live.answer(root, "open it from there]")
        path = answer.split("[image attached: ", 1)[1].split(" (", 1)[0]
        assert Path(path).read_bytes() == b"\x89PNG fake image"
        assert Path(path).name.endswith("screen_shot.png")


async def test_a_redelivered_event_runs_once(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        ts = fake_slack.next_ts()
        event = mention_event("only once please", ts=ts)
        await fake_slack.push_event(event, event_id="EvSAME")
        await fake_slack.push_event(event, event_id="EvSAME", retry_attempt=1)
        await live.answer(ts, "only once please")
        await anyio.sleep(0.5)
        assert live.fake.answer_text(CHANNEL, ts).count("only once please") == 1


async def test_rate_limits_and_errors_are_retried(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        fake_slack.fail("chat.postMessage", status=429, times=2, retry_after=0)
        fake_slack.fail("chat.update", status=500, times=2)
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("through the storm", ts=ts))
        await live.answer(ts, "through the storm")
        body, _ = live.bridge.metrics.render()
        assert b'agy_bridge_chat_api_retries_total{platform="slack",reason="429"}' in body


async def test_a_stranger_gets_a_notice_and_no_agy(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("let me in", user="USTRANGER", ts=ts))
        await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.postEphemeral")), 10)
        await anyio.sleep(0.3)
        assert live.bridge.core.threads == {}
        assert live.bridge.core.slots.live == 0
        assert await live.bridge.store.processes() == []


async def test_a_file_posted_by_the_agent_lands_in_the_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "plot.png").write_bytes(b"\x89PNG plot")
    extra = {"workspaces": [{"channel": CHANNEL, "path": str(work)}]}
    async with live_bridge(fake_slack, tmp_path, extra) as live:
        ts = fake_slack.next_ts()
        call = '[[mcp bridge_chat post_file {"path": "plot.png", "title": "The plot"}]]'
        await fake_slack.push_event(mention_event(f"share the plot {call}", ts=ts))
        await live.answer(ts, "Tool post_file: uploaded plot.png")
        [upload] = [u for u in fake_slack.uploads.values() if u.get("thread_ts") == ts]
        assert upload["data"] == b"\x89PNG plot" and upload["title"] == "The plot"


async def test_an_agent_session_with_its_tasks_stops_from_slacks_own_button_and_takes_feedback(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """The whole bridge, an app declared as an agent: the turn is a processing session titled
    with the thread's first line, its tool call a task of the streamed answer; Slack's own stop
    button interrupts it; the answer ends the session and carries feedback buttons, whose click
    is stored with the turn and shown by !status."""
    fake_slack.agent_app = True
    async with live_bridge(fake_slack, tmp_path, feedback=True) as live:
        started, go = tmp_path / "started", tmp_path / "go"
        ts = fake_slack.next_ts()
        text = f"check the build [[calls 2]] [[touch {started}]] [[wait {go}]]"
        await fake_slack.push_event(mention_event(text, ts=ts))
        await wait_file(started)
        await fake_slack.wait_for(
            lambda: fake_slack.sessions.status_of(CHANNEL, ts) == "processing", 20
        )
        title = fake_slack.sessions.by_thread[(CHANNEL, ts)].title
        assert title is not None and title.startswith("check the build [[calls 2]]")

        def tasks() -> list[str]:
            return [
                str(t["title"]) for m in fake_slack.thread(CHANNEL, ts) for t in m.tasks.values()
            ]

        await fake_slack.wait_for(lambda: "run_command: echo step 1" in tasks(), 20)
        await fake_slack.wait_ack(await fake_slack.press_session_stop(CHANNEL, ts, ALICE))
        answer = await live.answer(ts, "Interrupted")
        assert "Interrupted" in answer
        await fake_slack.wait_for(lambda: fake_slack.sessions.status_of(CHANNEL, ts) == "active")
        # No status line and no Stop message of the bridge's own.
        assert fake_slack.calls_to("assistant.threads.setStatus") == []
        assert all(not m.buttons for m in fake_slack.thread(CHANNEL, ts))

        # A normal answer next, with its feedback buttons; Bob's 👍 is stored and shown.
        go.touch()
        ts2 = fake_slack.next_ts()
        await fake_slack.push_event(
            message_event("thanks [[reply all green]]", ts=ts2, thread_ts=ts)
        )
        await live.answer(ts, "all green")
        [last] = [m for m in fake_slack.answer_messages(CHANNEL, ts) if "all green" in m.visible]
        await fake_slack.wait_for(lambda: last.feedback_buttons is not None)
        await fake_slack.wait_ack(await fake_slack.click_feedback(last, BOB, positive=True))
        from bridge.core.feedback import feedback_counts

        key = f"slack|{CHANNEL}|{ts}"
        with anyio.fail_after(10):
            while (await feedback_counts(live.bridge.store, key)).positive != 1:
                await anyio.sleep(0.05)
        await fake_slack.push_event(message_event("!status", ts=fake_slack.next_ts(), thread_ts=ts))
        status = await live.answer(ts, "Feedback on answers")
        assert "👍 1, 👎 0" in status
