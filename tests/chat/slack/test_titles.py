"""A person renaming a thread's agent session in Slack (``agent_session_title_changed``): the
title is kept by the core, and the bridge gives that session no title of its own afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.events import ThreadRef, TurnOutcome
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


async def test_a_rename_is_kept_and_never_overwritten_by_the_bridge(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    fake.agent_app = True
    fake.experience = "agent_view"
    async with running_adapter(fake, inbound, tmp_path) as adapter:
        ts = fake.next_ts()
        event = message_event("why is CI red?", channel=DM, channel_type="im", ts=ts)
        await fake.wait_ack(await fake.push_event(event))
        thread = ThreadRef(platform="slack", channel=DM, thread=ts)
        async with adapter.open_reply(thread, ts) as reply:
            await fake.wait_for(lambda: fake.sessions.status_of(DM, ts) == "processing")
            await reply.finish(TurnOutcome(final_text="A flaky test."))
        assert fake.sessions.by_thread[(DM, ts)].title == "why is CI red?"

        await fake.wait_ack(await fake.agent_view.rename(DM, ts, ALICE, "Flaky CI hunt"))
        await inbound.wait_for(lambda: bool(inbound.titles))
        before = len(fake.calls)
        async with adapter.open_reply(thread, ts) as reply:
            await fake.wait_for(lambda: fake.sessions.status_of(DM, ts) == "processing")
            await reply.finish(TurnOutcome(final_text="Fixed."))
        later = [c for c in fake.calls[before:] if c.method == "agents.sessions.setStatus"]

    [(titled, title, by)] = inbound.titles
    assert (titled, title, by.id) == (thread, "Flaky CI hunt", ALICE)
    assert later and all(not c.args.get("title") for c in later)
    assert fake.sessions.by_thread[(DM, ts)].title == "Flaky CI hunt"


async def test_a_rename_by_someone_not_served_is_ignored(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    fake.agent_app = True
    async with running_adapter(fake, inbound, tmp_path) as adapter:
        ts = fake.next_ts()
        event = message_event("hello", channel=DM, channel_type="im", ts=ts)
        await fake.wait_ack(await fake.push_event(event))
        thread = ThreadRef(platform="slack", channel=DM, thread=ts)
        async with adapter.open_reply(thread, ts) as reply:
            await fake.wait_for(lambda: fake.sessions.status_of(DM, ts) == "processing")
            await reply.finish(TurnOutcome(final_text="hi"))
        await fake.wait_ack(await fake.agent_view.rename(DM, ts, MALLORY, "pwned"))
        await fake.wait_ack(await fake.agent_view.rename(DM, ts, ALICE, "Greeting"))
        await inbound.wait_for(lambda: bool(inbound.titles))

    assert [title for _, title, _ in inbound.titles] == ["Greeting"]
