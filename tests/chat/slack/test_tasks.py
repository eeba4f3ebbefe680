"""Tool progress as the stream's own tasks (``task_update`` chunks): one task per tool call
with its one-line summary, complete or error at its end; no tool lines of our own where the
stream carries them; a rolled-over stream carries the tasks still running."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome
from tests.chat.slack.conftest import (
    CHANNEL,
    RecordingInbound,
    control_message,
    mention_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack, Message

pytestmark = pytest.mark.anyio


async def mention(fake: FakeSlack, text: str = "go") -> tuple[ThreadRef, str]:
    ts = fake.next_ts()
    await fake.wait_ack(await fake.push_event(mention_event(text, ts=ts)))
    return ThreadRef(platform="slack", channel=CHANNEL, thread=ts), ts


def tasks(message: Message) -> list[tuple[str, str]]:
    return [(str(t["title"]), str(t["status"])) for t in message.tasks.values()]


def streamed(fake: FakeSlack, ts: str) -> list[Message]:
    return [m for m in fake.thread(CHANNEL, ts) if m.stream_args]


async def test_tool_calls_are_tasks_of_the_answers_stream(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake_slack)
        async with adapter.open_reply(thread, ts) as reply:
            # Tools before any text: the stream starts with their tasks.
            await reply.tool(ToolActivity(name="run_command", summary="ls -la"))
            await fake_slack.wait_for(lambda: bool(streamed(fake_slack, ts)))
            [message] = streamed(fake_slack, ts)
            await fake_slack.wait_for(
                lambda: tasks(message) == [("run_command: ls -la", "in_progress")]
            )
            await reply.tool(ToolActivity(name="run_command", summary="ls -la", state="DONE"))
            await reply.tool(
                ToolActivity(name="read_file", summary="a.cfg", state="ERROR", error="no file")
            )
            await reply.append("All good.")
            await fake_slack.wait_for(lambda: "All good." in message.visible)
            await reply.finish(TurnOutcome(final_text="All good."))

    [message] = fake_slack.thread(CHANNEL, ts)  # no Working… message of our own
    assert message.visible == "All good."
    assert tasks(message) == [("run_command: ls -la", "complete"), ("read_file: a.cfg", "error")]
    assert [t.get("details") for t in message.tasks.values()] == [None, "no file"]
    assert fake_slack.ok_calls("chat.update") == []  # the end rode on chat.stopStream


async def test_a_rolled_over_stream_carries_the_tasks_still_running(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    async with running_adapter(fake_slack, inbound, tmp_path, stream_max_age=0.3) as adapter:
        thread, ts = await mention(fake_slack)
        async with adapter.open_reply(thread, ts) as reply:
            await reply.tool(ToolActivity(name="a", summary="one"))
            await reply.tool(ToolActivity(name="a", summary="one", state="DONE"))
            await reply.tool(ToolActivity(name="b", summary="two"))
            for n in range(6):
                await reply.append(f"part {n} " * 20)
                await anyio.sleep(0.1)
            await fake_slack.wait_for(lambda: len(streamed(fake_slack, ts)) >= 2)
            await reply.tool(ToolActivity(name="b", summary="two", state="DONE"))
            first, *later = streamed(fake_slack, ts)
            await fake_slack.wait_for(lambda: ("b: two", "complete") in tasks(later[-1]))
            # The closed message keeps the finished task (and b as it was when it closed);
            # every later one starts with the task still running, never the finished one.
            assert tasks(first) == [("a: one", "complete"), ("b: two", "in_progress")]
            assert all(tasks(m)[0][0] == "b: two" for m in later)
            assert all(("a: one", "complete") not in tasks(m) for m in later)
            text = "".join(f"part {n} " * 20 for n in range(6))
            await reply.finish(TurnOutcome(final_text=text))

    # The final answer is whole (rewritten into as few messages as it needs).
    assert fake_slack.answer_text(CHANNEL, ts) == text.strip()


async def test_without_sessions_the_stop_message_carries_no_tool_lines(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake_slack)
        async with adapter.open_reply(thread, ts) as reply:
            await fake_slack.wait_for(lambda: control_message(fake_slack, CHANNEL, ts) is not None)
            await reply.tool(ToolActivity(name="run_command", summary="make"))
            await fake_slack.wait_for(lambda: bool(streamed(fake_slack, ts)))
            control = control_message(fake_slack, CHANNEL, ts)
            assert control is not None and "make" not in control.visible
            await reply.append("Built.")
            await reply.finish(TurnOutcome(final_text="Built."))

    # The Stop message goes at the end; the tasks stay with the answer.
    [answer] = fake_slack.thread(CHANNEL, ts)
    assert answer.visible == "Built."
    # A task still running when the turn ends ends with it.
    assert tasks(answer) == [("run_command: make", "complete")]


def test_the_plan_title_follows_the_steps_and_comes_again_on_a_new_stream() -> None:
    from bridge.chat.slack.tasks import TaskBoard

    board = TaskBoard()
    board.record(ToolActivity(name="run_command", summary="pytest"))
    chunks, versions = board.pending()
    assert chunks[0] == {"type": "plan_update", "title": "Working: 0 of 1 step done"}
    board.sent(versions)
    board.record(ToolActivity(name="run_command", summary="pytest", state="DONE"))
    chunks, versions = board.pending()
    assert chunks[0]["title"] == "Working: 1 of 1 step done"
    board.sent(versions)
    assert board.pending()[0] == []
    board.new_stream()  # a new message: its plan needs the title again
    assert board.pending()[0] == [{"type": "plan_update", "title": "Working: 1 of 1 step done"}]
    board.end(failed=False)
    assert board.pending()[0][0] == {"type": "plan_update", "title": "Done: 1 step"}
    timeline = TaskBoard(mode="timeline")
    timeline.record(ToolActivity(name="run_command", summary="pytest"))
    assert [c["type"] for c in timeline.pending()[0]] == ["task_update"]
