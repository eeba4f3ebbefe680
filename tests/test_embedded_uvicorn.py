"""uvicorn as the bridge embeds it: serves, wakes once a second while idle, stops on exit()."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import pytest
import uvicorn

from bridge.embedded_uvicorn import EmbeddedServer

pytestmark = pytest.mark.anyio


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


class Counting(EmbeddedServer):
    ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


@asynccontextmanager
async def serving(server: EmbeddedServer) -> AsyncIterator[int]:
    """``server`` serving on a port of its own (yielded) until the block ends; then until it
    has stopped (``server.exit()`` is the block's to call)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    served = anyio.Event()

    async def serve() -> None:
        await server.serve([sock])
        served.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.01)
        yield sock.getsockname()[1]
        with anyio.fail_after(30):
            await served.wait()


async def test_an_idle_server_wakes_once_a_second_and_stops_on_exit() -> None:
    config = uvicorn.Config(app, log_config=None, lifespan="off", ws="none")
    server = Counting(config)
    async with serving(server) as port:
        async with (
            aiohttp.ClientSession() as client,
            client.get(f"http://127.0.0.1:{port}/") as answer,
        ):
            assert await answer.text() == "ok"
            assert "Date" in answer.headers  # uvicorn's Date header is still sent
        before, start = server.ticks, anyio.current_time()
        await anyio.sleep(2)
        elapsed = anyio.current_time() - start
        # uvicorn's own loop: ten a second. A slow machine makes fewer, never more.
        assert server.ticks - before <= elapsed + 1
        server.exit()


class Pauses:
    """uvicorn's server module's ``asyncio``, with every ``sleep`` it asks for noted."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.asked.append(delay)
        await asyncio.sleep(delay)


@pytest.mark.parametrize("open_connection", [False, True])
async def test_a_server_stops_without_uvicorns_pause_unless_a_connection_is_open(
    monkeypatch: pytest.MonkeyPatch, open_connection: bool
) -> None:
    """uvicorn pauses 0.1 s at shutdown for open connections to notice: the end of every
    bridge, when none is open. One kept open still gets it, and is closed."""
    pauses = Pauses()
    monkeypatch.setattr(uvicorn.server, "asyncio", pauses)
    server = EmbeddedServer(uvicorn.Config(app, log_config=None, lifespan="off", ws="none"))
    async with aiohttp.ClientSession() as client, serving(server) as port:
        async with client.get(f"http://127.0.0.1:{port}/") as answer:
            assert await answer.text() == "ok"
        if not open_connection:
            await client.close()
            with anyio.fail_after(30):
                while server.server_state.connections:
                    await anyio.sleep(0.01)
        assert bool(server.server_state.connections) is open_connection
        server.exit()
    assert (0.1 in pauses.asked) is open_connection, pauses.asked
    assert not server.server_state.connections
