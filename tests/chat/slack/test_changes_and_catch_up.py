"""Slack messages that change or go missing, through the fake, the bridge and the simulator:
an edited waiting message runs once with its new text, a deleted one never runs, and what was
written while the connection was down is answered once after the reconnect."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.chat.slack.conftest import CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import BOT_USER, FakeSlack
from tests.chat.slack.test_end_to_end import Live, live_bridge, wait_file

pytestmark = pytest.mark.anyio


async def pending_texts(live: Live, ts: str) -> list[str]:
    return [m.text for m in await live.bridge.store.pending(f"slack|{CHANNEL}|{ts}")]


async def until_texts(live: Live, ts: str, texts: list[str]) -> None:
    with anyio.fail_after(20):
        while await pending_texts(live, ts) != texts:
            await anyio.sleep(0.02)


async def turns(live: Live) -> int:
    [row] = await live.bridge.store._db.fetch("SELECT COUNT(*) AS n FROM turns")
    return int(row["n"])


async def busy_thread(fake: FakeSlack, tmp_path: Path) -> tuple[str, Path]:
    """A thread whose first turn holds, past its last hook call, until the returned file
    exists (a command that waits for it): what is written meanwhile waits for the next turn."""
    started, go = tmp_path / "started", tmp_path / "go"
    ts = fake.next_ts()
    hold = f"[[tool run_command until [ -e {go} ]; do sleep 0.05; done]]"
    await fake.write(mention_event(f"task [[touch {started}]] {hold}", ts=ts))
    await wait_file(started)
    return ts, go


async def test_an_edited_waiting_message_runs_once_with_its_new_text(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        ts, go = await busy_thread(fake_slack, tmp_path)
        late = fake_slack.next_ts()
        await fake_slack.write(message_event("use the staging db", ts=late, thread_ts=ts))
        await until_texts(live, ts, ["use the staging db"])
        # Edited, mentioning the app: Slack sends message_changed and the app_mention again.
        await fake_slack.edit(CHANNEL, late, f"<@{BOT_USER}> use the production db")
        await until_texts(live, ts, ["use the production db"])
        go.touch()
        answer = await live.answer(ts, "use the production db")
        assert "staging" not in answer
        assert answer.count("use the production db") == 1
        assert await turns(live) == 2


async def test_a_deleted_waiting_message_never_runs(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        ts, go = await busy_thread(fake_slack, tmp_path)
        late = fake_slack.next_ts()
        await fake_slack.write(message_event("drop the table", ts=late, thread_ts=ts))
        await until_texts(live, ts, ["drop the table"])
        await fake_slack.delete(CHANNEL, late)
        await until_texts(live, ts, [])
        notice = "deleted a message before the agent read it"
        await fake_slack.wait_for(lambda: notice in fake_slack.answer_text(CHANNEL, ts), 20)
        go.touch()
        await live.answer(ts, "task")
        await fake_slack.wait_for(lambda: fake_slack.status_of(CHANNEL, ts) == "", 20)
        assert await turns(live) == 1
        assert "drop the table" not in fake_slack.answer_text(CHANNEL, ts)


async def test_what_was_written_while_the_connection_was_down_is_answered_once(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path, allowed_channels=[CHANNEL]) as live:
        ts = fake_slack.next_ts()
        await fake_slack.write(mention_event("first", ts=ts))
        await live.answer(ts, "first")
        connections = fake_slack.socket_connections
        await fake_slack.lose_connection()
        late = fake_slack.next_ts()
        await fake_slack.write(message_event("missed me?", ts=late, thread_ts=ts))
        top = fake_slack.next_ts()
        await fake_slack.write(mention_event("a new question", ts=top))
        assert len(fake_slack.undelivered) == 2  # the fake kept them from the bridge
        fake_slack.restore_connection()
        await fake_slack.wait_for(lambda: fake_slack.socket_connections > connections, 30)
        answer = await live.answer(ts, "missed me?")
        assert answer.count("missed me?") == 1
        assert "a new question" in await live.answer(top, "a new question")
        # Slack redelivers one of them late after all: it still runs once.
        await fake_slack.push_event(fake_slack.undelivered[0])
        await fake_slack.wait_for(lambda: fake_slack.status_of(CHANNEL, ts) == "", 20)
        assert fake_slack.answer_text(CHANNEL, ts).count("missed me?") == 1
        [row] = await live.bridge.store._db.fetch(
            "SELECT COUNT(*) AS n FROM inbox WHERE message_id = ?", (late,)
        )
        assert row["n"] == 1
