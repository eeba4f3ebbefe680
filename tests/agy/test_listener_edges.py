"""Listener edges found by mutation testing (docs/testing.md): an MCP path for a server the
session does not have, what a registration says of itself, and the hook timeout's check."""

from __future__ import annotations

import pytest

from bridge.agy.listener import open_listener
from bridge.agy.listener.hook_command import hook_command
from tests.agy.test_listener import Recorder, client, post, token_of

pytestmark = pytest.mark.anyio


async def test_an_mcp_path_for_a_server_the_session_lacks_is_404() -> None:
    async with open_listener() as listener, client() as http:
        registration = await listener.register(Recorder())
        base = registration.hook_url("X").rsplit("/hook/", 1)[0]
        status, body, _ = await post(http, f"{base}/mcp/chat", b"{}")
        assert (status, body) == (404, b"not found\n")
        with pytest.raises(KeyError, match="no MCP server 'chat' in <Registration"):
            registration.mcp_url("chat")
        assert token_of(registration) not in repr(registration)


async def test_a_registration_says_whether_it_is_open() -> None:
    async with open_listener() as listener:
        registration = await listener.register(Recorder())
        assert repr(registration) == f"<Registration {registration.label} open mcp=[]>"
        await registration.close()
        assert repr(registration) == f"<Registration {registration.label} closed mcp=[]>"


def test_a_hook_timeout_under_one_second_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match=r"^a hook timeout is at least one second$"):
        hook_command("http://127.0.0.1:1/t/hook/Stop", 0)
