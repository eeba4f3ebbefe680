"""A cut-off notice said once per key (bridge/chat/slack/once.py): the notice carries its key
in Slack's message metadata, and an adapter about to say it again (another instance, after the
first died before recording it) finds it in the thread and says nothing. The fake takes
metadata only in the shapes Slack documents, and returns it only when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.once import EVENT_TYPE
from bridge.chat.slack.retry import RETRY_ACTION_ID
from bridge.core.events import ThreadRef
from tests.chat.slack.conftest import ALICE, CHANNEL, RecordingInbound, running_adapter
from tests.chat.slack.fake_slack import BOT_TOKEN, FakeSlack

pytestmark = pytest.mark.anyio

KEY = "cut-off-7-1700000000000"
NOTICE = "⚠️ The bridge restarted while the agent was working on this thread"


def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])


@pytest.mark.parametrize(
    "metadata",
    [
        {"event_type": "agy_bridge_notice"},
        {"event_payload": {"key": "k"}},
        {"event_type": "", "event_payload": {"key": "k"}},
        {"event_type": 7, "event_payload": {"key": "k"}},
        {"event_type": "t", "event_payload": ["k"]},
        {"event_type": "t", "event_payload": {"key": None}},
        {"event_type": "t", "event_payload": {"keys": ["a", "b"]}},
        {"event_type": "t", "event_payload": {"key": {"deep": {"er": 1}}}},
        {"event_type": "t", "event_payload": {"key": "k"}, "extra": 1},
        "not json",
    ],
)
async def test_the_fake_refuses_metadata_slack_would_refuse(
    fake_slack: FakeSlack, metadata: Any
) -> None:
    with pytest.raises(SlackApiError) as refused:
        await client(fake_slack).chat_postMessage(channel=CHANNEL, text="hi", metadata=metadata)
    assert refused.value.response["error"] == "invalid_metadata_format"


async def test_the_fake_returns_metadata_only_when_asked(fake_slack: FakeSlack) -> None:
    root = fake_slack.add_message(CHANNEL, ALICE, "hello")
    metadata = {
        "event_type": "task_created",
        "event_payload": {"id": "TK-1", "n": 2, "done": False, "tags": [{"a": "b"}]},
    }
    slack = client(fake_slack)
    await slack.chat_postMessage(channel=CHANNEL, thread_ts=root.ts, text="t", metadata=metadata)
    plain = await slack.conversations_replies(channel=CHANNEL, ts=root.ts)
    assert all("metadata" not in m for m in plain["messages"])
    asked = await slack.conversations_replies(
        channel=CHANNEL, ts=root.ts, include_all_metadata=True
    )
    assert [m.get("metadata") for m in asked["messages"]] == [None, metadata]
    history = await slack.conversations_history(channel=CHANNEL, include_all_metadata=True)
    assert [m.get("metadata") for m in history["messages"]] == [None]  # the root has none


def notices(fake: FakeSlack, root: str) -> list[Any]:
    return [m for m in fake.thread(CHANNEL, root) if NOTICE in m.visible]


async def test_a_notice_said_by_one_instance_is_not_said_again_by_the_next(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    root = fake_slack.add_message(CHANNEL, ALICE, "a long task").ts
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    async with running_adapter(fake_slack, RecordingInbound(), tmp_path / "a") as first:
        assert await first.tell_once(thread, KEY, f"{NOTICE} (told by a)")
    # Its reporter died before recording that it told: the next instance tells it again.
    async with running_adapter(fake_slack, RecordingInbound(), tmp_path / "b") as second:
        assert not await second.tell_once(thread, KEY, f"{NOTICE} (told by b)")
        [said] = notices(fake_slack, root)
        assert "told by a" in said.visible
        assert [b["action_id"] for b in said.buttons] == [RETRY_ACTION_ID]
        assert said.metadata == {"event_type": EVENT_TYPE, "event_payload": {"key": KEY}}
        # Another turn's notice is another key: said.
        assert await second.tell_once(thread, "cut-off-8-1700000000500", f"{NOTICE} (8)")
    assert len(notices(fake_slack, root)) == 2


async def test_a_notice_with_the_key_from_another_app_does_not_silence_ours(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    root = fake_slack.add_message(CHANNEL, ALICE, "a long task").ts
    forged = fake_slack.add_webhook_message(CHANNEL, "B0OTHER", "agy", "nothing", thread_ts=root)
    forged.metadata = {"event_type": EVENT_TYPE, "event_payload": {"key": KEY}}
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    async with running_adapter(fake_slack, RecordingInbound(), tmp_path) as adapter:
        assert await adapter.tell_once(thread, KEY, NOTICE)
    assert len(notices(fake_slack, root)) == 1


async def test_a_whole_channel_conversation_is_looked_up_in_the_channel(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    thread = ThreadRef(platform="slack", channel=CHANNEL)
    async with running_adapter(fake_slack, RecordingInbound(), tmp_path) as adapter:
        assert await adapter.tell_once(thread, KEY, NOTICE)
        assert not await adapter.tell_once(thread, KEY, NOTICE)
    said = [m for m in fake_slack.messages.values() if NOTICE in m.visible]
    assert len(said) == 1 and said[0].thread_ts is None


async def test_a_failed_look_up_says_the_notice_rather_than_lose_it(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    root = fake_slack.add_message(CHANNEL, ALICE, "a long task").ts
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    async with running_adapter(fake_slack, RecordingInbound(), tmp_path) as adapter:
        fake_slack.fail("conversations.replies", status=500, times=20)
        assert await adapter.tell_once(thread, KEY, NOTICE)
    assert fake_slack.calls_to("conversations.replies"), "it looked"
    assert len(notices(fake_slack, root)) == 1
