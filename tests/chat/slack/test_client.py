"""Our bounded retries on top of the SDK's handlers."""

from __future__ import annotations

import functools

import anyio
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.budget import Deferred, RateBudget
from bridge.chat.slack.client import BudgetedWebClient, with_retries
from tests.chat.slack.conftest import CHANNEL
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


async def test_a_429_blocks_the_method_for_everyone_without_sleeping_in_the_call(
    fake_slack: FakeSlack,
) -> None:
    budget = RateBudget()
    client = BudgetedWebClient(budget=budget, token=BOT_TOKEN, base_url=fake_slack.api_url)
    fake_slack.fail("chat.update", status=429, times=1, retry_after=30)
    message = await client.chat_postMessage(channel="C1", markdown_text="x")
    with pytest.raises(SlackApiError):
        # No SDK handler waits out the 30 s: the 429 comes back at once.
        await client.chat_update(channel="C1", ts=message["ts"], markdown_text="y")
    with RateBudget.optional(), pytest.raises(Deferred) as deferred:
        await client.chat_update(channel="C1", ts=message["ts"], markdown_text="y")
    assert deferred.value.wait > 25
    assert len(fake_slack.calls_to("chat.update")) == 1  # the deferred call never left
    assert budget.stats["chat.update"].limited == 1


async def test_the_fake_refuses_blocks_slack_refuses(fake_slack: FakeSlack) -> None:
    """Slack answers invalid_blocks for a section text over 3,000 characters or 51 blocks."""
    client = bare_client(fake_slack)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3000}}
    ok = await client.chat_postMessage(channel=CHANNEL, text="fits", blocks=[section])
    too_long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    for blocks in ([too_long], [section] * 51):
        with pytest.raises(SlackApiError) as failure:
            await client.chat_postMessage(channel=CHANNEL, text="no", blocks=blocks)
        assert failure.value.response["error"] == "invalid_blocks"
        with pytest.raises(SlackApiError):
            await client.chat_update(channel=CHANNEL, ts=ok["ts"], text="no", blocks=blocks)


async def test_a_retry_after_over_30_seconds_is_honoured_in_full(fake_slack: FakeSlack) -> None:
    budget = RateBudget()
    client = BudgetedWebClient(budget=budget, token=BOT_TOKEN, base_url=fake_slack.api_url)
    fake_slack.fail("chat.update", status=429, times=1, retry_after=45)
    message = await client.chat_postMessage(channel="C1", markdown_text="x")
    with pytest.raises(SlackApiError):
        await client.chat_update(channel="C1", ts=message["ts"], markdown_text="y")
    with RateBudget.optional(), pytest.raises(Deferred) as deferred:
        await client.chat_update(channel="C1", ts=message["ts"], markdown_text="y")
    assert deferred.value.wait > 40


async def test_the_fake_keeps_refusing_until_retry_after_has_passed(fake_slack: FakeSlack) -> None:
    client = bare_client(fake_slack)
    fake_slack.fail("chat.postMessage", status=429, times=1, retry_after=1)
    for _ in range(2):  # the second call comes too early: Slack answers 429 again
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(channel="C1", markdown_text="x")
    await anyio.sleep(1.05)
    await client.chat_postMessage(channel="C1", markdown_text="x")
    assert [c.status for c in fake_slack.calls_to("chat.postMessage")] == [429, 429, 200]
