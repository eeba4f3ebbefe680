"""``[[mcp ...]]``: a real Streamable HTTP call with the SDK client to a tiny SDK server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn

from tests.simulator.driver import SimFactory, make_plugin, result_of, steps

# The MCP SDK is imported by the server a test starts, not at collection: every xdist worker
# collects this file, and the SDK costs about 0.7 s of CPU to import.
if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def _server() -> MCPServer:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("sim-test")

    @server.tool()
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    @server.tool()
    def refuse() -> str:
        """Always fails."""
        raise ToolError("no thread for this session")

    return server


class _MethodLog:
    """An ASGI wrapper that notes the JSON-RPC method of every POST before passing it on."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.methods: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            self.methods.append(json.loads(body).get("method", "(response)"))
        except (ValueError, AttributeError):
            self.methods.append("(unreadable)")

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


@pytest.fixture
def method_log() -> _MethodLog:
    return _MethodLog(_server().streamable_http_app())


@pytest.fixture
def mcp_url(method_log: _MethodLog) -> Iterator[str]:
    # A socket bound and listening before uvicorn starts: the simulator's connection waits in
    # the backlog until the server is up, so nothing has to poll for readiness.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    # log_config=None: uvicorn leaves the process's logging as it is (its default config would
    # stop the "uvicorn" logger propagating for every later test in this worker).
    server = uvicorn.Server(
        uvicorn.Config(method_log, log_config=None, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _session(sims: SimFactory, url: str) -> Path:
    workspace = sims.root / "session"
    config = {"mcpServers": {"chat": {"serverUrl": url}, "broken": "not an object"}}
    make_plugin(workspace, "bridge", mcp_raw=json.dumps(config))
    return workspace


@pytest.mark.parametrize("mode", ["seed", "legacy", "auto"])
def test_mcp_tool_call_through_the_sdk(sims: SimFactory, mcp_url: str, mode: str) -> None:
    sim = sims.start("--add-dir", str(_session(sims, mcp_url)), AGY_SIM_MCP_MODE=mode)
    sim.next_event()
    sim.send('[[mcp bridge_chat shout {"text": "hello"}]]')
    events = sim.turn()
    active, done = steps(events, "tool")
    assert active["tool_name"] == done["tool_name"] == "call_mcp_tool"
    assert done["state"] == "DONE"
    assert done["tool_info"]["parameters"] == {
        "ServerName": "bridge_chat",
        "ToolName": "shout",
        "Arguments": {"text": "hello"},
    }
    assert done["tool_info"]["output"] == "HELLO"
    assert "Tool shout: HELLO" in result_of(events)["response"]


def test_mcp_tool_error_and_unknown_server(sims: SimFactory, mcp_url: str) -> None:
    sim = sims.start("--add-dir", str(_session(sims, mcp_url)))
    sim.next_event()
    sim.send("[[mcp chat refuse {}]] [[mcp broken shout {}]]")
    events = sim.turn()
    failed = [s for s in steps(events, "tool") if s["state"] == "ERROR"]
    assert len(failed) == 2
    assert "no thread for this session" in failed[0]["tool_info"]["error"]["message"]
    assert "not found" in failed[1]["tool_info"]["error"]["message"]
    result = result_of(events)
    assert result["status"] == "SUCCESS"
    assert "Tool refuse failed: " in result["response"]
    assert "no thread for this session" in result["response"]


def test_by_default_server_discover_comes_before_anything_else(
    sims: SimFactory, mcp_url: str, method_log: _MethodLog
) -> None:
    sim = sims.start("--add-dir", str(_session(sims, mcp_url)))
    sim.next_event()
    sim.send('[[mcp chat shout {"text": "x"}]]')
    assert "Tool shout: X" in result_of(sim.turn())["response"]
    # Seed 002's sequence, whatever the server answered to the discover.
    assert method_log.methods[:4] == [
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
    ], method_log.methods
    assert "tools/call" in method_log.methods


def test_a_pre_tool_use_deny_keeps_the_mcp_call_from_the_server(
    sims: SimFactory, mcp_url: str, method_log: _MethodLog
) -> None:
    workspace = sims.root / "session"
    hooks = {
        "gate": {
            "PreToolUse": [
                {
                    "matcher": "call_mcp_tool",
                    "hooks": [
                        {
                            "type": "command",
                            "command": 'printf \'{"decision":"deny","reason":"no"}\'',
                        }
                    ],
                }
            ]
        }
    }
    config = {"mcpServers": {"chat": {"serverUrl": mcp_url}}}
    make_plugin(workspace, "bridge", hooks=hooks, mcp_raw=json.dumps(config))
    sim = sims.start("--add-dir", str(workspace))
    sim.next_event()
    sim.send('[[mcp chat shout {"text": "x"}]]')
    events = sim.turn()
    refused = steps(events, "tool")[-1]
    assert refused["state"] == "ERROR"
    assert refused["tool_info"]["error"]["message"] == "Tool call denied by pre-tool hook: no"
    assert method_log.methods == [], "the server was never called"
    assert (
        "Tool call_mcp_tool failed: Tool call denied by pre-tool hook: no"
        in (result_of(events)["response"])
    )
