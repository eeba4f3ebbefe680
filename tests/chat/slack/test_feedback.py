"""Feedback buttons (👍/👎) under final answers: on the last message of an answer, clicks
recorded per turn in the store (one per person and answer), counted in /metrics, shown in
``!status``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import ApprovalsSection
from bridge.core.events import Author, ThreadRef, ToolActivity, TurnOutcome
from bridge.core.feedback import answer_feedback, feedback_counts, record_feedback
from bridge.core.store.opening import open_store
from bridge.metrics import Metrics
from tests.chat.slack.conftest import (
    ALICE,
    CHANNEL,
    MALLORY,
    RecordingInbound,
    mention_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack

pytestmark = pytest.mark.anyio


async def mention(fake: FakeSlack) -> tuple[ThreadRef, str]:
    ts = fake.next_ts()
    await fake.wait_ack(await fake.push_event(mention_event("go", ts=ts)))
    return ThreadRef(platform="slack", channel=CHANNEL, thread=ts), ts


@pytest.mark.parametrize("text", ["Short.", "streamed " * 60])
async def test_a_final_answer_carries_feedback_buttons_and_clicks_reach_the_sink(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path, text: str
) -> None:
    fake_slack.agent_app = True
    clicks: list[tuple[ThreadRef, str, str, bool]] = []

    async def sink(
        thread: ThreadRef, answer: str, by: Author, positive: bool, sent: float | None
    ) -> None:
        clicks.append((thread, answer, by.id, positive))

    async with running_adapter(fake_slack, inbound, tmp_path, feedback=True) as adapter:
        adapter.observe_feedback(sink)
        thread, ts = await mention(fake_slack)
        async with adapter.open_reply(thread, ts) as reply:
            await reply.tool(ToolActivity(name="read_file", summary="a.py", state="DONE"))
            await reply.append(text)
            await reply.finish(TurnOutcome(final_text=text))
        [answer] = fake_slack.answer_messages(CHANNEL, ts)
        assert answer.visible.strip() == text.strip()
        assert answer.feedback_buttons is not None
        await fake_slack.wait_ack(await fake_slack.click_feedback(answer, ALICE, positive=True))
        await fake_slack.wait_ack(await fake_slack.click_feedback(answer, MALLORY, positive=False))
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 1)  # Mallory: refused
        await fake_slack.wait_for(lambda: bool(clicks))

    assert clicks == [(thread, answer.ts, ALICE, True)]


async def test_no_buttons_under_an_error_or_when_feedback_is_off(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path, feedback=True) as adapter:
        thread, ts = await mention(fake_slack)
        async with adapter.open_reply(thread, ts) as reply:
            await reply.finish(TurnOutcome(error="agy exited"))
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        other, other_ts = await mention(fake_slack)
        async with adapter.open_reply(other, other_ts) as reply:
            await reply.finish(TurnOutcome(final_text="fine"))

    for root in (ts, other_ts):
        assert all(m.feedback_buttons is None for m in fake_slack.thread(CHANNEL, root))


async def test_feedback_is_stored_per_turn_and_counted(tmp_path: Path) -> None:
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread="1700000001.000001")
    async with open_store(tmp_path / "store.sqlite3") as store:
        for started in (100.0, 200.0):
            await store.database.execute(
                "INSERT INTO turns (thread_key, state, started_at) VALUES (?, ?, ?)",
                (thread.key, "done", started),
            )
        first = await record_feedback(store, thread.key, "150.1", ALICE, True, sent_at=150.1)
        second = await record_feedback(store, thread.key, "250.1", ALICE, True, sent_at=250.1)
        assert first is not None and second == first + 1  # each answer's own turn
        # A second click by the same person on the same answer replaces the first.
        await record_feedback(store, thread.key, "250.1", ALICE, False, sent_at=250.1)
        metrics = Metrics()
        alice = Author(id="UBOB0001")
        await answer_feedback(store, metrics, thread, "250.1", alice, False, 250.1)
        assert await feedback_counts(store, thread.key) == type(await feedback_counts(store))(
            positive=1, negative=2
        )
        text = metrics.render()[0].decode()
        assert 'agy_bridge_answer_feedback_total{platform="slack",rating="negative"} 1.0' in text


async def test_status_shows_the_threads_feedback(tmp_path: Path) -> None:
    from bridge.core.slots import ProcessSlots
    from bridge.core.status import status_text

    thread = ThreadRef(platform="slack", channel=CHANNEL, thread="1700000001.000001")
    async with open_store(tmp_path / "store.sqlite3") as store:
        await store.ensure_thread(thread)
        await record_feedback(store, thread.key, "1.1", ALICE, True)
        text = await status_text(
            store, thread.key, None, ProcessSlots(2), "•", "", "•", ApprovalsSection()
        )
    assert "• Feedback on answers: 👍 1, 👎 0" in text
