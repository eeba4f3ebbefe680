"""The agent messaging experience through the whole bridge (the Slack fake in agent_view, the
core, the agy simulator): the channel a person looks at reaches agy once with their next DM
message, and a turn with tool calls shows as a plan and ends with its summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chat.slack.conftest import ALICE, BOB, DM, message_event
from tests.chat.slack.fake_slack import BOT_USER, FakeSlack, Message
from tests.chat.slack.test_end_to_end import live_bridge

pytestmark = pytest.mark.anyio
OPS = "C0OPS"


def answers(fake: FakeSlack, ts: str) -> str:
    return fake.answer_text(DM, ts)


def streamed(fake: FakeSlack, ts: str) -> list[Message]:
    return [m for m in fake.thread(DM, ts) if m.stream_args]


async def test_the_context_reaches_agy_once_and_the_turn_shows_its_plan_and_summary(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake = fake_slack
    fake.experience = "agent_view"
    fake.agent_app = True
    fake.agent_view.members[OPS] = {ALICE, BOB, BOT_USER}
    fake.agent_view.names[OPS] = "ops"
    fake.add_message(OPS, BOB, "deploy 42 failed: disk full")
    async with live_bridge(fake, tmp_path):
        await fake.wait_ack(await fake.agent_view.look_at(ALICE, OPS))
        first = fake.next_ts()
        text = "[[write notes.txt disk]] [[tool run_command echo checked]] why did it fail?"
        await fake.push_event(message_event(text, channel=DM, channel_type="im", ts=first))
        await fake.wait_for(lambda: "You said" in answers(fake, first), 60)
        await fake.wait_for(lambda: fake.sessions.status_of(DM, first) == "active", 30)
        second = fake.next_ts()
        await fake.push_event(message_event("thanks", channel=DM, channel_type="im", ts=second))
        await fake.wait_for(lambda: "You said" in answers(fake, second), 60)

    said = answers(fake, first)
    assert "looking at channel #ops (C0OPS)" in said
    assert "deploy 42 failed: disk full" in said
    assert "looking at channel" not in answers(fake, second)  # handed over once
    [message] = streamed(fake, first)
    assert message.stream_args.get("task_display_mode") == "plan"
    assert message.plan_title == "Done: 2 steps"
    assert [t["status"] for t in message.tasks.values()] == ["complete", "complete"]
    stop = [c for c in fake.ok_calls("chat.stopStream") if c.args.get("ts") == message.ts][-1]
    blocks = stop.args["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    summary = " ".join(e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])
    assert "1 file changed" in summary and "notes.txt" in summary
    assert "tokens this turn" in summary
