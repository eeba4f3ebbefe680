"""The live reply against the fake: streaming, stream expiry, edit fallback, the final rewrite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from bridge.chat.common.markdown import open_fence_at_end
from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.reply import STATUS_REACTION, Recipient, ReplySettings, SlackLiveReply
from bridge.core.events import LiveReply, ThreadRef, ToolActivity, TurnOutcome
from tests.chat.slack.conftest import (
    CHANNEL,
    DM,
    RecordingInbound,
    mention_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def start_turn(
    fake: FakeSlack, adapter: SlackAdapter, text: str = "go"
) -> AsyncIterator[tuple[ThreadRef, str, LiveReply]]:
    """A mention from Alice (so the adapter knows the stream's recipient), then its reply."""
    ts = fake.next_ts()
    await fake.wait_ack(await fake.push_event(mention_event(text, ts=ts)))
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=ts)
    async with adapter.open_reply(thread, ts) as reply:
        await reply.ready()  # type: ignore[attr-defined]
        yield thread, ts, reply


async def test_streams_the_answer_then_finishes_with_the_whole_text(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            assert fake_slack.reactions[(CHANNEL, ts)] == {STATUS_REACTION}

            await reply.append("Looking at the ")
            await reply.append("repository now.")
            await fake_slack.wait_for(
                lambda: fake_slack.answer_text(CHANNEL, ts) == "Looking at the repository now."
            )
            [streamed] = fake_slack.answer_messages(CHANNEL, ts)
            assert streamed.streaming
            await reply.tool(ToolActivity(name="run_command", summary="ls -la"))
            await reply.tool(ToolActivity(name="run_command", summary="ls -la", state="DONE"))
            await reply.tool(
                ToolActivity(
                    name="read_file", summary="setup.cfg", state="ERROR", error="no such file"
                )
            )
            await reply.append("\n\nAll **good**.")
            await fake_slack.wait_for(
                lambda: fake_slack.answer_text(CHANNEL, ts).endswith("**good**.")
            )
            final = "Looking at the repository now.\n\nAll **good**, nothing to fix."
            await reply.finish(TurnOutcome(final_text=final))

            [control, answer] = fake_slack.thread(CHANNEL, ts)

    assert fake_slack.ok_calls("chat.startStream")
    assert fake_slack.ok_calls("chat.appendStream")
    assert answer.visible == final
    assert not answer.streaming
    # The control message keeps only the tool log: one line per call, no Stop button.
    assert control.buttons == []
    assert control.visible == "› run_command `ls -la`\n› read_file `setup.cfg` — ⚠️ no such file"
    assert fake_slack.reactions[(CHANNEL, ts)] == set()
    # The stream went to the person who asked.
    start = fake_slack.ok_calls("chat.startStream")[0].args
    assert start["recipient_user_id"] == "UALICE01"
    assert start["recipient_team_id"] == "T0FAKE01"


async def test_a_stream_expiring_mid_turn_still_ends_with_the_whole_answer(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    parts = ["First part of a long turn. ", "Second part, after a long idle gap. ", "Third."]
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append(parts[0])
            await fake_slack.wait_for(lambda: fake_slack.answer_text(CHANNEL, ts) == parts[0])

            fake_slack.expire_streams()
            await reply.append(parts[1])
            # The expired message is finished with an edit: it now holds both parts.
            await fake_slack.wait_for(
                lambda: fake_slack.answer_text(CHANNEL, ts) == parts[0] + parts[1]
            )
            await reply.append(parts[2])
            # The rest streams into a new message: the thread holds everything, in order.
            await fake_slack.wait_for(lambda: len(fake_slack.answer_messages(CHANNEL, ts)) == 2)
            await fake_slack.wait_for(
                lambda: (
                    [m.visible for m in fake_slack.answer_messages(CHANNEL, ts)]
                    == [parts[0] + parts[1], parts[2]]
                )
            )
            assert len(fake_slack.ok_calls("chat.startStream")) == 2
            await reply.finish(TurnOutcome(final_text="".join(parts)))

    assert [c.error for c in fake_slack.calls_to("chat.appendStream")].count(
        "message_not_in_streaming_state"
    ) == 1
    assert fake_slack.answer_text(CHANNEL, ts) == "".join(parts)
    assert all(not m.streaming for m in fake_slack.thread(CHANNEL, ts))


async def test_refused_streaming_falls_back_to_coalesced_edits(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.refuse_streaming = "not_allowed"
    pieces = [f"word{i} " for i in range(20)]
    async with running_adapter(fake_slack, inbound, tmp_path, reply_interval=0.2) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            for piece in pieces:
                await reply.append(piece)
                await anyio.sleep(0.02)  # text arrives over time, as agy streams it
            await fake_slack.wait_for(
                lambda: fake_slack.answer_text(CHANNEL, ts) == "".join(pieces)
            )
            answer_ts = fake_slack.answer_messages(CHANNEL, ts)[0].ts
            edits = [c for c in fake_slack.ok_calls("chat.update") if c.args["ts"] == answer_ts]
            await reply.finish(TurnOutcome(final_text="".join(pieces).strip()))

    assert len(fake_slack.ok_calls("chat.startStream")) == 0
    assert len(edits) < len(pieces) // 2  # coalesced: far fewer edits than pieces of text
    [answer] = fake_slack.answer_messages(CHANNEL, ts)
    assert answer.ts == answer_ts
    assert answer.visible == "".join(pieces).strip()


async def test_streaming_disabled_edits_one_message(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path, streaming=False) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append("partial")
            await fake_slack.wait_for(lambda: fake_slack.answer_text(CHANNEL, ts) == "partial")
            await reply.finish(TurnOutcome(final_text="partial and complete"))

    assert fake_slack.calls_to("chat.startStream") == []
    assert fake_slack.answer_text(CHANNEL, ts) == "partial and complete"


async def test_unknown_recipient_falls_back_to_editing(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """After a restart the adapter may not know who asked: Slack then refuses the stream."""
    root = fake_slack.next_ts()
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread, None) as reply:
            await reply.ready()  # type: ignore[attr-defined]
            await reply.append("still answered")
            await fake_slack.wait_for(
                lambda: fake_slack.answer_text(CHANNEL, root) == "still answered"
            )
            await reply.finish(TurnOutcome(final_text="still answered"))

    assert [c.error for c in fake_slack.calls_to("chat.startStream")] == [
        "missing_recipient_user_id"
    ]
    assert fake_slack.answer_text(CHANNEL, root) == "still answered"


async def test_long_streamed_answer_rolls_over_and_surplus_messages_go(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum " * 150 for i in range(16)]
    long_text = "\n\n".join(p.strip() for p in paragraphs)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            for paragraph in paragraphs:
                await reply.append(paragraph.strip() + "\n\n")
            await fake_slack.wait_for(lambda: len(fake_slack.answer_messages(CHANNEL, ts)) >= 3)
            live = [m.ts for m in fake_slack.answer_messages(CHANNEL, ts)]
            # The agent's final text is much shorter than what streamed: extra messages go away.
            await reply.finish(TurnOutcome(final_text="In short: fine."))

    assert len(long_text) > 2 * 11_000
    assert len(live) >= 3
    [answer] = fake_slack.answer_messages(CHANNEL, ts)
    assert answer.ts == live[0]
    assert answer.visible == "In short: fine."


async def test_final_text_is_split_on_boundaries_with_code_fences_reopened(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    code = "\n".join(f"    line_{i} = compute({i})  # some commentary" for i in range(700))
    final = "Here is the script:\n\n```python\n" + code + "\n```\n\nThat is all."
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.finish(TurnOutcome(final_text=final))

    messages = fake_slack.answer_messages(CHANNEL, ts)
    assert len(messages) >= 2
    for message in messages:
        assert len(message.visible) <= 12_000
        assert open_fence_at_end(message.visible) is None  # every piece closes its fence
    assert all(m.visible.startswith("```python") for m in messages[1:])
    rebuilt = "\n".join(
        line for m in messages for line in m.visible.split("\n") if not line.startswith("```")
    )
    assert [line for line in rebuilt.split("\n") if line.startswith("    line_")] == code.split(
        "\n"
    )
    assert messages[-1].visible.endswith("That is all.")


async def test_errors_interruptions_denials_and_notes_are_shown(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append("I started to")
            await reply.finish(
                TurnOutcome(
                    final_text="",
                    error="Individual quota reached for gemini-3-pro",
                    denied=["command"],
                    notes=["the session was resumed"],
                )
            )

    text = fake_slack.answer_text(CHANNEL, ts)
    assert text.startswith("I started to")  # the streamed text stays when no final text came
    assert "⚠️ agy: Individual quota reached for gemini-3-pro" in text
    assert "🚫 Not allowed: `command`" in text
    assert "ℹ️ the session was resumed" in text
    # Nothing but a control message with no tools: it was removed.
    assert [m.ts for m in fake_slack.thread(CHANNEL, ts)] == [
        m.ts for m in fake_slack.answer_messages(CHANNEL, ts)
    ]


async def test_assistant_threads_use_the_status_line(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    ts = fake_slack.next_ts()
    fake_slack.assistant_threads.add((DM, ts))
    thread = ThreadRef(platform="slack", channel=DM, thread=ts)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread, ts) as reply:
            await reply.ready()  # type: ignore[attr-defined]
            await reply.append("hello in a DM")
            await reply.finish(TurnOutcome(final_text="hello in a DM"))

    statuses = [c.args["status"] for c in fake_slack.ok_calls("assistant.threads.setStatus")]
    assert statuses == ["is working…", ""]
    assert fake_slack.calls_to("reactions.add") == []
    assert fake_slack.answer_text(DM, ts) == "hello in a DM"


async def test_final_edit_outlasts_rate_limits(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path, streaming=False) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append("draft")
            await fake_slack.wait_for(lambda: fake_slack.answer_text(CHANNEL, ts) == "draft")
            fake_slack.fail("chat.update", status=429, times=4, retry_after=0)
            await reply.finish(TurnOutcome(final_text="final"))

    assert fake_slack.answer_text(CHANNEL, ts) == "final"


async def test_append_and_tool_never_wait_for_slack(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """A reply whose pump is not running still takes text: the turn is never blocked."""
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        reply = SlackLiveReply(
            adapter.client,
            thread=ThreadRef(platform="slack", channel=DM, thread=fake_slack.next_ts()),
            reply_to=None,
            recipient=Recipient(),
            settings=ReplySettings(),
        )
        calls_before = len(fake_slack.calls)
        for i in range(50):
            await reply.append(f"{i} ")
            await reply.tool(ToolActivity(name="t", summary=str(i)))
        assert len(fake_slack.calls) == calls_before
        await reply.finish(TurnOutcome(final_text="done"))

    assert fake_slack.answer_text(DM, reply.thread.thread) == "done"
