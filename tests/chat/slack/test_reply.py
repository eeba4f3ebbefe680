"""The live reply against the fake: streaming, stream expiry, edit fallback, the final rewrite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from bridge.chat.common.markdown import open_fence_at_end
from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.budget import RateBudget, Tier
from bridge.chat.slack.format import SPLIT_LIMIT, split_message
from bridge.chat.slack.reply import Recipient, ReplySettings, SlackLiveReply, answer_pieces
from bridge.chat.slack.status import STATUS_TEXT
from bridge.core.events import Author, LiveReply, ThreadRef, ToolActivity, TurnOutcome
from tests.chat.slack.conftest import (
    ALICE,
    CHANNEL,
    DM,
    OTHER_CHANNEL,
    RecordingInbound,
    control_message,
    mention_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import BOT_USER, TEAM, FakeSlack, quicker_tiers

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
        # The tests' adapter puts the Stop control up at once: wait for it.
        await fake.wait_for(lambda: control_message(fake, CHANNEL, ts) is not None)
        yield thread, ts, reply


async def test_streams_the_answer_then_finishes_with_the_whole_text(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await fake_slack.wait_for(lambda: fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT)

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
            # The tool calls are the stream's tasks, not lines in the Stop message.
            await fake_slack.wait_for(lambda: len(streamed.tasks) == 2)
            assert [t["status"] for t in streamed.tasks.values()] == ["complete", "error"]
            control = control_message(fake_slack, CHANNEL, ts)
            assert control is not None and "ls -la" not in control.visible
            final = "Looking at the repository now.\n\nAll **good**, nothing to fix."
            await reply.finish(TurnOutcome(final_text=final))

            # The Stop message goes at the end: it had no tool log to keep.
            [answer] = fake_slack.thread(CHANNEL, ts)

    assert fake_slack.ok_calls("chat.startStream")
    assert fake_slack.ok_calls("chat.appendStream")
    assert answer.visible == final
    assert not answer.streaming
    assert fake_slack.status_of(CHANNEL, ts) == ""
    assert fake_slack.calls_to("reactions.add") == []
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
            # Slack ended the stream: the rest continues in a new message, nothing is lost.
            await fake_slack.wait_for(
                lambda: (
                    [m.visible for m in fake_slack.answer_messages(CHANNEL, ts)]
                    == [parts[0], parts[1]]
                )
            )
            await reply.append(parts[2])
            await fake_slack.wait_for(
                lambda: (
                    [m.visible for m in fake_slack.answer_messages(CHANNEL, ts)]
                    == [parts[0], parts[1] + parts[2]]
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
    """The adapter may not know who asked (a thread it saw no message of): Slack refuses a
    stream in a channel without the recipient pair, so the answer is edited instead."""
    root = fake_slack.next_ts()
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread, None) as reply:
            await reply.append("still answered")
            await fake_slack.wait_for(
                lambda: fake_slack.answer_text(CHANNEL, root) == "still answered"
            )
            await reply.finish(TurnOutcome(final_text="still answered"))

    # No stream Slack would refuse for a half-filled recipient pair: edits straight away.
    assert fake_slack.calls_to("chat.startStream") == []
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


async def test_the_authors_organisation_addresses_the_stream_after_a_restart(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """The core passes the stored author: no event of this run is needed to stream."""
    root = fake_slack.next_ts()
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    author = Author(id=ALICE, org="E0GRID01")  # Enterprise Grid: the enterprise id
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread, root, author) as reply:
            await reply.append("streamed to alice")
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            await reply.finish(TurnOutcome(final_text="streamed to alice"))

    [start] = fake_slack.calls_to("chat.startStream")
    assert (start.args["recipient_user_id"], start.args["recipient_team_id"]) == (ALICE, "E0GRID01")
    assert fake_slack.answer_text(CHANNEL, root) == "streamed to alice"


async def test_a_turn_the_bridge_opened_streams_to_the_bot_that_wrote_its_root(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """A schedule's turn answers no person: it answers the root message the bot posted (see
    bridge/chat/slack/recipients.py), so it streams with the bot as its recipient, in the
    bot's team, instead of editing one message."""
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        opened = await adapter.open_thread(CHANNEL, "**schedule morning** asks:\n\ntriage")
        thread, schedule = opened.thread, Author.schedule("morning")
        async with adapter.open_reply(thread, opened.message_id, schedule) as reply:
            await reply.append("streamed for the schedule")
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            assert reply.streaming
            await reply.finish(TurnOutcome(final_text="streamed for the schedule"))

    [start] = fake_slack.calls_to("chat.startStream")
    assert (start.args["recipient_user_id"], start.args["recipient_team_id"]) == (BOT_USER, TEAM)
    assert start.args["thread_ts"] == thread.thread
    [root, answer] = fake_slack.answer_messages(CHANNEL, thread.thread)
    assert root.ts == thread.thread and "asks:" in root.visible
    assert answer.visible == "streamed for the schedule" and not answer.streaming


async def test_final_edit_outlasts_rate_limits(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    # A 429 empties the app's chat.update bucket (Slack counts ahead of it): each retry then
    # waits for a token, 1.6 s at Tier 3's real window; a tenth of it proves the same.
    fake_slack.tiers = quicker_tiers(10)
    budget = RateBudget(tiers=dict(fake_slack.tiers))
    async with running_adapter(
        fake_slack, inbound, tmp_path, streaming=False, budget=budget
    ) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append("draft")
            await fake_slack.wait_for(lambda: fake_slack.answer_text(CHANNEL, ts) == "draft")
            fake_slack.fail("chat.update", status=429, times=4, retry_after=0)
            await reply.finish(TurnOutcome(final_text="final"))

    assert fake_slack.answer_text(CHANNEL, ts) == "final"


async def test_the_final_answers_own_retries_are_counted(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """The final edit outlasts the client's own retries of a 5xx; the reply's retry after them
    is counted for the metrics as every other call's is."""
    retried: list[str] = []
    async with running_adapter(fake_slack, inbound, tmp_path, streaming=False) as adapter:
        adapter.observe_retries(retried.append)
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append("draft")
            await fake_slack.wait_for(lambda: fake_slack.answer_text(CHANNEL, ts) == "draft")
            fake_slack.fail("chat.update", status=500, times=3)
            await reply.finish(TurnOutcome(final_text="final"))

    assert fake_slack.answer_text(CHANNEL, ts) == "final"
    assert retried.count("5xx") == 2 and retried.count("transient") == 1, retried


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
            budget=adapter.budget,
        )
        calls_before = len(fake_slack.calls)
        for i in range(50):
            await reply.append(f"{i} ")
            await reply.tool(ToolActivity(name="t", summary=str(i)))
        assert len(fake_slack.calls) == calls_before
        await reply.finish(TurnOutcome(final_text="done"))

    assert fake_slack.answer_text(DM, reply.thread.thread) == "done"


# ----- what a short turn costs, and the status line ------------------------------------------


async def test_a_short_answer_costs_the_status_and_one_post(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    ts = fake_slack.next_ts()
    await_ack = fake_slack.wait_ack
    async with running_adapter(fake_slack, inbound, tmp_path, control_delay=2.0) as adapter:
        await await_ack(await fake_slack.push_event(mention_event("hi", ts=ts)))
        first = len(fake_slack.calls)
        thread = ThreadRef(platform="slack", channel=CHANNEL, thread=ts)
        async with adapter.open_reply(thread, ts) as reply:
            await fake_slack.wait_for(lambda: fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT)
            await reply.append("Hello!")
            await reply.finish(TurnOutcome(final_text="Hello!"))
        calls = [c.method for c in fake_slack.calls[first:]]

    # Without agent sessions for the app (the fake's default), learnt from Slack's first
    # refusal, which is the only one: a later turn costs the status and the post alone.
    assert calls == ["agents.sessions.setStatus", "assistant.threads.setStatus", "chat.postMessage"]
    assert [c.error for c in fake_slack.calls_to("agents.sessions.setStatus")] == ["missing_scope"]
    assert [m.visible for m in fake_slack.thread(CHANNEL, ts)] == ["Hello!"]
    # Slack took the status down when the answer was posted: no call needed for that.
    assert fake_slack.status_of(CHANNEL, ts) == ""


async def test_the_stop_control_comes_once_the_turn_runs_a_while(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    ts = fake_slack.next_ts()
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=ts)
    async with running_adapter(fake_slack, inbound, tmp_path, control_delay=0.3) as adapter:
        async with adapter.open_reply(thread, ts) as reply:
            await reply.tool(ToolActivity(name="run_command", summary="make test"))
            await fake_slack.wait_for(lambda: control_message(fake_slack, CHANNEL, ts) is not None)
            control = control_message(fake_slack, CHANNEL, ts)
            assert control is not None and "make test" in control.visible
            await reply.finish(TurnOutcome(final_text="tests pass"))

    [log, answer] = fake_slack.thread(CHANNEL, ts)
    assert log.buttons == [] and "make test" in log.visible
    assert answer.visible == "tests pass"


async def test_the_status_stays_up_through_posts_and_slacks_expiry(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """Slack clears the status when the app posts and two minutes after it was set."""
    fake_slack.status_lifetime = 0.6
    async with running_adapter(fake_slack, inbound, tmp_path, status_refresh=0.2) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):

            def shown() -> bool:
                return fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT

            def set_since(count: int) -> int:
                return sum(1 for _, thread, text in fake_slack.status_log[count:] if text)

            await reply.append("x" * 300)  # starts a stream: a post, which clears the status
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            await fake_slack.wait_for(shown)
            # Kept up past the status' own lifetime by refreshes.
            before = len(fake_slack.status_log)
            await fake_slack.wait_for(lambda: set_since(before) >= 4)
            assert shown()
            await reply.finish(TurnOutcome(final_text="x" * 300))

    assert fake_slack.status_of(CHANNEL, ts) == ""
    assert fake_slack.answer_text(CHANNEL, ts) == "x" * 300


async def test_a_rate_limited_status_is_tried_again_later(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """A 429 on the status is not a refusal of the channel."""
    fake_slack.fail("assistant.threads.setStatus", status=429, times=5, retry_after=0)
    # A fast tier, so the test need not wait for Tier 3 to refill after each 429.
    budget = RateBudget(tiers={"assistant.threads.setStatus": Tier(600, burst=5)})
    async with running_adapter(
        fake_slack, inbound, tmp_path, control_delay=5.0, budget=budget
    ) as adapter:
        for _ in range(2):
            ts = fake_slack.next_ts()
            thread = ThreadRef(platform="slack", channel=CHANNEL, thread=ts)
            async with adapter.open_reply(thread, ts) as reply:
                await fake_slack.wait_for(
                    lambda ts=ts: fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT
                )
                await reply.finish(TurnOutcome(final_text="ok"))

    assert [c.status for c in fake_slack.calls_to("assistant.threads.setStatus")].count(429) == 5


async def test_a_channel_slack_refuses_the_status_in_is_not_asked_again(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.missing_channels.add(OTHER_CHANNEL)
    async with running_adapter(fake_slack, inbound, tmp_path, control_delay=5.0) as adapter:
        for _ in range(2):
            ts = fake_slack.next_ts()
            thread = ThreadRef(platform="slack", channel=OTHER_CHANNEL, thread=ts)
            async with adapter.open_reply(thread, ts) as reply:
                await reply.finish(TurnOutcome(final_text="answered anyway"))
            assert fake_slack.answer_text(OTHER_CHANNEL, ts) == "answered anyway"

    assert [c.error for c in fake_slack.calls_to("assistant.threads.setStatus")] in (
        [],  # the first turn ended before its status call
        ["channel_not_found"],
    )


# ----- streams end after some minutes -------------------------------------------------------


async def test_a_stream_is_rolled_over_before_slack_ends_it(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.stream_lifetime = 2.0
    words = [f"word{i} " for i in range(30)]
    async with running_adapter(fake_slack, inbound, tmp_path, stream_max_age=0.4) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            for word in words:
                await reply.append(word)
                await anyio.sleep(0.1)  # text keeps flowing for longer than a stream lives
            await reply.finish(TurnOutcome(final_text="".join(words)))

    assert len(fake_slack.ok_calls("chat.startStream")) >= 2
    assert [c for c in fake_slack.calls if c.error == "message_not_in_streaming_state"] == []
    assert fake_slack.answer_text(CHANNEL, ts) == "".join(words).strip()
    assert all(not m.streaming for m in fake_slack.thread(CHANNEL, ts))


async def test_a_stream_that_would_not_stop_leaves_no_partial_copy(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """A long answer rolls over; the stop of the first stream fails, so that message still
    streams (chat.update on it: streaming_state_conflict). The final rewrite stops it first."""
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum " * 150 for i in range(10)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    fake_slack.fail("chat.stopStream", status=500, times=3)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append(text)
            await fake_slack.wait_for(lambda: len(fake_slack.answer_messages(CHANNEL, ts)) >= 2)
            await reply.finish(TurnOutcome(final_text=text))

    shown = [m.visible for m in fake_slack.answer_messages(CHANNEL, ts)]
    assert shown == split_message(text)
    assert all(not m.streaming for m in fake_slack.thread(CHANNEL, ts))


# ----- the rate budget ----------------------------------------------------------------------


async def test_a_long_retry_after_does_not_hold_up_the_final_answer(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append("a" * 300)
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            fake_slack.fail("chat.appendStream", status=429, times=1, retry_after=30)
            await reply.append(" and more")
            await fake_slack.wait_for(
                lambda: any(c.status == 429 for c in fake_slack.calls_to("chat.appendStream"))
            )
            # The pump skipped the update; the final answer does not wait 30 s for it.
            with anyio.fail_after(10):
                await reply.finish(TurnOutcome(final_text="a" * 300 + " and more"))

    assert fake_slack.answer_text(CHANNEL, ts) == "a" * 300 + " and more"


async def test_an_edited_turn_stays_within_chat_update_s_tier(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """Editing as fast as the pump allows would pass Tier 3 (50 a minute) in seconds."""
    pieces = [f"w{i} " for i in range(120)]
    async with running_adapter(
        fake_slack, inbound, tmp_path, streaming=False, reply_interval=0.02
    ) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            for piece in pieces:
                await reply.append(piece)
                await anyio.sleep(0.025)
            await reply.finish(TurnOutcome(final_text="".join(pieces).strip()))

    assert fake_slack.limited == []  # never a 429
    assert fake_slack.answer_text(CHANNEL, ts) == "".join(pieces).strip()


async def test_tool_progress_spends_no_chat_update_while_the_answer_streams(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    # chat.update spent for the hour after one edit: tool lines as edits could not be shown.
    budget = RateBudget(tiers={"chat.update": Tier(1, window=3600.0, burst=1)})
    first, more = "the answer streams " * 20, "and goes on " * 5
    async with running_adapter(fake_slack, inbound, tmp_path, budget=budget) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            for step in range(3):
                await reply.tool(ToolActivity(name="run_command", summary=f"step {step}"))
            for piece, shown in ((first, first), (more, first + more)):
                await reply.append(piece)
                await fake_slack.wait_for(
                    lambda shown=shown: fake_slack.answer_text(CHANNEL, ts).strip() == shown.strip()
                )
            [answer] = fake_slack.answer_messages(CHANNEL, ts)
            assert len(answer.tasks) == 3  # the stream's own tasks
            assert fake_slack.calls_to("chat.update") == []
            await reply.finish(TurnOutcome(final_text=first + more))

    assert fake_slack.answer_text(CHANNEL, ts).strip() == (first + more).strip()


def long_answer() -> str:
    """About one and a half messages of paragraphs, with a code block across the cut."""
    before = [f"Paragraph {i}: " + " ".join(["word"] * 150) for i in range(12)]
    code = "```python\n" + "\n".join(f"print({i})" for i in range(400)) + "\n```"
    after = [f"Later {i}: " + " ".join(["more"] * 150) for i in range(8)]
    return "\n\n".join([*before, code, *after])


def test_the_pieces_of_an_edited_answer_stay_as_it_grows() -> None:
    text = long_answer()
    whole = answer_pieces(text)
    assert len(whole) == 2
    assert all(len(piece.content) <= SPLIT_LIMIT for piece in whole)
    # The code block cut in two is closed at the end of one piece and reopened in the next.
    assert open_fence_at_end(whole[0].content) is None
    assert whole[1].content.startswith("```python\n")
    for end in range(0, len(text) + 1, 997):
        growing = answer_pieces(text[:end])
        # Only the last piece may still change: the full ones are those of the whole answer.
        assert growing[:-1] == whole[: len(growing) - 1]
        assert growing[-1].start == whole[len(growing) - 1].start


async def test_an_edited_answer_shows_its_pieces_while_the_turn_runs(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    text = long_answer()
    async with running_adapter(fake_slack, inbound, tmp_path, streaming=False) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):

            def shown() -> list[str | None]:
                return [m.markdown for m in fake_slack.answer_messages(CHANNEL, ts)]

            # In two parts, the first shown before the second comes: then the first message
            # is edited once more, where the answer is cut, and the second is posted.
            async def shows(end: int) -> None:
                wanted = [piece.content for piece in answer_pieces(text[:end])]
                await fake_slack.wait_for(lambda: shown() == wanted)

            await reply.append(text[:10_000])
            await shows(10_000)
            await reply.append(text[10_000:])
            await shows(len(text))
            assert len(shown()) == 2
            await reply.finish(TurnOutcome(final_text=text))

    assert fake_slack.calls_to("chat.startStream") == []
    # The final rewrite keeps the two messages and splits the whole text its own way.
    assert shown() == split_message(text)


# ----- transient failures of the first chat.startStream -------------------------------------


@pytest.mark.parametrize(
    ("status", "times", "retry_after"),
    [(429, 1, 1), (500, 3, None)],  # a 429, and a 5xx outlasting the SDK's own two retries
)
async def test_a_transient_start_stream_failure_is_retried_before_editing(
    fake_slack: FakeSlack,
    inbound: RecordingInbound,
    tmp_path: Path,
    status: int,
    times: int,
    retry_after: int | None,
) -> None:
    fake_slack.fail("chat.startStream", status=status, times=times, retry_after=retry_after)
    text = "x" * 300
    # A roomier startStream bucket: after a 429 the budget otherwise rests ~8 s (Tier 2).
    budget = RateBudget(tiers={**RateBudget().tiers, "chat.startStream": Tier(600, burst=20)})
    async with running_adapter(fake_slack, inbound, tmp_path, budget=budget) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append(text)
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            assert isinstance(reply, SlackLiveReply) and reply.streaming
            await reply.finish(TurnOutcome(final_text=text))

    assert fake_slack.answer_text(CHANNEL, ts) == text
    assert len(fake_slack.ok_calls("chat.startStream")) == 1
    assert len(fake_slack.answer_messages(CHANNEL, ts)) == 1
    assert fake_slack.ok_calls("chat.postMessage")[1:] == []  # the control message only


async def test_start_stream_failing_on_and_on_falls_back_to_edits(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.fail("chat.startStream", status=500, times=1000)
    text = "y" * 300
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (_, ts, reply):
            await reply.append(text)
            await fake_slack.wait_for(lambda: fake_slack.answer_text(CHANNEL, ts) == text)
            assert isinstance(reply, SlackLiveReply) and not reply.streaming
            await reply.finish(TurnOutcome(final_text=text))

    assert fake_slack.answer_text(CHANNEL, ts) == text


# ----- a person stops the stream in Slack ---------------------------------------------------


async def test_a_stream_stopped_by_the_user_stops_the_turn_as_theirs(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with start_turn(fake_slack, adapter) as (thread, ts, reply):
            await reply.append("a" * 300)
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            [streamed] = fake_slack.answer_messages(CHANNEL, ts)
            fake_slack.stop_stream_as_user(streamed.ts)
            for _ in range(5):
                await reply.append(" more")
                await anyio.sleep(0.1)
            await inbound.wait_for(lambda: bool(inbound.stops))
            await reply.finish(TurnOutcome(final_text="a" * 300, interrupted=True))

    assert [(t, by.id) for t, by in inbound.stops] == [(thread, ALICE)]
    refused = [c for c in fake_slack.calls if c.error == "stopped_by_user"]
    assert len(refused) == 1  # not tried again at every flush
    [answer] = fake_slack.answer_messages(CHANNEL, ts)
    assert answer.ts == streamed.ts
    assert answer.visible.startswith("a" * 300)
