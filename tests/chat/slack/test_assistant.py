"""The assistant container: a greeting and suggested prompts in a new thread; the channel the
person looks at reaches the agent with their next message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chat.slack.conftest import (
    ALICE,
    DM,
    MALLORY,
    RecordingInbound,
    message_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack

pytestmark = pytest.mark.anyio


async def test_a_new_container_thread_gets_a_greeting_and_suggested_prompts(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    prompts = ["Explain the build", "Fix the flaky test", "Review my branch", "What's new?", "x"]
    async with running_adapter(
        fake_slack,
        inbound,
        tmp_path,
        greeting="Hello, I'm agy.",
        suggested_prompts=prompts[:4],
    ):
        thread_ts, envelope = await fake_slack.assistant.start_thread(ALICE, DM, context="C0DEV")
        await fake_slack.wait_ack(envelope)
        await fake_slack.wait_for(lambda: (DM, thread_ts) in fake_slack.assistant.prompts)
        await fake_slack.wait_for(lambda: bool(fake_slack.thread(DM, thread_ts)))

    [greeting] = fake_slack.thread(DM, thread_ts)
    assert greeting.visible == "Hello, I'm agy."
    shown, _ = fake_slack.assistant.prompts[(DM, thread_ts)]
    assert [p["message"] for p in shown] == prompts[:4]


async def test_the_channel_looked_at_reaches_the_agent_with_the_next_message(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        thread_ts, envelope = await fake_slack.assistant.start_thread(ALICE, DM, context="C0DEV")
        await fake_slack.wait_ack(envelope)
        await fake_slack.wait_ack(
            await fake_slack.assistant.change_context(ALICE, DM, thread_ts, "C0OPS")
        )
        for text in ("what's failing here?", "and now?"):
            event = message_event(
                text, channel=DM, channel_type="im", ts=fake_slack.next_ts(), thread_ts=thread_ts
            )
            await fake_slack.wait_ack(await fake_slack.push_event(event))
        await inbound.wait_for(lambda: len(inbound.submitted) == 2)

    first, second = inbound.submitted
    assert first.text.startswith("what's failing here?")
    assert "looking at channel C0OPS" in first.text
    assert second.text == "and now?"  # given once, until it changes again


async def test_someone_not_served_gets_no_greeting(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        thread_ts, envelope = await fake_slack.assistant.start_thread(MALLORY, "D0MALLORY")
        await fake_slack.wait_ack(envelope)
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 1)

    assert fake_slack.thread("D0MALLORY", thread_ts) == []
    assert fake_slack.assistant.prompts == {}
