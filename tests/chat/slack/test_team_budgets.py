"""Budgets as a Slack thread sees them (issue 43): the warning once, a refused message kept and
marked, the refusal's words in the thread, and `!budget extend` by an approver."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_end_to_end import Live, live_bridge

pytestmark = pytest.mark.anyio

BUDGETS = {
    "budgets": [
        {"name": "daily", "scope": "user", "period": "day", "limit_tokens": 1000, "warn_at": 0.5}
    ],
    "approvals": {"mode": "off", "approvers": [BOB]},
}


async def spend(live: Live, person: str, tokens: int, turn: int) -> None:
    await live.bridge.store.database.execute(
        "INSERT INTO usage_shares (turn_id, person, person_name, thread_key, platform, channel,"
        " model, at, input_tokens, output_tokens, thinking_tokens, cache_read_tokens,"
        " total_tokens, cost) VALUES (?, ?, ?, 'slack|C0|1.0', 'slack', ?, 'default', ?, ?, 0,"
        " 0, 0, ?, NULL)",
        (-turn, person, person, CHANNEL, time.time(), tokens, tokens),
    )


def said(fake: FakeSlack, ts: str, text: str) -> list[str]:
    return [m.visible for m in fake.thread(CHANNEL, ts) if text in m.visible]


async def test_warned_refused_and_extended_in_a_slack_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path, extra=BUDGETS) as live:
        await spend(live, ALICE, 600, 1)
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("hello [[reply first answer]]", ts=ts))
        await live.answer(ts, "first answer")
        [warning] = said(fake_slack, ts, "Budget `daily`")
        assert "is at 60%: 600 of 1,000 tokens used today" in warning

        await spend(live, ALICE, 1000, 2)
        late = fake_slack.next_ts()
        await fake_slack.push_event(message_event("one more thing", ts=late, thread_ts=ts))
        await fake_slack.wait_for(lambda: bool(said(fake_slack, ts, "was not sent")), 30)
        [refusal] = said(fake_slack, ts, "was not sent")
        assert "your message was not sent to the agent. Budget `daily`" in refusal
        assert "tokens today; it resets " in refusal
        rows = await live.bridge.store.database.fetch(
            "SELECT state FROM inbox WHERE message_id = ?", (late,)
        )
        assert [r["state"] for r in rows] == ["refused"]
        assert "one more thing" not in fake_slack.answer_text(CHANNEL, ts)
        assert len(said(fake_slack, ts, "is at 60%")) == 1  # warned once

        # Alice cannot raise it; Bob, an approver, can.
        await fake_slack.push_event(
            message_event("!budget extend daily 50k", ts=fake_slack.next_ts(), thread_ts=ts)
        )
        await fake_slack.wait_for(lambda: bool(said(fake_slack, ts, "only an approver")), 30)
        await fake_slack.push_event(
            message_event(
                f"!budget extend daily 50k {ALICE}", user=BOB, ts=fake_slack.next_ts(), thread_ts=ts
            )
        )
        await fake_slack.wait_for(lambda: bool(said(fake_slack, ts, "raised by 50k")), 30)
        again = fake_slack.next_ts()
        await fake_slack.push_event(
            message_event("now [[reply second answer]]", ts=again, thread_ts=ts)
        )
        await live.answer(ts, "second answer")
