"""HTTP mode: signed requests reach the adapter; a wrong signature gets 401."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.control import STOP_ACTION_ID
from bridge.chat.slack.transport import EVENTS_PATH
from bridge.core.events import ThreadRef
from tests.chat.slack.conftest import (
    ALICE,
    CHANNEL,
    RecordingInbound,
    control_message,
    mention_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack, signed_headers

pytestmark = pytest.mark.anyio


async def post(adapter: SlackAdapter, body: str, headers: dict[str, str]) -> tuple[int, str]:
    url = f"http://127.0.0.1:{adapter.http_port}{EVENTS_PATH}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body.encode(), headers=headers) as response,
    ):
        return response.status, await response.text()


async def test_signed_events_are_handled_and_bad_signatures_refused(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path, transport="http") as adapter:
        assert adapter.http_port
        good = json.dumps(fake_slack.event_callback(mention_event("over http", ts="1.000001")))
        bad = json.dumps(fake_slack.event_callback(mention_event("forged", ts="1.000002")))
        stale = json.dumps(fake_slack.event_callback(mention_event("replayed", ts="1.000003")))

        assert (await post(adapter, good, signed_headers(good)))[0] == 200
        assert (await post(adapter, bad, signed_headers(bad, "not-the-secret")))[0] == 401
        old = int(time.time()) - 3600
        assert (await post(adapter, stale, signed_headers(stale, at=old)))[0] == 401

    assert [m.text for m in inbound.submitted] == ["over http"]
    assert inbound.submitted[0].thread == ThreadRef(
        platform="slack", channel=CHANNEL, thread="1.000001"
    )


async def test_url_verification_is_answered(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "abc123", "token": "x"})
    async with running_adapter(fake_slack, inbound, tmp_path, transport="http") as adapter:
        status, text = await post(adapter, body, signed_headers(body))

    assert status == 200
    assert "abc123" in text


async def test_stop_button_over_http(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    root = fake_slack.next_ts()
    thread = ThreadRef(platform="slack", channel=CHANNEL, thread=root)
    async with running_adapter(fake_slack, inbound, tmp_path, transport="http") as adapter:
        async with adapter.open_reply(thread, None):
            await fake_slack.wait_for(
                lambda: control_message(fake_slack, CHANNEL, root) is not None
            )
            control = control_message(fake_slack, CHANNEL, root)
            assert control is not None
            payload: dict[str, Any] = fake_slack.block_action(control, ALICE, STOP_ACTION_ID)
            body = urlencode({"payload": json.dumps(payload)})
            headers = signed_headers(body) | {"Content-Type": "application/x-www-form-urlencoded"}
            status, _ = await post(adapter, body, headers)
            await inbound.wait_for(lambda: inbound.stops)

    assert status == 200
    assert [(t, a.id) for t, a in inbound.stops] == [(thread, ALICE)]
