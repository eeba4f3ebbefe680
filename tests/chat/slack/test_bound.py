"""Slack calls bound to a thread (bridge/chat/slack/bound.py): where they go, how they retry."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import BoundCalls, Retries, RetryObserver, ThreadCalls
from bridge.core.events import ThreadRef
from tests.chat.slack.conftest import ALICE, CHANNEL
from tests.chat.slack.fake_slack import BOT_TOKEN, FakeSlack

pytestmark = pytest.mark.anyio


def bare_client(fake: FakeSlack) -> AsyncWebClient:
    # No SDK handlers: every failure reaches the bound call's retries.
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])


async def test_a_bound_call_lands_in_its_thread_and_a_whole_channel_gets_no_thread(
    fake_slack: FakeSlack,
) -> None:
    client = bare_client(fake_slack)
    retries = Retries(backoff=0.01)
    root = await ThreadCalls(client, ThreadRef(platform="slack", channel=CHANNEL), retries).say(
        "message", markdown_text="top"
    )
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=str(root["ts"]))
    calls = ThreadCalls(client, thread, retries)
    posted = await calls.say("message", markdown_text="inside")
    await calls.edit("edit", str(posted["ts"]), markdown_text="edited")
    await calls.whisper("notice", ALICE, "only for you")
    await calls.delete("removal", str(posted["ts"]))
    page = await calls.replies("history", limit=10)

    [top, inside] = [c.args for c in fake_slack.calls_to("chat.postMessage")]
    assert top.get("thread_ts") is None and inside["thread_ts"] == thread.thread
    assert fake_slack.calls_to("chat.update")[0].args["ts"] == posted["ts"]
    [whisper] = [c.args for c in fake_slack.calls_to("chat.postEphemeral")]
    assert (whisper["user"], whisper["thread_ts"]) == (ALICE, thread.thread)
    assert fake_slack.calls_to("chat.delete")[0].args["ts"] == posted["ts"]
    assert fake_slack.calls_to("conversations.replies")[0].args["ts"] == thread.thread
    assert page["ok"]


async def test_a_bound_call_retries_as_told_and_reports_to_the_observer_of_the_moment(
    fake_slack: FakeSlack,
) -> None:
    seen: list[str] = []
    observers: list[RetryObserver] = []

    def current() -> RetryObserver | None:
        return observers[0] if observers else None

    retries = Retries(attempts=3, backoff=0.01, observer=current)
    thread = ThreadRef(platform="slack", channel=CHANNEL)
    calls = ThreadCalls(bare_client(fake_slack), thread, retries)
    # Set after the calls were bound, as the adapter learns its observer only at start.
    observers.append(seen.append)
    fake_slack.fail("chat.postMessage", status=500, times=2)
    await calls.say("message", markdown_text="x")
    assert [c.status for c in fake_slack.calls_to("chat.postMessage")] == [500, 500, 200]
    assert seen == ["transient", "transient"]

    fake_slack.fail("chat.postMessage", status=500, times=3)
    with pytest.raises(SlackApiError):
        await calls.say("message", markdown_text="y")
    assert len(fake_slack.calls_to("chat.postMessage")) == 6


async def test_what_is_posted_in_a_thread_is_reported_and_nothing_else(
    fake_slack: FakeSlack,
) -> None:
    """A message or a file going up in a thread is reported to the watcher (the adapter's
    running replies: Slack took their status line down); edits, whispers, deletions, reads and
    a call that failed are not."""

    reports: list[ThreadRef] = []

    class Seen:
        def posted(self, thread: ThreadRef) -> None:
            reports.append(thread)

    client = bare_client(fake_slack)
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=fake_slack.next_ts())
    calls = BoundCalls(client, Retries(attempts=1, backoff=0.01), watcher=Seen())(thread)
    posted = await calls.say("message", markdown_text="a notice")
    assert reports == [thread]
    await calls.edit("edit", str(posted["ts"]), markdown_text="edited")
    await calls.whisper("notice", ALICE, "only for you")
    await calls.replies("history", limit=10)
    await calls.delete("removal", str(posted["ts"]))
    assert reports == [thread]
    await calls.upload("file upload", content=b"log", filename="a.log", title="a.log")
    assert reports == [thread, thread]
    fake_slack.fail("chat.postMessage", status=500, times=1)
    with pytest.raises(SlackApiError):
        await calls.say("message", markdown_text="lost")
    assert reports == [thread, thread]
