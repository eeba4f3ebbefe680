"""Our bounded retries on top of the SDK's handlers."""

from __future__ import annotations

import functools

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.client import attach_retry_handlers, retry_handlers, with_retries
from tests.chat.slack.fake_slack import BOT_TOKEN, FakeSlack

pytestmark = pytest.mark.anyio


def bare_client(fake: FakeSlack) -> AsyncWebClient:
    # No SDK handlers: every failure reaches with_retries.
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])


async def test_transient_failures_are_retried_then_given_up(fake_slack: FakeSlack) -> None:
    client = bare_client(fake_slack)
    post = functools.partial(client.chat_postMessage, channel="C1", markdown_text="x")
    fake_slack.fail("chat.postMessage", status=500, times=2)
    await with_retries(post, what="message", thread_key="k", attempts=3, backoff=0.01)
    assert [c.status for c in fake_slack.calls_to("chat.postMessage")] == [500, 500, 200]

    fake_slack.fail("chat.postMessage", status=429, times=3, retry_after=0)
    with pytest.raises(SlackApiError):
        await with_retries(post, what="message", thread_key="k", attempts=3, backoff=0.01)
    assert len(fake_slack.calls_to("chat.postMessage")) == 6


async def test_permanent_errors_are_not_retried(fake_slack: FakeSlack) -> None:
    client = bare_client(fake_slack)
    update = functools.partial(client.chat_update, channel="C1", ts="1.1", markdown_text="x")
    with pytest.raises(SlackApiError):
        await with_retries(update, what="edit", thread_key="k", attempts=5, backoff=0.01)
    assert [c.error for c in fake_slack.calls_to("chat.update")] == ["message_not_found"]


def test_handlers_are_attached_once() -> None:
    client = AsyncWebClient(token="xoxb-1", retry_handlers=[])
    attach_retry_handlers(client)
    attach_retry_handlers(client)
    assert [type(h) for h in client.retry_handlers] == [type(h) for h in retry_handlers()]
