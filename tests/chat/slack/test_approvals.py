"""Approvals in Slack: Block Kit buttons, ephemeral refusals, typed reasons, edits (the Slack
fake, the core, and the agy simulator running the PreToolUse hook)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.chat.slack.approvals import (
    ALWAYS_ACTION_ID,
    APPROVE_ACTION_ID,
    DENY_ACTION_ID,
    NOT_APPROVER_TEXT,
)
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, FakeSlack, Message
from tests.chat.slack.test_end_to_end import Live, live_bridge
from tests.doubles import signed_in

pytestmark = pytest.mark.anyio
EVE = "UEVE0001"  # in no allowed list


def approvals(**settings: Any) -> dict[str, Any]:
    return {"approvals": {"mode": "ask", "timeout": 60, **settings}}


def requests(fake: FakeSlack, thread_ts: str) -> list[Message]:
    """The thread's approval requests, oldest first (decided ones too)."""
    return [
        m
        for m in fake.thread(CHANNEL, thread_ts)
        if "Approval needed" in m.visible or any(b in m.visible for b in ("Approved", "Denied"))
    ]


async def request(fake: FakeSlack, thread_ts: str, count: int = 1) -> Message:
    await fake.wait_for(lambda: len(requests(fake, thread_ts)) >= count, 30)
    return requests(fake, thread_ts)[count - 1]


async def click(fake: FakeSlack, message: Message, user: str, action_id: str) -> None:
    await fake.wait_ack(await fake.click(message, user, action_id))


def workdir(live: Live) -> Path:
    [worker] = live.bridge.core.threads.values()
    assert worker.place is not None
    return worker.place.workdir


async def test_approve_runs_and_the_request_says_who_and_when(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch ok.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        assert "touch ok.txt" in asked.visible and "alice" in asked.visible
        ids = [b["action_id"] for b in asked.buttons]
        assert ids == [APPROVE_ACTION_ID, ALWAYS_ACTION_ID, DENY_ACTION_ID]
        assert not (workdir(live) / "ok.txt").exists()
        await click(fake_slack, asked, BOB, APPROVE_ACTION_ID)
        await live.answer(ts, "You said")
        assert (workdir(live) / "ok.txt").exists()
        assert asked.buttons == [], "the buttons go once decided"
        assert "Approved by bob" in asked.visible and "UTC" in asked.visible


async def test_deny_with_a_typed_reason(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch no.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        reply = fake_slack.next_ts()
        await fake_slack.push_event(
            message_event("deny 1: use the staging db", user=BOB, ts=reply, thread_ts=ts)
        )
        answer = await live.answer(ts, "use the staging db")
        assert "denied by bob: use the staging db" in answer
        assert not (workdir(live) / "no.txt").exists()
        assert "Denied by bob" in asked.visible and "use the staging db" in asked.visible


async def test_a_click_by_someone_who_may_not_approve_changes_nothing(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals(approvers=[BOB])) as live:
        fake_slack.add_user(EVE, "eve")
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch x.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        await click(fake_slack, asked, ALICE, APPROVE_ACTION_ID)  # allowed, not an approver
        await click(fake_slack, asked, EVE, APPROVE_ACTION_ID)  # not even allowed here
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) >= 2)
        assert {e["user"] for e in fake_slack.ephemerals} == {ALICE, EVE}
        assert all(e["text"] == NOT_APPROVER_TEXT for e in fake_slack.ephemerals)
        assert asked.buttons, "still waiting"
        assert not (workdir(live) / "x.txt").exists()
        await click(fake_slack, asked, BOB, DENY_ACTION_ID)
        await live.answer(ts, "denied by bob")
        assert not (workdir(live) / "x.txt").exists()


async def test_always_in_this_thread(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command echo hi]]", ts=ts))
        asked = await request(fake_slack, ts)
        await click(fake_slack, asked, BOB, ALWAYS_ACTION_ID)
        await live.answer(ts, "You said")
        assert "Approved always in this thread by bob" in asked.visible
        again = fake_slack.next_ts()
        await fake_slack.push_event(
            message_event("[[tool run_command echo hi]] again", ts=again, thread_ts=ts)
        )
        await live.answer(ts, "again")
        assert len(requests(fake_slack, ts)) == 1, "ran without asking"
        # Another thread asks again.
        other = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command echo hi]]", ts=other))
        elsewhere = await request(fake_slack, other)
        await click(fake_slack, elsewhere, BOB, DENY_ACTION_ID)
        await live.answer(other, "denied by bob")


async def test_a_chained_command_offers_no_always(fake_slack: FakeSlack, tmp_path: Path) -> None:
    settings = approvals(allow_commands=["echo *"])
    async with live_bridge(fake_slack, tmp_path, settings) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(
            mention_event("[[tool run_command echo a && touch c.txt]]", ts=ts)
        )
        asked = await request(fake_slack, ts)
        assert [b["action_id"] for b in asked.buttons] == [APPROVE_ACTION_ID, DENY_ACTION_ID]
        await click(fake_slack, asked, BOB, DENY_ACTION_ID)
        await live.answer(ts, "denied by bob")
        assert not (workdir(live) / "c.txt").exists()


async def test_timeout_denies_and_says_so(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals(timeout=1)) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch t.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        answer = await live.answer(ts, "no one in the chat approved it")
        assert "no one answered in time" in asked.visible and asked.buttons == []
        assert "denied" in answer
        assert not (workdir(live) / "t.txt").exists()


async def test_stop_while_waiting(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch s.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        stop = fake_slack.next_ts()
        await fake_slack.push_event(message_event("!stop", user=BOB, ts=stop, thread_ts=ts))
        await live.answer(ts, "Interrupted")
        assert "the turn was stopped" in asked.visible
        assert not (workdir(live) / "s.txt").exists()


@pytest.mark.slow
async def test_sigkill_while_waiting_then_the_request_reads_as_expired(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "config.toml"
    command = json.dumps([sys.executable, "-m", "bridge.simulator"])
    config.write_text(
        f'[bridge]\ndata_dir = "data"\n[approvals]\nmode = "ask"\n'
        f"[agy]\ncommand = {command}\ninit_timeout = 30\n"
        # The simulator's home is its only state directory, passed to it by name.
        'state_dirs = []\npass_env = ["AGY_SIM_HOME"]\n'
        f'[slack]\napi_url = "{fake_slack.api_url}"\nallowed_users = ["{ALICE}", "{BOB}"]\n'
        f'[[workspaces]]\npath = "{work}"\n'
    )
    env = {
        **os.environ,
        "AGY_SIM_HOME": str(signed_in(tmp_path / "home")),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_APP_TOKEN": APP_TOKEN,
    }
    argv = [sys.executable, "-m", "bridge", "run", "--config", str(config)]
    first = await anyio.open_process(argv, env=env, stderr=subprocess.DEVNULL)
    try:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch k.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        first.kill()  # SIGKILL: no chance to tidy up
        await first.wait()
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    second = await anyio.open_process(argv, env=env, stderr=subprocess.DEVNULL)
    try:
        # The request is edited; or, when the bridge died before it noted which message asked,
        # the thread gets the same words as a new message.
        def expired() -> list[Message]:
            return [m for m in fake_slack.thread(CHANNEL, ts) if "Expired" in m.visible]

        await fake_slack.wait_for(lambda: bool(expired()), 60)
        assert "the bridge restarted while it waited" in expired()[0].visible
        assert "touch k.txt" in expired()[0].visible
        if asked.buttons:  # not edited: a late click is refused, and nothing runs
            await click(fake_slack, asked, BOB, APPROVE_ACTION_ID)
            await fake_slack.wait_for(lambda: bool(fake_slack.ephemerals), 30)
        else:
            assert expired() == [asked]
        assert not (work / "k.txt").exists()
    finally:
        second.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await second.wait()


async def test_a_very_long_command_is_still_asked_within_slacks_block_limits(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    long_command = "echo " + "x" * 5000 + " > long.txt"
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event(f"[[tool run_command {long_command}]]", ts=ts))
        asked = await request(fake_slack, ts)  # the fake refuses a section over 3,000 chars
        assert "echo xxx" in asked.visible
        await click(fake_slack, asked, BOB, APPROVE_ACTION_ID)
        await live.answer(ts, "You said")
        assert (workdir(live) / "long.txt").exists()
