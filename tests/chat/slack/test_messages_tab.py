"""The agent messaging experience (``agent_view``): the Messages tab's prompts and greeting,
a top-level DM message as its own thread, and the channel a person looks at handed to the
agent once (``app_context_changed``), with its messages only where both may read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chat.slack.conftest import (
    ALICE,
    BOB,
    DM,
    MALLORY,
    RecordingInbound,
    message_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import BOT_USER, FakeSlack, Message

pytestmark = pytest.mark.anyio

OPS = "C0OPS"
SECRET = "G0SECRET"


@pytest.fixture
def agent_view(fake_slack: FakeSlack) -> FakeSlack:
    fake_slack.experience = "agent_view"
    return fake_slack


async def test_opening_the_dm_sets_the_prompts_at_the_top_of_the_tab(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    wanted = ["Explain the build", "Fix the flaky test"]
    async with running_adapter(fake, inbound, tmp_path, suggested_prompts=wanted):
        await fake.wait_ack(await fake.agent_view.open_messages_tab(ALICE, DM))
        await fake.wait_for(lambda: DM in fake.agent_view.tab_prompts and bool(_ours(fake)))

    shown, _ = fake.agent_view.tab_prompts[DM]
    assert [p["message"] for p in shown] == wanted
    assert fake.agent_view.ignored_prompts == []  # no thread_ts: Slack would drop the call
    [greeting] = _ours(fake)
    assert greeting.thread_ts is None  # the first visit: a greeting at the top of the DM
    assert greeting.visible == "Hi! I'm a coding agent. Ask me about the code, or to change it."


def _ours(fake: FakeSlack) -> list[Message]:
    return [m for m in fake.messages.values() if m.channel == DM and m.user == BOT_USER]


async def test_a_later_visit_sets_the_prompts_again_but_greets_no_more(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    fake.add_message(DM, ALICE, "an earlier question")
    async with running_adapter(fake, inbound, tmp_path):
        await fake.wait_ack(await fake.agent_view.open_messages_tab(ALICE, DM))
        await fake.wait_for(lambda: DM in fake.agent_view.tab_prompts)
        await fake.wait_for(lambda: bool(fake.calls_to("conversations.history")))

    assert not _ours(fake)
    assert not fake.calls_to("chat.postMessage")


async def test_someone_not_served_gets_the_notice_and_no_prompts(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    async with running_adapter(fake, inbound, tmp_path):
        await fake.wait_ack(await fake.agent_view.open_messages_tab(MALLORY, "D0MALLORY"))
        await fake.wait_for(lambda: len(fake.ephemerals) == 1)

    assert fake.agent_view.tab_prompts == {}
    assert not fake.calls_to("chat.postMessage")


async def test_a_top_level_dm_message_is_the_root_of_its_own_thread(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    async with running_adapter(fake, inbound, tmp_path):
        for text in ("first question", "another topic"):
            ts = fake.next_ts()
            event = message_event(text, channel=DM, channel_type="im", ts=ts)
            await fake.wait_ack(await fake.push_event(event))
        await inbound.wait_for(lambda: len(inbound.submitted) == 2)

    first, second = inbound.submitted
    assert first.thread.thread == first.message_id  # the person's message is the root
    assert second.thread.thread == second.message_id
    assert first.thread != second.thread


async def test_the_channel_looked_at_reaches_the_agent_once_with_its_messages(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    fake.agent_view.members[OPS] = {ALICE, BOB, BOT_USER}
    fake.agent_view.names[OPS] = "ops"
    fake.add_message(OPS, BOB, "the deploy failed at step 3")
    async with running_adapter(fake, inbound, tmp_path):
        await fake.wait_ack(await fake.agent_view.look_at(ALICE, OPS))
        # Bob looks elsewhere: that is his, not Alice's.
        await fake.wait_ack(await fake.agent_view.look_at(BOB, "C0RANDOM"))
        for text in ("what's failing here?", "and now?"):
            event = message_event(text, channel=DM, channel_type="im", ts=fake.next_ts())
            await fake.wait_ack(await fake.push_event(event))
        await inbound.wait_for(lambda: len(inbound.submitted) == 2)

    first, second = inbound.submitted
    assert first.text.startswith("what's failing here?")
    assert "looking at channel #ops (C0OPS)" in first.text
    assert "the deploy failed at step 3" in first.text
    assert "C0RANDOM" not in first.text
    assert second.text == "and now?"  # given once, until it changes again


async def test_a_private_channel_the_person_is_not_in_stays_unread(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    fake.agent_view.private.add(SECRET)
    fake.agent_view.members[SECRET] = {BOB, BOT_USER}
    fake.add_message(SECRET, BOB, "the root password is hunter2")
    async with running_adapter(fake, inbound, tmp_path):
        await fake.wait_ack(await fake.agent_view.look_at(ALICE, SECRET))
        event = message_event("summarise it", channel=DM, channel_type="im", ts=fake.next_ts())
        await fake.wait_ack(await fake.push_event(event))
        await inbound.wait_for(lambda: len(inbound.submitted) == 1)

    [message] = inbound.submitted
    assert "hunter2" not in message.text
    assert "not a member" in message.text
    assert not fake.calls_to("conversations.history")


async def test_a_channel_the_bot_is_not_in_stays_unread(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    fake.agent_view.members[OPS] = {ALICE, BOB}
    async with running_adapter(fake, inbound, tmp_path):
        await fake.wait_ack(await fake.agent_view.look_at(ALICE, OPS))
        event = message_event("what's up there?", channel=DM, channel_type="im", ts="1.5")
        await fake.wait_ack(await fake.push_event(event))
        await inbound.wait_for(lambda: len(inbound.submitted) == 1)

    [message] = inbound.submitted
    assert "the bot is not a member" in message.text


async def test_looking_at_nothing_forgets_the_channel(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    async with running_adapter(fake, inbound, tmp_path):
        await fake.wait_ack(await fake.agent_view.look_at(ALICE, OPS))
        await fake.wait_ack(await fake.agent_view.look_at(ALICE, None))
        event = message_event("hello", channel=DM, channel_type="im", ts=fake.next_ts())
        await fake.wait_ack(await fake.push_event(event))
        await inbound.wait_for(lambda: len(inbound.submitted) == 1)

    assert inbound.submitted[0].text == "hello"


async def test_two_quick_first_visits_greet_once(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = agent_view
    async with running_adapter(fake, inbound, tmp_path):
        first = await fake.agent_view.open_messages_tab(ALICE, DM)
        second = await fake.agent_view.open_messages_tab(ALICE, DM)
        await fake.wait_ack(first)
        await fake.wait_ack(second)
        await fake.wait_for(lambda: len(fake.calls_to("conversations.history")) == 2)
        await fake.wait_for(lambda: bool(_ours(fake)))

    assert len(_ours(fake)) == 1


async def test_the_context_arrives_over_http_too(
    agent_view: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """HTTP mode: the person is read from the signed request's ``authorizations``."""
    import json

    import aiohttp

    from bridge.chat.slack.transport import EVENTS_PATH
    from tests.chat.slack.fake_slack import signed_headers

    fake = agent_view
    fake.agent_view.members[OPS] = {ALICE, BOT_USER}
    person = {"team_id": "T0FAKE01", "user_id": ALICE, "is_bot": False}
    context = {"entities": [{"type": "slack#/types/channel_id", "value": OPS}]}
    looked = {"type": "app_context_changed", "context": context}
    said = message_event("and here?", channel=DM, channel_type="im", ts=fake.next_ts())
    async with running_adapter(fake, inbound, tmp_path, transport="http") as adapter:
        url = f"http://127.0.0.1:{adapter.http_port}{EVENTS_PATH}"
        async with aiohttp.ClientSession() as http:
            for body in (
                json.dumps(fake.event_callback(looked, authorizations=[person])),
                json.dumps(fake.event_callback(said)),
            ):
                async with http.post(url, data=body, headers=signed_headers(body)) as answer:
                    assert answer.status == 200
        await inbound.wait_for(lambda: len(inbound.submitted) == 1)

    assert "looking at channel" in inbound.submitted[0].text and OPS in inbound.submitted[0].text
