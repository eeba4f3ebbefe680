"""The listener's connections send each answer at once: TCP_NODELAY on every accepted socket.

asyncio sets TCP_NODELAY on an accepted connection only when the listening socket was made
with ``IPPROTO_TCP``; made with protocol 0 (as the listener's was), an answer's second write
(uvicorn writes the headers, then the body) could wait for the client's delayed ACK on a
kept-alive connection (about 40 ms each, as bench/console.py found for the console).
"""

from __future__ import annotations

import socket

import aiohttp
import pytest

from bridge.agy.listener import open_listener
from bridge.agy.wire import HookInput, HookReply
from tests.agy.test_listener import HOOK_INPUT


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _reply(event: str, hook_input: HookInput) -> HookReply:
    return HookReply()


@pytest.mark.anyio
async def test_the_listeners_accepted_connections_have_tcp_nodelay() -> None:
    async with open_listener() as listener, aiohttp.ClientSession() as http:
        registration = await listener.register(_reply)
        url = registration.hook_url("PreInvocation")
        async with http.post(url, json=HOOK_INPUT) as answer:
            assert answer.status == 200
            await answer.read()
        # The kept-alive connection is still open on the server's side: look at its socket.
        assert listener.server is not None
        connections = listener.server.server_state.connections
        assert connections
        for protocol in connections:
            sock = protocol.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
