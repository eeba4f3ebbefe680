"""Fixtures for the Slack adapter: the fake Slack, a recording Inbound, a running adapter.

For end-to-end tests elsewhere (with the real core as the Inbound)::

    from tests.chat.slack.conftest import mention_event, running_adapter
    from tests.chat.slack.fake_slack import serve_fake_slack

    async with serve_fake_slack() as fake, running_adapter(fake, core, tmp_path) as adapter:
        fake.add_user("UALICE01", "alice")
        await fake.wait_ack(await fake.push_event(mention_event("hi", ts=fake.next_ts())))
        await fake.wait_for(lambda: fake.answer_text(channel, ts) == "…")

or import the ``fake_slack`` fixture into another conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import SecretStr

from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.budget import RateBudget
from bridge.chat.slack.reply import ReplySettings
from bridge.config import SlackSection
from bridge.core.commands import parse_command
from bridge.core.events import Author, IncomingMessage, SubmitOutcome, ThreadRef
from tests.chat.slack.fake_slack import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    WAIT,
    FakeSlack,
    Message,
    serve_fake_slack,
)

ALICE = "UALICE01"
BOB = "UBOB0001"
MALLORY = "UMALLORY"
CHANNEL = "C0GENERAL"
OTHER_CHANNEL = "C0RANDOM"
DM = "D0ALICE1"


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    """The fake Slack with three people: Alice and Bob (allowed by default), and Mallory."""
    async with serve_fake_slack() as fake:
        fake.add_user(ALICE, "alice", "alice@example.org")
        fake.add_user(BOB, "bob")
        fake.add_user(MALLORY, "mallory")
        yield fake


class RecordingInbound:
    """The core's side, recorded: submissions, stops, and a set of known conversations.

    Like the core, it drops a second message with the same event id and makes a submitted
    message's thread a conversation.
    """

    def __init__(self, conversations: set[ThreadRef] | None = None) -> None:
        self.submitted: list[IncomingMessage] = []
        self.duplicates: list[IncomingMessage] = []
        self.stops: list[tuple[ThreadRef, Author]] = []
        self.conversations: set[ThreadRef] = set(conversations or ())
        self.titles: list[tuple[ThreadRef, str, Author]] = []
        self._changed = anyio.Event()

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        if any(seen.event_id == message.event_id for seen in self.submitted):
            self.duplicates.append(message)
            self._notify()
            return SubmitOutcome.DUPLICATE
        self.submitted.append(message)
        self._notify()
        if parse_command(message.text) is not None:
            return SubmitOutcome.COMMAND  # as the core answers a !command
        self.conversations.add(message.thread)
        return SubmitOutcome.ACCEPTED

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        self.stops.append((thread, by))
        self._notify()

    async def is_conversation(self, thread: ThreadRef) -> bool:
        return thread in self.conversations

    async def retitle(self, thread: ThreadRef, title: str, by: Author) -> bool:
        known = thread in self.conversations
        if known:
            self.titles.append((thread, title, by))
        self._notify()
        return known

    async def wait_for(self, predicate: Any, seconds: float = WAIT) -> None:
        with anyio.fail_after(seconds):
            while True:
                changed = self._changed
                if predicate():
                    return
                await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


@pytest.fixture
def inbound() -> RecordingInbound:
    return RecordingInbound()


def slack_section(fake: FakeSlack, **overrides: Any) -> SlackSection:
    """A config pointing at the fake; Alice and Bob are allowed everywhere by default."""
    values: dict[str, Any] = {
        "bot_token": SecretStr(BOT_TOKEN),
        "app_token": SecretStr(APP_TOKEN),
        "signing_secret": SecretStr(SIGNING_SECRET),
        "api_url": fake.api_url,
        "allowed_users": [ALICE, BOB],
        "http_port": 0,
    }
    values.update(overrides)
    return SlackSection(**values)


@asynccontextmanager
async def running_adapter(
    fake: FakeSlack,
    inbound: Any,
    data_dir: Path,
    *,
    reply_interval: float = 0.05,
    control_delay: float = 0.0,
    status_refresh: float = 90.0,
    stream_max_age: float = 240.0,
    budget: RateBudget | None = None,
    home_interval: float = 0.05,
    **overrides: Any,
) -> AsyncIterator[SlackAdapter]:
    """A :class:`SlackAdapter` connected to ``fake`` (Socket Mode unless ``transport="http"``),
    running until the block ends. Retries and edits are fast so tests stay quick, and the Stop
    control goes up at once unless ``control_delay`` says otherwise."""
    section = slack_section(fake, **overrides)
    adapter = SlackAdapter(
        section,
        data_dir=data_dir,
        socket_ping_interval=1.0,
        retry_backoff=0.05,
        reply_settings=ReplySettings(
            streaming=section.streaming,
            interval=reply_interval,
            backoff=0.05,
            control_delay=control_delay,
            status_refresh=status_refresh,
            stream_max_age=stream_max_age,
            feedback=section.feedback,
            task_display=section.task_display,
        ),
        budget=budget,
        home_interval=home_interval,
    )
    async with anyio.create_task_group() as tg:
        ready = anyio.Event()
        tg.start_soon(adapter.run, inbound, ready.set)
        with anyio.fail_after(10):
            await ready.wait()
        try:
            yield adapter
        finally:
            tg.cancel_scope.cancel()


def message_event(
    text: str,
    *,
    user: str = ALICE,
    channel: str = CHANNEL,
    ts: str,
    thread_ts: str | None = None,
    channel_type: str = "channel",
    **extra: Any,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "channel_type": channel_type,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "team": "T0FAKE01",
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    event.update(extra)
    return event


def control_message(fake: FakeSlack, channel: str, thread_ts: str) -> Message | None:
    """The bot's message with the Stop button in the thread, once it is up."""
    return next((m for m in fake.thread(channel, thread_ts) if m.buttons), None)


def mention_event(
    text: str, *, user: str = ALICE, channel: str = CHANNEL, ts: str, thread_ts: str | None = None
) -> dict[str, Any]:
    """An ``app_mention`` with the bot's mention in front of ``text``."""
    event = message_event(f"<@{BOT_USER}> {text}", user=user, channel=channel, ts=ts)
    event["type"] = "app_mention"
    event.pop("channel_type")
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event
