"""A turn's tool calls as Slack's plan (``task_display_mode`` plan, ``plan_update`` chunks),
and the compact summary (files changed, tokens used) that closes the answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome
from tests.chat.slack.conftest import CHANNEL, RecordingInbound, mention_event, running_adapter
from tests.chat.slack.fake_slack import FakeSlack, Message

pytestmark = pytest.mark.anyio


async def mention(fake: FakeSlack) -> tuple[ThreadRef, str]:
    ts = fake.next_ts()
    await fake.wait_ack(await fake.push_event(mention_event("fix it", ts=ts)))
    return ThreadRef(platform="slack", channel=CHANNEL, thread=ts), ts


def streamed(fake: FakeSlack, ts: str) -> list[Message]:
    return [m for m in fake.thread(CHANNEL, ts) if m.stream_args]


def chunk_types(fake: FakeSlack) -> list[str]:
    types = []
    for call in fake.ok_calls("chat.startStream") + fake.ok_calls("chat.appendStream"):
        chunks = call.args.get("chunks") or []
        chunks = json.loads(chunks) if isinstance(chunks, str) else chunks
        types += [c.get("type") for c in chunks]
    return types


def context_text(message: Message) -> str:
    found = [b for b in message.blocks or [] if b.get("type") == "context"]
    return " ".join(str(e.get("text")) for b in found for e in b.get("elements", []))


OUTCOME = TurnOutcome(
    final_text="Fixed the flaky test.",
    files_changed=["src/app.py", "tests/test_app.py"],
    tokens=1834,
)


async def tool_calls(reply: Any) -> None:
    await reply.tool(ToolActivity(name="run_command", summary="pytest -x"))
    await reply.tool(ToolActivity(name="run_command", summary="pytest -x", state="DONE"))
    await reply.tool(ToolActivity(name="write_to_file", summary="src/app.py"))


async def planned(fake: FakeSlack, reply: Any, ts: str) -> Message:
    """The tool calls, and the one message whose stream shows them."""
    await tool_calls(reply)
    await fake.wait_for(lambda: bool(streamed(fake, ts)))
    [message] = streamed(fake, ts)
    return message


async def test_tool_calls_stream_as_a_plan_and_the_answer_ends_with_a_summary(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    async with running_adapter(fake, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake)
        async with adapter.open_reply(thread, ts) as reply:
            message = await planned(fake, reply, ts)
            await fake.wait_for(lambda: message.plan_title == "Working: 1 of 2 steps done")
            await reply.append("Fixed the flaky test.")
            await fake.wait_for(lambda: "Fixed" in message.visible)
            await reply.finish(OUTCOME)

    assert message.stream_args.get("task_display_mode") == "plan"
    assert message.plan_title == "Done: 2 steps"
    assert [t["status"] for t in message.tasks.values()] == ["complete", "complete"]
    [stop] = fake.ok_calls("chat.stopStream")
    assert stop.args.get("blocks")
    summary = context_text(message)
    assert "2 files changed: `src/app.py`, `tests/test_app.py`" in summary
    assert "1,834 tokens this turn" in summary
    assert not fake.ok_calls("chat.update")  # the summary rode on the stop, no edit


async def test_an_answer_streamed_whole_before_the_end_keeps_its_plan(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """agy's text ends with a line break, the final answer is trimmed: when the whole text was
    streamed before the turn ended (a loaded bridge, a slow result), the final stop differs
    from it by that break alone. It used to be rewritten with chat.update, which takes the
    stream's task cards away (seen 1 in 20 runs of tests/chat/slack/test_agent_view_end_to_end
    under load)."""
    fake = fake_slack
    async with running_adapter(fake, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake)
        async with adapter.open_reply(thread, ts) as reply:
            message = await planned(fake, reply, ts)
            await reply.append("Fixed the flaky test.\n")
            await fake.wait_for(
                lambda: (message.markdown or "").endswith("Fixed the flaky test.\n")
            )
            await reply.finish(OUTCOME.model_copy(update={"final_text": "Fixed the flaky test.\n"}))

    assert [t["status"] for t in message.tasks.values()] == ["complete", "complete"]
    assert message.plan_title == "Done: 2 steps"
    assert "1,834 tokens this turn" in context_text(message)
    assert not fake.ok_calls("chat.update")  # the stop closed it: no edit


async def test_a_failed_turn_says_where_the_plan_stopped(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    async with running_adapter(fake, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake)
        async with adapter.open_reply(thread, ts) as reply:
            await tool_calls(reply)
            await fake.wait_for(lambda: bool(streamed(fake, ts)))
            await reply.finish(TurnOutcome(error="quota reached", tokens=12))
        [message] = streamed(fake, ts)

    assert message.plan_title == "Stopped after 2 of 2 steps"
    assert [t["status"] for t in message.tasks.values()] == ["complete", "error"]


async def test_a_timeline_sends_no_plan_title(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    async with running_adapter(fake, inbound, tmp_path, task_display="timeline") as adapter:
        thread, ts = await mention(fake)
        async with adapter.open_reply(thread, ts) as reply:
            await tool_calls(reply)
            await fake.wait_for(lambda: bool(streamed(fake, ts)))
            await reply.append("done")
            await reply.finish(OUTCOME)
        [message] = streamed(fake, ts)

    assert message.stream_args.get("task_display_mode") == "timeline"
    assert "plan_update" not in chunk_types(fake)
    assert len(message.tasks) == 2


async def test_an_answer_that_is_not_streamed_carries_the_summary_too(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    async with running_adapter(fake, inbound, tmp_path, streaming=False) as adapter:
        thread, ts = await mention(fake)
        async with adapter.open_reply(thread, ts) as reply:
            await reply.finish(OUTCOME)

    [answer] = fake.answer_messages(CHANNEL, ts)
    assert "Fixed the flaky test." in answer.visible
    assert "1,834 tokens this turn" in context_text(answer)


async def test_a_turn_that_changed_nothing_and_counted_nothing_has_no_summary(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    async with running_adapter(fake, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake)
        async with adapter.open_reply(thread, ts) as reply:
            await reply.finish(TurnOutcome(final_text="Nothing to do."))

    [answer] = fake.answer_messages(CHANNEL, ts)
    assert answer.blocks is None and answer.markdown == "Nothing to do."
