"""A running bridge on the agy simulator with the web console in front of it, driven through
Starlette's TestClient on the bridge's own event loop (a blocking portal both share)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio.from_thread
from starlette.testclient import TestClient

from bridge.app import open_bridge
from bridge.config import build_config
from bridge.core.events import ThreadRef
from bridge.web.app import console_app
from tests.core.harness import SIMULATOR, SIMULATOR_ENV, Harness
from tests.doubles import RecordingAdapter, signed_in

T = TypeVar("T")
BASE = "http://127.0.0.1:8470"
ROOM = ThreadRef(platform="test", channel="room", thread="t1")
OTHER = ThreadRef(platform="test", channel="other", thread="t9")


def dm(who: str) -> ThreadRef:
    return ThreadRef(platform="test", channel=f"dm-{who}", thread="")


class MembersAdapter(RecordingAdapter):
    """The recording adapter, knowing who is in which channel, which are DMs, and posting
    sign-in links without previews (as Slack's adapter does)."""

    def __init__(self, members: dict[str, set[str]]) -> None:
        super().__init__(platform="test")
        self.members = members
        self.member_calls = 0
        self.quiet: list[tuple[str, str]] = []

    async def is_member(self, channel: str, user_id: str) -> bool:
        self.member_calls += 1
        return user_id in self.members.get(channel, set())

    async def is_direct(self, channel: str) -> bool:
        return channel.startswith("dm-")

    async def post_without_previews(self, thread: ThreadRef, text: str) -> None:
        self.quiet.append((thread.key, text))
        self.changes.touch()


def people() -> dict[str, set[str]]:
    return {
        "room": {"@alice:test", "@bob:test", "@root:test"},
        "other": {"@carol:test"},
        **{f"dm-{who}": {f"@{who}:test"} for who in ("alice", "bob", "carol", "root")},
    }


@asynccontextmanager
async def running_bridge(tmp: Path, raw: dict[str, Any]) -> AsyncIterator[Harness]:
    (tmp / "flags").mkdir(parents=True, exist_ok=True)
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    config = build_config(raw, environ={})
    adapter = MembersAdapter(people())
    async with open_bridge(config, {"test": adapter}) as bridge:
        await bridge.core.recover()
        yield Harness(bridge, adapter, tmp)


def settings(tmp: Path, **extra: Any) -> dict[str, Any]:
    web = {"enabled": True, "public_url": BASE, "admins": ["@root:test"], **extra.pop("web", {})}
    return {
        "bridge": {"data_dir": str(tmp / "data")},
        "agy": {
            "command": SIMULATOR,
            "init_timeout": 20,
            "stop_grace": 2,
            "isolation": "none",
            "pass_env": SIMULATOR_ENV,
            "state_dirs": [],
        },
        "approvals": {"mode": "off"},
        "web": web,
        **extra,
    }


@dataclass
class Web:
    h: Harness
    portal: anyio.from_thread.BlockingPortal
    clients: dict[str, TestClient] = field(default_factory=dict)

    @property
    def adapter(self) -> MembersAdapter:
        adapter = self.h.adapter
        assert isinstance(adapter, MembersAdapter)
        return adapter

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return self.portal.call(functools.partial(fn, *args, **kwargs))

    def client(self, name: str = "anonymous") -> TestClient:
        if name not in self.clients:
            client = TestClient(console_app(self.h.bridge.core), base_url=BASE)
            client.portal = self.portal  # the bridge's loop: the store and the core live there
            self.clients[name] = client
        return self.clients[name]

    def link(self, who: str) -> str:
        """The path of a sign-in link ``who`` asked for with `!web` in their DM."""
        before = len(self.adapter.quiet)
        self.run(self.h.say, "!web", where=dm(who), who=who)
        assert len(self.adapter.quiet) == before + 1, self.adapter.notices[-1:]
        key, text = self.adapter.quiet[-1]
        assert key == dm(who).key
        url = re.search(r"https?://\S+", text)
        assert url is not None, text
        return urlsplit(url.group(0)).path

    def sign_in(self, who: str) -> TestClient:
        client = self.client(who)
        path = self.link(who)
        assert client.get(path).status_code == 200
        answer = client.post(path, follow_redirects=False)
        assert answer.status_code == 303, answer.text
        return client

    def csrf(self, client: TestClient, page: str = "/") -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', client.get(page).text)
        assert found is not None
        return found.group(1)


@contextmanager
def web_console(tmp: Path, **extra: Any) -> Iterator[Web]:
    with anyio.from_thread.start_blocking_portal(backend="asyncio") as portal:
        with portal.wrap_async_context_manager(running_bridge(tmp, settings(tmp, **extra))) as h:
            yield Web(h, portal)
