"""Schedules through the Slack fake: the operator's schedule opens a thread in the channel at
its time (as the bridge) and its answer streams there; a person's `!schedule add --here` in a
thread runs there as them; a missed run beyond catch_up is noted in the channel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chat.slack.conftest import CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import BOT_USER, FakeSlack, Message
from tests.chat.slack.test_end_to_end import live_bridge
from tests.core.schedules.fake_clock import FakeClock, utc

pytestmark = pytest.mark.anyio

MORNING = {
    "schedules": [
        {
            "name": "morning",
            "cron": "0 9 * * 1-5",
            "timezone": "Europe/Paris",
            "channel": CHANNEL,
            "prompt": "triage the new issues [[reply three new issues, none urgent]]",
            "catch_up": "20m",
        }
    ]
}


async def answered(fake: FakeSlack, ts: str, text: str) -> None:
    """The agent's answer in the thread (not the messages that quote the prompt)."""

    def found() -> bool:
        return any(
            text in m.visible and "asks:" not in m.visible and "Scheduled" not in m.visible
            for m in fake.answer_messages(CHANNEL, ts)
        )

    await fake.wait_for(found, 30)


def roots(fake: FakeSlack, words: str) -> list[Message]:
    return [
        m
        for m in fake.messages.values()
        if m.channel == CHANNEL
        and m.thread_ts is None
        and m.user == BOT_USER
        and words in m.visible
    ]


async def test_a_configured_schedule_opens_a_thread_and_answers_there(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    clock = FakeClock(utc("2027-01-04 07:00"))  # Monday, 08:00 in Paris
    async with live_bridge(fake_slack, tmp_path, extra=MORNING, clock=clock) as live:
        await clock.idle()
    # Down at 09:00 in Paris, up at 09:10: the run is made at start, once Slack is connected.
    clock = FakeClock(utc("2027-01-04 08:10"))
    async with live_bridge(fake_slack, tmp_path, extra=MORNING, clock=clock) as live:
        await clock.idle()
        [root] = roots(fake_slack, "asks:")
        assert root.visible.startswith("**schedule morning** asks:")
        await answered(fake_slack, root.ts, "three new issues, none urgent")
        # A person's follow-up in that thread carries on the conversation.
        await fake_slack.push_event(
            message_event(
                "and the urgent ones? [[reply none]]", ts=fake_slack.next_ts(), thread_ts=root.ts
            )
        )
        await live.answer(root.ts, "none")
        await clock.move_to(utc("2027-01-04 08:30"))
        assert len(roots(fake_slack, "asks:")) == 1, "made once"
    # Down on Tuesday at 09:00 Paris; up at 09:45, past the 20 minutes of catch_up.
    clock = FakeClock(utc("2027-01-05 08:45"))
    async with live_bridge(fake_slack, tmp_path, extra=MORNING, clock=clock) as live:
        await clock.idle()
        [note] = roots(fake_slack, "did not run")
        assert "**schedule morning** did not run at 2027-01-05 09:00 Europe/Paris" in note.visible
        assert "Next run: 2027-01-06 09:00 Europe/Paris" in note.visible
        assert len(roots(fake_slack, "asks:")) == 1


async def test_a_persons_schedule_runs_in_their_thread_as_them(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    clock = FakeClock(utc("2027-01-04 07:58"))
    async with live_bridge(fake_slack, tmp_path, clock=clock) as live:
        await clock.idle()
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("hello [[reply hi]]", ts=ts))
        await live.answer(ts, "hi")
        await fake_slack.push_event(
            message_event(
                "!schedule add “0 8 * * *” UTC --here check CI [[reply CI is green]]",
                ts=fake_slack.next_ts(),
                thread_ts=ts,
            )
        )
        await fake_slack.wait_for(
            lambda: "Scheduled `" in " ".join(m.visible for m in fake_slack.thread(CHANNEL, ts)),
            30,
        )
        await clock.move_to(utc("2027-01-04 08:00"))
        await answered(fake_slack, ts, "CI is green")
        [asked] = [m for m in fake_slack.thread(CHANNEL, ts) if "asks:" in m.visible]
        assert "alice" in asked.visible and "(schedule " in asked.visible
        assert not roots(fake_slack, "asks:"), "no new thread: --here"
