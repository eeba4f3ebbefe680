"""The console served by the bridge's own process over real HTTP (uvicorn on a socket)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from bridge.web.serving import open_console
from tests.web.harness import running_bridge, settings

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
