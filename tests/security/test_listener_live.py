"""The listener of a RUNNING bridge, attacked from outside with what its session files reveal.

The URLs come from the session's own ``hooks.json`` and ``mcp_config.json`` (what agy reads).
The genuine requests succeed, so every refusal below is the listener refusing, not a wrong URL.
"""

from __future__ import annotations

import errno
import json
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.core.harness import Harness, running
from tests.security.session import SessionUrls, plugin_dirs, session_urls

pytestmark = pytest.mark.anyio

PROTOCOL = "2025-06-18"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
NOT_FOUND = (404, b"not found\n")


@asynccontextmanager
async def live_session(tmp: Path, **agy: Any) -> AsyncIterator[tuple[Harness, SessionUrls]]:
    """A bridge with one idle session (its agy process alive, its token registered)."""
    async with running(tmp, **agy) as h:
        await h.say("hello")
        await h.adapter.wait_finished(1)
        [folder] = plugin_dirs(tmp / "data")
        yield h, session_urls(folder)


def hook_input(conversation: str = "conv-from-outside") -> bytes:
    return json.dumps({"conversationId": conversation, "invocationNum": 0}).encode()


def initialize() -> bytes:
    params = {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "outsider", "version": "0"},
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    ).encode()


def rpc(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}).encode()


async def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=body, headers=headers or {}) as response,
    ):
        return response.status, await response.read()


def almost(token: str) -> list[str]:
    """Tokens an attacker might try: other, truncated, extended, one character changed."""
    flip = "A" if token[-1] != "A" else "B"
    middle = len(token) // 2
    changed = token[:middle] + ("x" if token[middle] != "x" else "y") + token[middle + 1 :]
    return [
        secrets.token_urlsafe(32),
        token[:-1],
        token + "A",
        token[:-1] + flip,
        changed,
        token[:8],
        token.swapcase(),
        token + "/",
        "",
    ]


async def test_genuine_requests_work_and_every_wrong_token_is_the_same_404(
    tmp_path: Path,
) -> None:
    async with live_session(tmp_path) as (_, urls):
        assert await post(urls.hook, hook_input()) == (200, b"{}")
        status, _ = await post(urls.mcp, initialize(), MCP_HEADERS)
        assert status == 200
        for wrong in almost(urls.token):
            for tail, body, headers in (
                ("hook/PreInvocation", hook_input(), {}),
                ("mcp/chat", initialize(), MCP_HEADERS),
            ):
                url = f"{urls.base}/{wrong}/{tail}"
                assert await post(url, body, headers) == NOT_FOUND, wrong
        # The token anywhere but the path is no token.
        elsewhere = [
            (f"{urls.base}/hook/PreInvocation?token={urls.token}", {}),
            (f"{urls.base}/hook/PreInvocation", {"Authorization": f"Bearer {urls.token}"}),
            (f"{urls.base}//hook/PreInvocation", {"Cookie": f"token={urls.token}"}),
            (f"{urls.base}/{urls.token}/hook/PreInvocation/more", {}),
            (f"{urls.base}/x/{urls.token}/hook/PreInvocation", {}),
            (f"{urls.base}/{urls.token}/admin/PreInvocation", {}),
        ]
        for url, headers in elsewhere:
            assert await post(url, hook_input(), headers) == NOT_FOUND, url


async def test_a_closed_sessions_token_is_refused(tmp_path: Path) -> None:
    async with live_session(tmp_path, idle_timeout=0.3) as (h, urls):
        await h.worker_gone()
        assert await post(urls.hook, hook_input()) == NOT_FOUND
        assert await post(urls.mcp, initialize(), MCP_HEADERS) == NOT_FOUND


async def test_huge_and_malformed_bodies_are_refused_and_the_bridge_goes_on(
    tmp_path: Path,
) -> None:
    huge = b'{"conversationId": "' + b"x" * (2 << 20) + b'"}'
    async with live_session(tmp_path) as (h, urls):
        assert (await post(urls.hook, huge))[0] == 413
        assert (await post(urls.mcp, huge, MCP_HEADERS))[0] == 413
        for bad in (b"", b"{", b"not json", b"[]", b'{"conversationId": 5}', b"\xff\xfe", b"\0"):
            assert (await post(urls.hook, bad))[0] == 400, bad
        for bad in (
            b"{",
            b"\xff\xfe",
            b"[]",
            b"{}",
            b'{"jsonrpc": "1.0", "id": 1, "method": "initialize"}',
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
            rpc("tools/call", {"name": "post_message"}),
            b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "initialize", "params": 7}',
        ):
            status, _ = await post(urls.mcp, bad, MCP_HEADERS)
            assert 400 <= status < 500, (bad, status)
        # A call on a session id nobody was given is refused too.
        forged = {**MCP_HEADERS, "Mcp-Session-Id": secrets.token_hex(16)}
        body = rpc("tools/call", {"name": "post_message", "arguments": {"text": "forged"}})
        status, _ = await post(urls.mcp, body, forged)
        assert 400 <= status < 500
        assert not [n for _, n in h.adapter.notices if "forged" in n]

        await h.say("still working?")
        _, after = await h.adapter.wait_finished(2)
        assert after.outcome is not None and after.outcome.error is None
        assert "still working?" in after.outcome.final_text


async def test_a_foreign_host_or_origin_is_refused_even_with_the_right_token(
    tmp_path: Path,
) -> None:
    async with live_session(tmp_path) as (_, urls):
        for host in (
            f"attacker.example:{urls.port}",
            "attacker.example",
            f"127.0.0.1:{urls.port + 1}",
            f"127.0.0.1.nip.io:{urls.port}",
            f"[::1]:{urls.port}",
            f"0.0.0.0:{urls.port}",
        ):
            assert (await post(urls.hook, hook_input(), {"Host": host}))[0] == 421, host
            headers = {**MCP_HEADERS, "Host": host}
            assert (await post(urls.mcp, initialize(), headers))[0] == 421, host
        for origin in ("http://attacker.example", "null", f"https://127.0.0.1:{urls.port}"):
            assert (await post(urls.hook, hook_input(), {"Origin": origin}))[0] == 403, origin
            headers = {**MCP_HEADERS, "Origin": origin}
            assert (await post(urls.mcp, initialize(), headers))[0] == 403, origin
        # What agy's own clients send is accepted.
        assert (await post(urls.hook, hook_input(), {"Host": f"localhost:{urls.port}"}))[0] == 200


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) of sockets listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


def _connect(host: str, port: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        return sock.connect_ex((host, port))


def _other_address() -> str | None:
    """This machine's address on a non-loopback interface, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            address: str = sock.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


async def test_the_listener_binds_127_0_0_1_only(tmp_path: Path) -> None:
    async with live_session(tmp_path) as (_, urls):
        assert urls.host == "127.0.0.1"
        assert _listening(urls.port) == ["0100007F"], "one socket, on 127.0.0.1, no IPv6"
        refused = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EAGAIN)
        assert await anyio.to_thread.run_sync(_connect, "127.0.0.2", urls.port) in refused
        other = _other_address()
        if other is not None:
            assert await anyio.to_thread.run_sync(_connect, other, urls.port) in refused
