"""What the web console asks of Slack: members of a channel (as conversations.members lists
them), DMs, and a sign-in link posted with unfurling off (an unfurl is a GET by Slack's
preview bot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.capabilities import KnowsMembers, PostsWithoutPreviews
from bridge.core.events import ThreadRef
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, DM, RecordingInbound, running_adapter
from tests.chat.slack.fake_slack import BOT_USER, FakeSlack

pytestmark = pytest.mark.anyio


async def test_members_dms_and_a_link_without_previews(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_view.members[CHANNEL] = {ALICE, BOT_USER}
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        assert isinstance(adapter, KnowsMembers) and isinstance(adapter, PostsWithoutPreviews)
        assert await adapter.is_member(CHANNEL, ALICE)
        assert not await adapter.is_member(CHANNEL, BOB)
        assert not await adapter.is_member("C0NOWHERE", ALICE)  # Slack cannot say: no
        assert await adapter.is_direct(DM) and not await adapter.is_direct(CHANNEL)
        thread = ThreadRef(platform="slack", channel=DM, thread="")
        await adapter.post_without_previews(thread, "your link: https://console.example/x")
        [message] = [m for m in fake_slack.messages.values() if m.channel == DM]
        assert "https://console.example/x" in (message.markdown or "")
        assert str(message.unfurl_links).lower() in ("false", "0")
        assert str(message.unfurl_media).lower() in ("false", "0")
