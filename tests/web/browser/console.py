"""A whole bridge for the browser: the Slack fake, the core on the agy simulator, and the web
console on its own server (``bridge.web.serving.open_console``, as `make run` serves it), all
on the test's event loop; the browser reaches the console over loopback HTTP."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bridge.app import Bridge, open_bridge, start_adapters
from bridge.chat.slack.adapter import SlackAdapter
from bridge.config import build_config
from bridge.core.events import ThreadRef
from bridge.web.serving import open_console
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, OTHER_CHANNEL, message_event
from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, FakeSlack
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in
from tests.ports import free_port
from tests.web.browser.chrome import Page

SIMULATOR = [sys.executable, "-m", "bridge.simulator"]
# Each person's DM with the bot (Slack's DM ids start with D).
DMS = {ALICE: "D0ALICE1", BOB: "D0BOB001"}
CAROL = "UCAROL01"  # in the other channel only
DMS[CAROL] = "D0CAROL1"
_LINK = re.compile(r"https?://\S+/signin/[A-Za-z0-9._-]+")


@dataclass
class Live:
    bridge: Bridge
    fake: FakeSlack
    base: str
    tmp: Path

    def thread(self, ts: str, channel: str = CHANNEL) -> ThreadRef:
        return ThreadRef(platform="slack", channel=channel, thread=ts)

    def page_of(self, ts: str, channel: str = CHANNEL) -> str:
        return f"{self.base}/thread?t={self.thread(ts, channel).key}"

    async def say(self, text: str, *, user: str = ALICE, channel: str = CHANNEL) -> str:
        """A message to the bot that starts a thread; its ts."""
        ts = self.fake.next_ts()
        await self.fake.push_event(
            message_event(f"<@{BOT_USER}> {text}", user=user, channel=channel, ts=ts)
        )
        return ts

    async def link(self, user: str) -> str:
        """The sign-in link `!web` in ``user``'s DM brings (posted with unfurling off)."""
        dm = DMS[user]
        before = {m.ts for m in self.fake.messages.values()}

        def posted() -> list[Any]:
            return [
                m
                for m in self.fake.messages.values()
                if m.channel == dm and m.ts not in before and _LINK.search(m.visible or "")
            ]

        await self.fake.push_event(
            message_event("!web", user=user, channel=dm, channel_type="im", ts=self.fake.next_ts())
        )
        await self.fake.wait_for(lambda: bool(posted()))
        [message] = posted()
        # A preview bot would GET the link: Slack is told not to unfurl it.
        assert str(message.unfurl_links).lower() in ("false", "0"), message
        found = _LINK.search(message.visible)
        assert found is not None
        return found.group(0)

    async def sign_in(self, page: Page, user: str, name: str) -> None:
        """``user`` signs in the way a person does: the link, then its button."""
        await page.open(await self.link(user))
        await page.click("#signin")
        await page.wait_text("#who", name)


@asynccontextmanager
async def live_console(
    fake: FakeSlack, tmp: Path, *, approvals: dict[str, Any] | None = None
) -> AsyncIterator[Live]:
    """Alice and Bob in the general channel, Carol in the other one; nobody is an admin."""
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    fake.add_user(ALICE, "alice", "alice@example.org")
    fake.add_user(BOB, "bob")
    fake.add_user(CAROL, "carol")
    for user, dm in DMS.items():
        fake.agent_view.dms[user] = dm
        fake.agent_view.members[dm] = {user, BOT_USER}
    fake.agent_view.members[CHANNEL] = {ALICE, BOB, BOT_USER}
    fake.agent_view.members[OTHER_CHANNEL] = {CAROL, BOT_USER}
    port = free_port()
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp / "data")},
            "agy": {
                "command": SIMULATOR,
                "init_timeout": 30,
                "isolation": "none",
                "pass_env": SIMULATOR_ENV,
                "state_dirs": [],
            },
            "slack": {
                "bot_token": BOT_TOKEN,
                "app_token": APP_TOKEN,
                "api_url": fake.api_url,
                "allowed_users": [ALICE, BOB, CAROL],
            },
            "approvals": approvals or {"mode": "off"},
            # The links `!web` sends name the address people open: this one.
            "web": {"enabled": True, "port": port, "public_url": f"http://127.0.0.1:{port}"},
        },
        environ={},
    )
    adapter = SlackAdapter(
        config.slack,
        data_dir=config.bridge.data_dir,
        reply_interval=0.05,
        socket_ping_interval=1.0,
        retry_backoff=0.05,
        home_interval=0.3,
    )
    async with open_bridge(config, {"slack": adapter}) as bridge:
        async with open_console(bridge.core) as base, anyio.create_task_group() as tg:
            await start_adapters(bridge, tg)
            yield Live(bridge, fake, base, tmp)
            await bridge.core.shutdown()
            tg.cancel_scope.cancel()
