"""The Slack adapter over Socket Mode against the fake: what reaches the core, and what not."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.control import STOP_ACTION_ID
from bridge.chat.slack.transport import SlackStartError
from bridge.config import SlackSection
from bridge.core.events import Reaction, ThreadRef, TurnOutcome
from tests.chat.slack.conftest import (
    ALICE,
    BOB,
    CHANNEL,
    DM,
    MALLORY,
    OTHER_CHANNEL,
    RecordingInbound,
    control_message,
    mention_event,
    message_event,
    running_adapter,
    slack_section,
)
from tests.chat.slack.fake_slack import BOT_ID, BOT_USER, FakeSlack

pytestmark = pytest.mark.anyio


def thread(root: str, channel: str = CHANNEL) -> ThreadRef:
    return ThreadRef(platform="slack", channel=channel, thread=root)


async def deliver(fake: FakeSlack, event: dict[str, object]) -> None:
    """Push an event and wait until the adapter has acknowledged it (handled it fully)."""
    await fake.wait_ack(await fake.push_event(event))


async def test_mention_starts_a_conversation_with_author_and_clean_text(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        ts = fake_slack.next_ts()
        await deliver(fake_slack, mention_event("please run  the tests &amp; report", ts=ts))

    [message] = inbound.submitted
    assert message.thread == thread(ts)
    assert message.event_id == f"{CHANNEL}:{ts}"
    assert message.message_id == ts
    assert message.text == "please run the tests & report"
    assert message.author.id == ALICE
    assert message.author.display_name == "alice"
    assert message.author.email == "alice@example.org"
    assert message.sent_at is not None


async def test_a_messages_sent_at_is_slacks_clock_when_it_was_sent(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    # Slack's ts is the second it took the message (``<seconds>.<6 digits>``, unique in the
    # channel and increasing): the gate measures a bare answer's reaction time from it.
    async with running_adapter(fake_slack, inbound, tmp_path):
        before = time.time()
        first, second = fake_slack.next_ts(), fake_slack.next_ts()
        after = time.time()
        await deliver(fake_slack, mention_event("one", ts=first))
        await deliver(fake_slack, mention_event("two", ts=second))

    assert all(re.fullmatch(r"\d{10}\.\d{6}", ts) for ts in (first, second))
    assert float(first) < float(second)
    sent = [m.sent_at.timestamp() for m in inbound.submitted if m.sent_at is not None]
    assert len(sent) == 2
    assert int(before) <= sent[0] < sent[1] <= after + 1  # not years before


async def test_mention_inside_a_thread_uses_the_thread_root(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        root = fake_slack.next_ts()
        ts = fake_slack.next_ts()
        await deliver(fake_slack, mention_event("look at this", ts=ts, thread_ts=root))

    [message] = inbound.submitted
    assert message.thread == thread(root)
    assert message.message_id == ts


async def test_reply_in_a_conversation_needs_no_mention(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        root = fake_slack.next_ts()
        await deliver(fake_slack, mention_event("start", ts=root))
        reply = fake_slack.next_ts()
        await deliver(
            fake_slack, message_event("and also this", user=BOB, ts=reply, thread_ts=root)
        )

    assert [m.text for m in inbound.submitted] == ["start", "and also this"]
    assert inbound.submitted[1].thread == thread(root)
    assert inbound.submitted[1].author.id == BOB


async def test_reply_in_an_unknown_thread_without_mention_is_ignored(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        root = fake_slack.next_ts()
        await deliver(
            fake_slack, message_event("chatting", ts=fake_slack.next_ts(), thread_ts=root)
        )
        await deliver(fake_slack, message_event("top level chat", ts=fake_slack.next_ts()))

    assert inbound.submitted == []
    assert fake_slack.ephemerals == []


async def test_dm_top_level_messages_each_start_a_thread_and_replies_continue_it(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        first = fake_slack.next_ts()
        await deliver(fake_slack, message_event("one", channel=DM, channel_type="im", ts=first))
        second = fake_slack.next_ts()
        await deliver(fake_slack, message_event("two", channel=DM, channel_type="im", ts=second))
        reply = fake_slack.next_ts()
        await deliver(
            fake_slack,
            message_event("more", channel=DM, channel_type="im", ts=reply, thread_ts=first),
        )

    assert [(m.text, m.thread) for m in inbound.submitted] == [
        ("one", thread(first, DM)),
        ("two", thread(second, DM)),
        ("more", thread(first, DM)),
    ]


async def test_bot_messages_edits_and_deletions_are_ignored(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    inbound.conversations.add(thread(root))
    async with running_adapter(fake_slack, inbound, tmp_path):
        events = [
            # The bot's own reply in the conversation (Bolt or the adapter must drop it).
            message_event("my answer", user=BOT_USER, ts=fake_slack.next_ts(), thread_ts=root),
            message_event(
                "a bot post",
                ts=fake_slack.next_ts(),
                thread_ts=root,
                subtype="bot_message",
                bot_id="BOTHER01",
            ),
            {
                "type": "message",
                "subtype": "message_changed",
                "channel": CHANNEL,
                "ts": fake_slack.next_ts(),
                "message": {"user": ALICE, "text": f"<@{BOT_USER}> edited", "ts": root},
            },
            {
                "type": "message",
                "subtype": "message_deleted",
                "channel": CHANNEL,
                "ts": fake_slack.next_ts(),
                "deleted_ts": root,
            },
            message_event("joined", ts=fake_slack.next_ts(), subtype="channel_join"),
        ]
        for event in events:
            await deliver(fake_slack, event)
        # A message under the bot's id with a bot_id (as Slack sends for app posts).
        await deliver(
            fake_slack,
            message_event(
                "also mine", user="UOTHER", ts=fake_slack.next_ts(), thread_ts=root, bot_id=BOT_ID
            ),
        )

    assert inbound.submitted == []


async def test_mention_and_message_twin_share_one_event_id(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        ts = fake_slack.next_ts()
        await deliver(fake_slack, mention_event("do it", ts=ts))
        # The same message as a `message` event, with its own Slack event id, then a retry.
        await deliver(fake_slack, message_event(f"<@{BOT_USER}> do it", ts=ts))
        await fake_slack.wait_ack(
            await fake_slack.push_event(mention_event("do it", ts=ts), retry_attempt=1)
        )

    assert len(inbound.submitted) == 1
    assert [m.event_id for m in inbound.duplicates] == [f"{CHANNEL}:{ts}"] * 2


async def test_not_allowed_user_gets_one_notice_and_nothing_is_submitted(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        for _ in range(3):
            await deliver(
                fake_slack, mention_event("let me in", user=MALLORY, ts=fake_slack.next_ts())
            )
        await fake_slack.wait_for(lambda: len(fake_slack.ok_calls("chat.postEphemeral")) >= 1)
        # Same user in another channel: one more notice there.
        await deliver(
            fake_slack,
            mention_event("here?", user=MALLORY, channel=OTHER_CHANNEL, ts=fake_slack.next_ts()),
        )
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) >= 2)

    assert inbound.submitted == []
    assert [(e["user"], e["channel"]) for e in fake_slack.ephemerals] == [
        (MALLORY, CHANNEL),
        (MALLORY, OTHER_CHANNEL),
    ]


async def test_a_listed_channel_admits_everyone_in_it_but_opens_no_dms(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(
        fake_slack, inbound, tmp_path, allowed_users=[], allowed_channels=[CHANNEL]
    ):
        await deliver(fake_slack, mention_event("ok here", user=MALLORY, ts=fake_slack.next_ts()))
        await deliver(
            fake_slack,
            mention_event("not here", channel=OTHER_CHANNEL, ts=fake_slack.next_ts()),
        )
        await deliver(
            fake_slack, message_event("dm", channel=DM, channel_type="im", ts=fake_slack.next_ts())
        )
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) >= 2)

    assert [m.text for m in inbound.submitted] == ["ok here"]
    assert {(e["user"], e["channel"]) for e in fake_slack.ephemerals} == {
        (ALICE, OTHER_CHANNEL),
        (ALICE, DM),
    }


async def test_users_and_channels_together_mean_these_people_in_these_channels(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(
        fake_slack, inbound, tmp_path, allowed_users=[ALICE], allowed_channels=[CHANNEL]
    ):
        await deliver(fake_slack, mention_event("bob here", user=BOB, ts=fake_slack.next_ts()))
        await deliver(
            fake_slack,
            mention_event("alice there", channel=OTHER_CHANNEL, ts=fake_slack.next_ts()),
        )
        await deliver(fake_slack, mention_event("alice here", ts=fake_slack.next_ts()))
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) >= 2)

    assert [m.text for m in inbound.submitted] == ["alice here"]
    assert {(e["user"], e["channel"]) for e in fake_slack.ephemerals} == {
        (BOB, CHANNEL),
        (ALICE, OTHER_CHANNEL),
    }


async def test_other_apps_do_not_drive_the_agent_unless_listed(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    def from_app(text: str) -> dict[str, object]:
        # As Slack delivers another app's post made with its bot token: no subtype.
        return mention_event(text, user="UCIBOT01", ts=fake_slack.next_ts()) | {
            "bot_id": "BCIBOT01",
            "app_id": "ACIBOT01",
            "bot_profile": {"id": "BCIBOT01", "app_id": "ACIBOT01", "name": "ci"},
        }

    async with running_adapter(
        fake_slack, inbound, tmp_path, allowed_users=[], allowed_channels=[CHANNEL]
    ):
        await deliver(fake_slack, from_app("ping"))
    assert inbound.submitted == []
    assert fake_slack.ephemerals == []

    async with running_adapter(
        fake_slack,
        inbound,
        tmp_path,
        allowed_users=[],
        allowed_channels=[CHANNEL],
        allowed_bots=["ACIBOT01"],
    ):
        await deliver(fake_slack, from_app("listed"))
    assert [m.text for m in inbound.submitted] == ["listed"]


async def test_nobody_is_allowed_when_both_lists_are_empty(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path, allowed_users=[]):
        await deliver(fake_slack, mention_event("hi", ts=fake_slack.next_ts()))
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 1)

    assert inbound.submitted == []


async def test_stop_button_calls_stop_for_allowed_users_only(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread(root), None) as reply:
            await fake_slack.wait_for(
                lambda: control_message(fake_slack, CHANNEL, root) is not None
            )
            control = control_message(fake_slack, CHANNEL, root)
            assert control is not None
            assert [b["action_id"] for b in control.buttons] == [STOP_ACTION_ID]

            await fake_slack.wait_ack(await fake_slack.click(control, MALLORY, STOP_ACTION_ID))
            await fake_slack.wait_ack(await fake_slack.click(control, BOB, STOP_ACTION_ID))
            await inbound.wait_for(lambda: inbound.stops)
            await reply.finish(TurnOutcome(final_text="stopped early", interrupted=True))

    [(stopped, by)] = inbound.stops
    assert stopped == thread(root)
    assert by.id == BOB
    assert [e["user"] for e in fake_slack.ephemerals] == [MALLORY]
    # The button is gone once the turn ended.
    assert all(not m.buttons for m in fake_slack.thread(CHANNEL, root))


async def test_socket_reconnects_after_the_server_drops_it(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        await deliver(fake_slack, mention_event("before", ts=fake_slack.next_ts()))
        await fake_slack.drop_sockets()
        await fake_slack.wait_for(lambda: fake_slack.socket_connections >= 2, seconds=10)
        await deliver(fake_slack, mention_event("after", ts=fake_slack.next_ts()))

    assert [m.text for m in inbound.submitted] == ["before", "after"]
    # A fresh URL was asked for: our start check, the first connect, the reconnect.
    assert len(fake_slack.ok_calls("apps.connections.open")) >= 3


async def test_react_maps_states_and_replaces_the_queued_mark(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    ts = fake_slack.add_message(CHANNEL, ALICE, "hi").ts
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        await adapter.react(thread(ts), ts, Reaction.QUEUED)
        await adapter.react(thread(ts), ts, Reaction.QUEUED)  # already_reacted: ignored
        assert fake_slack.reactions[(CHANNEL, ts)] == {"inbox_tray"}
        await adapter.react(thread(ts), ts, Reaction.INJECTED)
        assert fake_slack.reactions[(CHANNEL, ts)] == {"eyes"}
        await adapter.react(thread(ts), ts, Reaction.FAILED)

    assert fake_slack.reactions[(CHANNEL, ts)] == {"eyes", "warning"}


async def test_post_message_is_retried_through_429_and_500(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        fake_slack.fail("chat.postMessage", status=429, times=2, retry_after=0)
        await adapter.post_message(thread(root), "after a rate limit")
        fake_slack.fail("chat.postMessage", status=500, times=2)
        await adapter.post_message(thread(root), "after a server error")

    statuses = [call.status for call in fake_slack.calls_to("chat.postMessage")]
    assert statuses == [429, 429, 200, 500, 500, 200]
    assert [m.visible for m in fake_slack.thread(CHANNEL, root)] == [
        "after a rate limit",
        "after a server error",
    ]


async def test_post_message_outlasts_the_sdk_retries(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """More 500s than the SDK's handler retries: our own bounded retry still gets it through."""
    root = fake_slack.next_ts()
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        fake_slack.fail("chat.postMessage", status=500, times=4)
        await adapter.post_message(thread(root), "persistent")

    assert [m.visible for m in fake_slack.thread(CHANNEL, root)] == ["persistent"]


async def test_long_post_message_is_split(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    paragraphs = [f"paragraph {i} " + "x" * 3000 for i in range(8)]
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        await adapter.post_message(thread(root), "\n\n".join(paragraphs))

    messages = fake_slack.thread(CHANNEL, root)
    assert len(messages) > 1
    assert all(len(m.visible) <= 12_000 for m in messages)
    assert "\n\n".join(m.visible for m in messages) == "\n\n".join(paragraphs)


async def test_a_wrong_bot_token_stops_with_a_clear_error(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    adapter = SlackAdapter(
        slack_section(fake_slack, bot_token=SecretStr("xoxb-wrong")), data_dir=tmp_path
    )
    with pytest.raises(SlackStartError, match="bot token"):
        await adapter.run(inbound, lambda: None)


async def test_a_wrong_app_token_stops_with_a_clear_error(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    adapter = SlackAdapter(
        slack_section(fake_slack, app_token=SecretStr("xapp-wrong")), data_dir=tmp_path
    )
    with pytest.raises(SlackStartError, match="app token"):
        await adapter.run(inbound, lambda: None)


def test_missing_secrets_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bot_token"):
        SlackAdapter(SlackSection(), data_dir=tmp_path)
    with pytest.raises(ValueError, match="app_token"):
        SlackAdapter(SlackSection(bot_token=SecretStr("xoxb-1")), data_dir=tmp_path)
    with pytest.raises(ValueError, match="signing_secret"):
        SlackAdapter(
            SlackSection(bot_token=SecretStr("xoxb-1"), transport="http"),
            data_dir=tmp_path,
        )


async def test_the_reply_owns_the_status_line_in_channels_and_dms(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """Set when the reply opens, taken down by the final post: no call of the core's."""
    async with running_adapter(fake_slack, inbound, tmp_path, control_delay=5.0) as adapter:
        for channel in (DM, CHANNEL):
            ts = fake_slack.next_ts()
            async with adapter.open_reply(thread(ts, channel), ts) as reply:
                await fake_slack.wait_for(
                    lambda c=channel, t=ts: fake_slack.status_of(c, t) != ""  # type: ignore[misc]
                )
                await reply.finish(TurnOutcome(final_text="done"))
            assert fake_slack.status_of(channel, ts) == ""
            assert fake_slack.answer_text(channel, ts) == "done"

    assert [(c, s) for c, _, s in fake_slack.status_log] == [
        (DM, "is working…"),
        (CHANNEL, "is working…"),
    ]
