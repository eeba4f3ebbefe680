"""User lookups: cached, bounded, and never failing the event."""

from __future__ import annotations

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.users import UserDirectory, author_from_user
from bridge.core.events import Author
from tests.chat.slack.conftest import ALICE, BOB
from tests.chat.slack.fake_slack import BOT_TOKEN, FakeSlack

pytestmark = pytest.mark.anyio


def client_for(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url)


async def test_lookups_are_cached_and_bounded(fake_slack: FakeSlack) -> None:
    directory = UserDirectory(client_for(fake_slack), capacity=1)
    first = await directory.author(ALICE)
    assert first == Author(id=ALICE, display_name="alice", email="alice@example.org")
    assert await directory.author(ALICE) == first
    assert len(fake_slack.calls_to("users.info")) == 1
    await directory.author(BOB)  # evicts Alice
    await directory.author(ALICE)
    assert len(fake_slack.calls_to("users.info")) == 3


async def test_unknown_users_fall_back_to_their_id(fake_slack: FakeSlack) -> None:
    directory = UserDirectory(client_for(fake_slack))
    assert await directory.author("UNOBODY") == Author(id="UNOBODY")


def test_names_fall_back_in_order() -> None:
    assert author_from_user({"id": "U1", "profile": {"real_name": "Real"}}).display_name == "Real"
    assert author_from_user({"id": "U1", "name": "handle", "profile": {}}).display_name == "handle"
    assert author_from_user({"id": "U1"}).email is None
