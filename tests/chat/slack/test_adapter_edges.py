"""The Slack adapter's smaller promises, each found by mutation testing (see docs/testing.md):
marks on messages, notices, uploads, history bounds, file look-ups, and log lines that name
the thread they concern."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bridge.chat.slack.access import NOTICE_TEXT
from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.control import STOP_ACTION_ID
from bridge.chat.slack.events import FILES_INFO
from bridge.chat.slack.reply import Recipient
from bridge.chat.slack.status import STATUS_TEXT
from bridge.core.events import (
    ApprovalRequest,
    AttachmentError,
    AttachmentRef,
    Author,
    Reaction,
    ThreadRef,
)
from tests.chat.slack.conftest import (
    ALICE,
    BOB,
    CHANNEL,
    MALLORY,
    RecordingInbound,
    control_message,
    message_event,
    running_adapter,
    slack_section,
)
from tests.chat.slack.fake_slack import BOT_USER, TEAM, FakeSlack
from tests.doubles import fetch_into, outgoing

pytestmark = pytest.mark.anyio


def adapter_for(fake: FakeSlack, tmp_path: Path, **overrides: Any) -> SlackAdapter:
    """An adapter that is not running: enough for the calls that go out to Slack."""
    return SlackAdapter(slack_section(fake, **overrides), data_dir=tmp_path, retry_backoff=0.01)


def thread(root: str) -> ThreadRef:
    return ThreadRef(platform="slack", channel=CHANNEL, thread=root)


def removed(fake: FakeSlack) -> list[tuple[str, str]]:
    return [(c.args["timestamp"], c.args["name"]) for c in fake.calls_to("reactions.remove")]


# -- marks on messages ------------------------------------------------------------------------


async def test_a_message_taken_by_a_turn_loses_its_queued_mark_and_only_it(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    first, second = fake_slack.next_ts(), fake_slack.next_ts()
    await adapter.react(thread(first), first, Reaction.QUEUED)
    await adapter.react(thread(first), second, Reaction.INJECTED)
    # The second message was never queued: nothing to take off it.
    assert removed(fake_slack) == []
    await adapter.react(thread(first), first, Reaction.INJECTED)
    assert removed(fake_slack) == [(first, "inbox_tray")]
    # Taken off once: a later mark does not try again.
    await adapter.react(thread(first), first, Reaction.FAILED)
    assert removed(fake_slack) == [(first, "inbox_tray")]
    assert fake_slack.reactions[(CHANNEL, first)] == {"eyes", "warning"}
    assert fake_slack.reactions[(CHANNEL, second)] == {"eyes"}


async def test_a_mark_slack_already_has_counts_as_put(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    ts = fake_slack.next_ts()
    # Put by an earlier run of the bridge (Slack answers already_reacted).
    fake_slack.reactions[(CHANNEL, ts)] = {"inbox_tray"}
    await adapter.react(thread(ts), ts, Reaction.QUEUED)
    assert "reaction in" not in caplog.text
    await adapter.react(thread(ts), ts, Reaction.FAILED)
    assert fake_slack.reactions[(CHANNEL, ts)] == {"warning"}


async def test_a_failed_mark_is_logged_with_its_thread_and_not_remembered(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    ts = fake_slack.next_ts()
    fake_slack.fail("reactions.add", status=500, times=3)
    await adapter.react(thread(ts), ts, Reaction.QUEUED)
    [record] = [r for r in caplog.records if "reaction in" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"Slack: reaction in {thread(ts).key} failed: HTTP 500"
    await adapter.react(thread(ts), ts, Reaction.INJECTED)
    assert removed(fake_slack) == []


async def test_a_mark_someone_took_off_already_is_no_failure(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    gone, failing = fake_slack.next_ts(), fake_slack.next_ts()
    for ts in (gone, failing):
        await adapter.react(thread(ts), ts, Reaction.QUEUED)
    fake_slack.reactions[(CHANNEL, gone)].clear()
    with caplog.at_level(logging.INFO, "bridge.chat.slack.reactions"):
        await adapter.react(thread(gone), gone, Reaction.INJECTED)
        assert "removing a reaction" not in caplog.text
        fake_slack.fail("reactions.remove", status=500, times=3)
        await adapter.react(thread(failing), failing, Reaction.INJECTED)
    [record] = [r for r in caplog.records if "removing a reaction" in r.getMessage()]
    assert record.getMessage() == (
        f"Slack: removing a reaction in {thread(failing).key} failed: HTTP 500"
    )


# -- posts beside a running reply ---------------------------------------------------------------


def status_sets(fake: FakeSlack, root: str) -> int:
    return len([s for c, t, s in fake.status_log if (c, t) == (CHANNEL, root) and s])


async def settled_with_status(fake: FakeSlack, root: str) -> int:
    """Once the reply's status and Stop control are up: how often the status was set."""
    await fake.wait_for(lambda: control_message(fake, CHANNEL, root) is not None)
    await fake.wait_for(lambda: fake.status_of(CHANNEL, root) == STATUS_TEXT)
    return status_sets(fake, root)


async def test_a_post_beside_a_running_reply_puts_its_status_back(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    page = tmp_path / "notes.txt"
    page.write_text("notes")
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread(root), None):
            for post in (
                adapter.post_message(thread(root), "a notice beside the answer"),
                adapter.post_file(thread(root), outgoing(page), None),
            ):
                before = await settled_with_status(fake_slack, root)
                await post
                # Slack takes the status down with a post; the reply puts it up again.
                await fake_slack.wait_for(
                    lambda: (
                        status_sets(fake_slack, root) == before + 1  # noqa: B023
                        and fake_slack.status_of(CHANNEL, root) == STATUS_TEXT
                    )
                )


async def test_an_upload_is_named_for_its_file_in_its_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    root = fake_slack.next_ts()
    page = tmp_path / "report.txt"
    page.write_text("the report")
    # Slack's answer to the upload fails twice more than its own client retries.
    fake_slack.fail("files.getUploadURLExternal", status=500, times=3)
    await adapter.post_file(thread(root), outgoing(page), None)
    await adapter.post_file(thread(root), outgoing(page), "Weekly report")
    untitled, titled = fake_slack.uploads.values()
    assert (untitled["filename"], untitled["title"]) == ("report.txt", "report.txt")
    assert (titled["filename"], titled["title"]) == ("report.txt", "Weekly report")
    assert titled["thread_ts"] == root and titled["channel"] == CHANNEL


async def test_a_retried_message_is_reported_to_the_retry_observer(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    retries: list[str] = []
    adapter.observe_retries(retries.append)
    root = fake_slack.next_ts()
    for method in ("chat.postMessage", "files.getUploadURLExternal"):
        fake_slack.fail(method, status=500, times=3)
    page = tmp_path / "a.txt"
    page.write_text("a")
    await adapter.post_message(thread(root), "hello")
    await adapter.post_file(thread(root), outgoing(page), None)
    assert retries.count("transient") >= 2
    lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert any(f"Slack message failed for {thread(root).key}" in line for line in lines)
    assert any(f"Slack file upload failed for {thread(root).key}" in line for line in lines)


async def test_each_429_is_counted_once(fake_slack: FakeSlack, tmp_path: Path) -> None:
    """The client counts every 429 Slack answers; the retry after it adds no second count."""
    adapter = adapter_for(fake_slack, tmp_path)
    retries: list[str] = []
    adapter.observe_retries(retries.append)
    fake_slack.fail("chat.postMessage", status=429, times=2, retry_after=0)
    await adapter.post_message(thread(fake_slack.next_ts()), "hello")
    assert retries == ["429", "429"], retries


# -- access notices -----------------------------------------------------------------------------


async def test_each_refused_person_is_told_once_with_the_notice_text(
    fake_slack: FakeSlack,
    inbound: RecordingInbound,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_slack.add_user("UEVE0001", "eve")
    retries: list[str] = []
    caplog.set_level(logging.INFO, "bridge.chat.slack.intake")
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        adapter.observe_retries(retries.append)
        fake_slack.fail("chat.postEphemeral", status=500, times=5)
        refused_ts = []
        for user in (MALLORY, "UEVE0001", MALLORY):
            ts = fake_slack.next_ts()
            refused_ts.append(ts)
            await fake_slack.wait_ack(
                await fake_slack.push_event(
                    message_event(f"<@{BOT_USER}> hi from {user}", user=user, ts=ts)
                )
            )
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 2)
    assert sorted(n["user"] for n in fake_slack.ephemerals) == sorted([MALLORY, "UEVE0001"])
    for notice in fake_slack.ephemerals:
        assert notice["text"] == NOTICE_TEXT
        assert notice["channel"] == CHANNEL
    assert "transient" in retries
    assert inbound.submitted == []
    # Each notice goes to the thread of the refused message; the refusal is logged.
    assert {n["thread_ts"] for n in fake_slack.ephemerals} <= set(refused_ts)
    assert len({n["thread_ts"] for n in fake_slack.ephemerals}) == 2
    assert f"Slack: {MALLORY} in {CHANNEL} is not allowed" in caplog.messages
    # The retried notice is logged with the thread it concerns.
    lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert any(
        line.startswith(f"Slack access notice failed for slack|{CHANNEL}|") for line in lines
    )


async def test_a_stop_click_in_an_allowed_channel_is_served(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    async with running_adapter(
        fake_slack, inbound, tmp_path, allowed_users=[], allowed_channels=[CHANNEL]
    ) as adapter:
        async with adapter.open_reply(thread(root), None):
            await fake_slack.wait_for(
                lambda: control_message(fake_slack, CHANNEL, root) is not None
            )
            control = control_message(fake_slack, CHANNEL, root)
            assert control is not None
            await fake_slack.wait_ack(await fake_slack.click(control, MALLORY, STOP_ACTION_ID))
            await inbound.wait_for(lambda: len(inbound.stops) == 1)
    [(stopped, by)] = inbound.stops
    assert stopped == thread(root) and by.id == MALLORY


class FailingStop(RecordingInbound):
    async def stop(self, thread: ThreadRef, by: Author) -> None:
        await super().stop(thread, by)
        raise RuntimeError("the turn would not stop")


async def test_a_stop_that_fails_is_logged_with_its_thread(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbound = FailingStop()
    root = fake_slack.next_ts()
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread(root), None):
            await fake_slack.wait_for(
                lambda: control_message(fake_slack, CHANNEL, root) is not None
            )
            control = control_message(fake_slack, CHANNEL, root)
            assert control is not None
            await fake_slack.wait_ack(await fake_slack.click(control, BOB, STOP_ACTION_ID))
            await inbound.wait_for(lambda: len(inbound.stops) == 1)
            await fake_slack.wait_for(lambda: "stopping" in caplog.text)
    [record] = [r for r in caplog.records if "stopping" in r.getMessage()]
    assert record.getMessage() == f"Slack: stopping {thread(root).key} failed"
    assert record.exc_info is not None


# -- history, files ---------------------------------------------------------------------------


async def test_history_is_asked_only_for_a_thread_and_a_positive_limit(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    root = fake_slack.add_message(CHANNEL, ALICE, "the question")
    fake_slack.add_message(CHANNEL, BOB, "an answer", thread_ts=root.ts)
    # Not signed in yet: no history.
    assert await adapter.history(thread(root.ts), 5) == []
    await adapter._identity.sign_in()
    assert await adapter.history(thread(root.ts), 0) == []
    assert await adapter.history(ThreadRef(platform="slack", channel=CHANNEL), 5) == []
    assert fake_slack.calls_to("conversations.replies") == []
    assert [e.text for e in await adapter.history(thread(root.ts), 1)] == ["an answer"]
    missing = thread(fake_slack.next_ts())
    assert await adapter.history(missing, 5) == []
    [record] = [r for r in caplog.records if "no history" in r.getMessage()]
    assert record.getMessage() == f"Slack: no history for {missing.key}: thread_not_found"


async def test_a_file_needs_the_bot_token(fake_slack: FakeSlack, tmp_path: Path) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    adapter.client.token = None
    ref = AttachmentRef(name="a.png", source=f"{fake_slack.url}/files/F1/a.png")
    with pytest.raises(RuntimeError, match=r"^the Slack client has no bot token$"):
        await fetch_into(adapter, ref, tmp_path / "a.png", 1000)


async def test_a_connect_file_without_a_download_link_is_refused_in_words(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    file = fake_slack.add_file(b"x", "plain.txt", "text/plain", connect=True)
    # files.info answers, but with no URL at all.
    original = fake_slack._file_object

    def without_urls(file_id: str) -> dict[str, Any]:
        described = original(file_id)
        described.pop("url_private")
        described.pop("url_private_download")
        return described

    fake_slack._file_object = without_urls  # type: ignore[method-assign]
    # files.info fails more often than the client retries on its own: the adapter retries.
    fake_slack.fail("files.info", status=500, times=3)
    retries: list[str] = []
    adapter.observe_retries(retries.append)
    ref = AttachmentRef(name="plain.txt", source=FILES_INFO + file["id"])
    with pytest.raises(AttachmentError, match=r"^plain\.txt: Slack gave no download link"):
        await fetch_into(adapter, ref, tmp_path / "plain.txt", 1000)
    assert "transient" in retries
    lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert any(line.startswith(f"Slack files.info failed for {file['id']} ") for line in lines)


async def test_an_approval_request_beside_a_running_reply_puts_its_status_back(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    request = ApprovalRequest(
        id="r1", thread=thread(root), tool="run_command", summary="ls", text="May I run `ls`?"
    )
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        async with adapter.open_reply(thread(root), None):
            before = await settled_with_status(fake_slack, root)
            await adapter.ask_approval(request)
            await fake_slack.wait_for(
                lambda: (
                    status_sets(fake_slack, root) == before + 1
                    and fake_slack.status_of(CHANNEL, root) == STATUS_TEXT
                )
            )
        # Without a running reply there is no status to put back.
        await adapter.ask_approval(request.model_copy(update={"id": "r2"}))


async def test_an_enterprise_grid_author_is_known_by_their_organisation(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path):
        event = message_event(
            "hello", channel="D0ALICE1", channel_type="im", ts=fake_slack.next_ts()
        )
        del event["team"]  # Enterprise Grid: the envelope names the organisation
        payload = fake_slack.event_callback(event)
        payload["enterprise_id"] = "E0GRID01"
        envelope = {"type": "events_api", "accepts_response_payload": False, "payload": payload}
        await fake_slack.wait_ack(await fake_slack._push(envelope))
        await inbound.wait_for(lambda: len(inbound.submitted) == 1)
        # No team on the event and no enterprise: the envelope's team.
        event = message_event(
            "again", channel="D0ALICE1", channel_type="im", ts=fake_slack.next_ts()
        )
        del event["team"]
        payload = fake_slack.event_callback(event)
        payload["team_id"] = "T0OTHER1"
        envelope = {"type": "events_api", "accepts_response_payload": False, "payload": payload}
        await fake_slack.wait_ack(await fake_slack._push(envelope))
        await inbound.wait_for(lambda: len(inbound.submitted) == 2)
    first, second = inbound.submitted
    assert first.author.org == "E0GRID01"
    assert second.author.org == "T0OTHER1"


async def test_a_streams_recipient_is_the_stored_author_else_the_writer_seen_else_nobody(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    root, reply = fake_slack.next_ts(), fake_slack.next_ts()
    adapter._recipients.writers.put((CHANNEL, root), Recipient(user_id=ALICE, team_id="T0ROOT01"))
    adapter._recipients.writers.put((CHANNEL, reply), Recipient(user_id=BOB, team_id="T0REPLY1"))
    stored = Author(id=MALLORY, display_name="m", org="E0GRID01")
    # The author the core stored with the message wins (it survives a restart).
    assert adapter._recipients.of(thread(root), reply, stored) == Recipient(MALLORY, "E0GRID01")
    # An author without an organisation is not enough: the writer of the message replied to...
    no_org = Author(id=MALLORY, display_name="m")
    assert adapter._recipients.of(thread(root), reply, no_org) == Recipient(BOB, "T0REPLY1")
    # ... else the writer of the thread's root, else nobody (never a half-filled pair).
    assert adapter._recipients.of(thread(root), None, None) == Recipient(ALICE, "T0ROOT01")
    assert adapter._recipients.of(thread(root), fake_slack.next_ts(), None) == Recipient(
        ALICE, "T0ROOT01"
    )
    assert adapter._recipients.of(thread(fake_slack.next_ts()), None, None) == Recipient()
    other = ThreadRef(platform="slack", channel="C0ELSEWHERE", thread=root)
    assert adapter._recipients.of(other, reply, None) == Recipient()
    assert adapter._recipients.of(ThreadRef(platform="slack", channel=CHANNEL), None, None) == (
        Recipient()
    )
    # A turn the bridge opened (a schedule) answers the bot's own root message: the bot, once
    # it knows who it is; a person's message it saw still wins.
    schedule = Author.schedule("morning")
    fresh = thread(fake_slack.next_ts())
    assert adapter._recipients.of(fresh, None, schedule) == Recipient()
    await adapter._identity.sign_in()
    assert adapter._recipients.of(fresh, None, schedule) == Recipient(BOT_USER, TEAM)
    assert adapter._recipients.of(thread(root), None, schedule) == Recipient(ALICE, "T0ROOT01")
    assert adapter._recipients.of(fresh, None, None) == Recipient()


async def test_a_reply_needs_a_running_adapter(fake_slack: FakeSlack, tmp_path: Path) -> None:
    adapter = adapter_for(fake_slack, tmp_path)
    with pytest.raises(RuntimeError, match=r"^the Slack adapter is not running$"):
        async with adapter.open_reply(thread(fake_slack.next_ts()), None):
            pass
