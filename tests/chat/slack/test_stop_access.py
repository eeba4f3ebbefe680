"""The Stop button is access-controlled and names its own thread: forged or odd clicks stop
nothing (each case found by mutation testing, see docs/testing.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.chat.slack.control import STOP_ACTION_ID
from bridge.core.events import ThreadRef
from tests.chat.slack.conftest import (
    ALICE,
    BOB,
    CHANNEL,
    MALLORY,
    OTHER_CHANNEL,
    RecordingInbound,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack, Message
from tests.chat.slack.test_adapter import control_message

pytestmark = pytest.mark.anyio


def thread(root: str, channel: str = CHANNEL) -> ThreadRef:
    return ThreadRef(platform="slack", channel=channel, thread=root)


async def click(fake: FakeSlack, message: Message, who: str, **change: Any) -> None:
    """A click, its payload changed as a forged or unusual one would be; waits for the ack."""
    payload = fake.block_action(message, who, STOP_ACTION_ID)
    for key, value in change.items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    envelope = {"type": "interactive", "accepts_response_payload": True, "payload": payload}
    await fake.wait_ack(await fake._push(envelope))


async def test_forged_and_odd_clicks_stop_nothing_and_a_plain_one_stops(
    fake_slack: FakeSlack,
    inbound: RecordingInbound,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = fake_slack.next_ts()
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread(root), None):
            await fake_slack.wait_for(
                lambda: control_message(fake_slack, CHANNEL, root) is not None
            )
            control = control_message(fake_slack, CHANNEL, root)
            assert control is not None
            action = fake_slack.block_action(control, ALICE, STOP_ACTION_ID)["actions"][0]

            # The button's value names a thread in another channel than the one clicked in.
            other = thread(root, OTHER_CHANNEL).key
            await click(fake_slack, control, ALICE, actions=[{**action, "value": other}])
            # A value that is no thread at all, and a click without a user.
            await click(fake_slack, control, ALICE, actions=[{**action, "value": "garbage"}])
            await click(fake_slack, control, ALICE, user={"team_id": "T0FAKE01"})
            # Mallory is not allowed: told so once, in the thread.
            await click(fake_slack, control, MALLORY)
            await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 1)
            # Slack names the channel in "channel" or only in "container": either is enough.
            await click(fake_slack, control, BOB, channel=None)
            await inbound.wait_for(lambda: len(inbound.stops) == 1)
            await click(fake_slack, control, ALICE, container=None)
            await inbound.wait_for(lambda: len(inbound.stops) == 2)

    assert [(t, by.id) for t, by in inbound.stops] == [(thread(root), BOB), (thread(root), ALICE)]
    # The click for another thread is logged, so an operator can see forged clicks.
    assert "Slack: a Stop button for another thread was ignored" in caplog.messages
    [notice] = fake_slack.ephemerals
    assert (notice["user"], notice["channel"], notice["thread_ts"]) == (MALLORY, CHANNEL, root)
