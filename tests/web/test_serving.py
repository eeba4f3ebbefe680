"""The console served by the bridge's own process over real HTTP (uvicorn on a socket)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import anyio
import pytest

from bridge.web.serving import open_console
from tests.web.harness import ROOM, MembersAdapter, dm, running_bridge, settings

pytestmark = pytest.mark.anyio


async def test_the_console_answers_on_its_own_port(tmp_path: Path) -> None:
    raw = settings(tmp_path, web={"port": 0})
    async with running_bridge(tmp_path, raw) as h, open_console(h.bridge.core) as address:
        assert address.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{address}/") as page:
                assert page.status == 401
                assert "!web" in await page.text()
                assert "script-src 'self'" in page.headers["Content-Security-Policy"]
            async with http.get(f"{address}/static/console.js") as script:
                assert script.status == 200
                assert "EventSource" in await script.text()


async def test_a_live_page_open_does_not_hold_the_shutdown(tmp_path: Path) -> None:
    raw = settings(tmp_path, web={"port": 0})
    async with running_bridge(tmp_path, raw) as h:
        await h.say("first [[reply hi]]", where=ROOM, who="alice")
        await h.adapter.wait_finished(1)
        await h.say("!web", where=dm("alice"), who="alice")
        adapter = h.adapter
        assert isinstance(adapter, MembersAdapter)
        path = urlsplit(re.findall(r"https?://\S+", adapter.quiet[-1][1])[0]).path
        with anyio.fail_after(30):
            async with open_console(h.bridge.core) as address:
                # Cookies for an IP address (127.0.0.1) are kept only by an "unsafe" jar.
                http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
                async with http.post(f"{address}{path}", allow_redirects=False) as signed:
                    assert signed.status == 303
                stream = await http.get(f"{address}/thread/events?t={ROOM.key}")
                assert stream.status == 200
            # The console stopped with the stream still open: the client sees it end cleanly.
            with anyio.fail_after(10):
                # (No turn runs: the stream said only that, "idle", when it opened.)
                rest = (await stream.content.read()).replace(b"\r\n", b"\n").strip()
                assert rest == b"event: idle\ndata: {}", rest
                assert stream.content.at_eof()
            stream.close()
            await http.close()
