"""MCP on the listener: the official SDK client end to end, and the Streamable HTTP details
(server-assigned session id, GET stream, DELETE) that agy's client has needed on some build."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio
import pytest

from bridge.agy.listener import Registration, open_listener
from bridge.agy.wire import HookInput, HookReply

# The MCP SDK is imported by the tests that run, not at collection: every xdist worker collects
# this file, and the SDK costs about 0.7 s of CPU to import.
if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server import ServerRequestContext
    from mcp.server.lowlevel import Server

PROTOCOL = "2025-06-18"  # a handshake-era version: the stateful initialize flow
SSE_ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class EchoServer:
    """A one-tool MCP server whose lifespan shows whether its session manager is running."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.started = anyio.Event()
        self.stopped = anyio.Event()
        from mcp.server.lowlevel import Server

        self.server: Server[Any] = Server(
            f"echo-{prefix}",
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    @asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        self.started.set()
        try:
            yield {}
        finally:
            self.stopped.set()

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        import mcp_types as types

        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema=schema)])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        import mcp_types as types

        text = f"{self.prefix}:{(params.arguments or {}).get('text', '')}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def no_hook(event: str, hook_input: HookInput) -> HookReply:
    return HookReply()


def texts(result: Any) -> list[str]:
    import mcp_types as types

    return [block.text for block in result.content if isinstance(block, types.TextContent)]


def rpc(method: str, id_: int | None = None, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


async def initialize(http: aiohttp.ClientSession, url: str, accept: str = SSE_ACCEPT) -> str:
    """The raw initialize handshake; returns the Mcp-Session-Id the server assigned."""
    params = {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"},
    }
    headers = {"Accept": accept, "Content-Type": "application/json"}
    async with http.post(url, data=rpc("initialize", 1, params), headers=headers) as response:
        assert response.status == 200
        # Plain JSON answers (seed 000's server worked with agy that way).
        assert response.content_type == "application/json"
        session_id = response.headers.get("Mcp-Session-Id")
        answer = await response.json()
    assert answer["id"] == 1 and answer["result"]["protocolVersion"] == PROTOCOL
    assert session_id
    headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": PROTOCOL}
    async with http.post(url, data=rpc("notifications/initialized"), headers=headers) as response:
        assert response.status == 202
    return session_id


def session_headers(session_id: str) -> dict[str, str]:
    return {
        "Accept": SSE_ACCEPT,
        "Content-Type": "application/json",
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": PROTOCOL,
    }


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_official_client_initializes_lists_and_calls_a_tool(mode: Any) -> None:
    from mcp import Client

    echo = EchoServer("a")
    async with open_listener() as listener:
        registration = await listener.register(no_hook, {"chat": echo.server})
        async with Client(registration.mcp_url("chat"), mode=mode) as client:
            tools = await client.list_tools()
            result = await client.call_tool("echo", {"text": "hello"})
    assert [tool.name for tool in tools.tools] == ["echo"]
    assert texts(result) == ["a:hello"]
    assert not result.is_error


@pytest.mark.anyio
async def test_a_stateful_session_gets_an_id_a_get_stream_and_can_be_deleted() -> None:
    echo = EchoServer("a")
    async with open_listener() as listener, aiohttp.ClientSession() as http:
        registration = await listener.register(no_hook, {"chat": echo.server})
        url = registration.mcp_url("chat")
        session_id = await initialize(http, url)

        headers = session_headers(session_id)
        call = rpc("tools/call", 2, {"name": "echo", "arguments": {"text": "x"}})
        async with http.post(url, data=call, headers=headers) as response:
            answer = await response.json()
        assert answer["result"]["content"][0]["text"] == "a:x"

        get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        get_headers["MCP-Protocol-Version"] = PROTOCOL
        async with http.get(url, headers=get_headers) as stream:
            assert stream.status == 200
            assert stream.content_type == "text/event-stream"

        async with http.delete(url, headers=headers) as response:
            assert response.status == 200
        async with http.post(url, data=rpc("tools/list", 3), headers=headers) as response:
            assert response.status == 404  # the session is gone


@pytest.mark.anyio
async def test_mcp_refuses_a_foreign_host() -> None:
    echo = EchoServer("a")
    async with open_listener() as listener, aiohttp.ClientSession() as http:
        registration = await listener.register(no_hook, {"chat": echo.server})
        headers = {"Accept": SSE_ACCEPT, "Host": f"attacker.example:{listener.port}"}
        async with http.post(
            registration.mcp_url("chat"), data=rpc("tools/list", 1), headers=headers
        ) as response:
            assert response.status == 421


@pytest.mark.anyio
async def test_closing_a_registration_stops_its_managers_and_404s_its_urls() -> None:
    echo, other = EchoServer("a"), EchoServer("b")
    async with open_listener() as listener, aiohttp.ClientSession() as http:
        registration = await listener.register(no_hook, {"chat": echo.server, "more": other.server})
        # A server's manager starts with its first request (most agy processes call none).
        assert not echo.started.is_set() and not other.started.is_set()
        url = registration.mcp_url("chat")
        session_id = await initialize(http, url)
        assert echo.started.is_set() and not other.started.is_set()
        await initialize(http, registration.mcp_url("more"))
        assert other.started.is_set()

        await registration.close()
        assert echo.stopped.is_set() and other.stopped.is_set()
        for target, headers in ((url, session_headers(session_id)), (url, {"Accept": SSE_ACCEPT})):
            async with http.post(target, data=rpc("tools/list", 5), headers=headers) as response:
                assert response.status == 404
        async with http.post(registration.hook_url("PreInvocation"), data=b"{}") as response:
            assert response.status == 404


@pytest.mark.anyio
async def test_two_registrations_have_their_own_servers_and_sessions() -> None:
    from mcp import Client

    echo_a, echo_b = EchoServer("a"), EchoServer("b")
    async with open_listener() as listener, aiohttp.ClientSession() as http:
        a = await listener.register(no_hook, {"chat": echo_a.server})
        b = await listener.register(no_hook, {"chat": echo_b.server})
        async with Client(a.mcp_url("chat"), mode="legacy") as client:
            from_a = texts(await client.call_tool("echo", {"text": "1"}))
        async with Client(b.mcp_url("chat"), mode="legacy") as client:
            from_b = texts(await client.call_tool("echo", {"text": "2"}))

        session_of_a = await initialize(http, a.mcp_url("chat"))
        async with http.post(
            b.mcp_url("chat"), data=rpc("tools/list", 9), headers=session_headers(session_of_a)
        ) as response:
            assert response.status == 404  # a's session id means nothing to b's server

        await a.close()
        assert echo_a.stopped.is_set() and not echo_b.stopped.is_set()
        async with Client(b.mcp_url("chat"), mode="legacy") as client:
            still_b = texts(await client.call_tool("echo", {"text": "3"}))
    assert (from_a, from_b, still_b) == (["a:1"], ["b:2"], ["b:3"])


@pytest.mark.anyio
async def test_the_listener_shuts_down_cleanly_with_open_sessions_and_calls_in_flight() -> None:
    echo = EchoServer("a")
    hook_entered = anyio.Event()
    hook_answers: list[tuple[int, bytes]] = []
    stream_ended = anyio.Event()

    async def stuck(event: str, hook_input: HookInput) -> HookReply:
        hook_entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def call_hook(http: aiohttp.ClientSession, registration: Registration) -> None:
        async with http.post(registration.hook_url("PreInvocation"), data=b"{}") as response:
            hook_answers.append((response.status, await response.read()))

    async def drain(stream: aiohttp.ClientResponse) -> None:
        try:
            while await stream.content.readany():
                pass
        except aiohttp.ClientError:
            pass  # a connection closed under the stream also ends it
        stream_ended.set()

    # A guard against a hang, not a speed check.
    with anyio.fail_after(30):
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as clients:
            async with open_listener() as listener:
                registration = await listener.register(stuck, {"chat": echo.server})
                url = registration.mcp_url("chat")
                session_id = await initialize(http, url)
                get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
                stream = await http.get(url, headers=get_headers)
                assert stream.status == 200
                clients.start_soon(drain, stream)
                clients.start_soon(call_hook, http, registration)
                await hook_entered.wait()
                port = listener.port
            await stream_ended.wait()
            stream.release()

    assert hook_answers == [(200, b"{}")]
    assert echo.stopped.is_set()
    assert registration.closed
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", port)


@pytest.mark.anyio
async def test_a_client_that_accepts_only_json_is_served() -> None:
    async with open_listener() as listener:
        registration = await listener.register(no_hook, {"chat": EchoServer("j").server})
        async with aiohttp.ClientSession() as http:
            session_id = await initialize(
                http, registration.mcp_url("chat"), accept="application/json"
            )
        assert session_id


@pytest.mark.anyio
async def test_a_server_given_as_a_function_is_made_once_at_its_first_request() -> None:
    from mcp import Client

    made: list[EchoServer] = []

    def make() -> Server[Any]:
        made.append(EchoServer("lazy"))
        return made[-1].server

    async with open_listener() as listener, aiohttp.ClientSession() as http:
        registration = await listener.register(no_hook, {"chat": make})
        url = registration.mcp_url("chat")
        assert made == [], "nothing is made before agy calls the server"
        async with anyio.create_task_group() as tg:  # two first requests at once
            for _ in range(2):
                tg.start_soon(initialize, http, url)
        assert len(made) == 1 and made[0].started.is_set()
        async with Client(url, mode="legacy") as client:
            assert texts(await client.call_tool("echo", {"text": "hi"})) == ["lazy:hi"]
        assert len(made) == 1
        await registration.close()
        assert made[0].stopped.is_set()


@pytest.mark.anyio
async def test_a_registration_whose_servers_were_never_called_closes_and_makes_none() -> None:
    made: list[str] = []

    def make() -> Server[Any]:
        made.append("made")
        return EchoServer("never").server

    async with open_listener() as listener, aiohttp.ClientSession() as http:
        registration = await listener.register(no_hook, {"chat": make})
        url = registration.mcp_url("chat")
        with anyio.fail_after(10):
            await registration.close()
        async with http.post(url, data=rpc("tools/list", 1), headers=session_headers("x")) as r:
            assert r.status == 404
    assert made == []
