"""``[[mcp ...]]``: a real Streamable HTTP call with the SDK client to a tiny SDK server."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn

from tests.deadline import Deadline
from tests.simulator.driver import Sim, SimFactory, make_plugin, result_of, steps

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


@contextmanager
def _serving(app: _MethodLog) -> Iterator[str]:
    """``app`` served by uvicorn on a thread of this process; its URL."""
    # A socket bound and listening before uvicorn starts: the simulator's connection waits in
    # the backlog until the server is up, so nothing has to poll for readiness.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    # log_config=None and no log_level: uvicorn leaves the process's logging as it is (its
    # default config would stop the "uvicorn" logger propagating, and a level would stay on its
    # loggers, for every later test in this worker: the module's shared server is made before
    # the autouse loggers_as_found notes the loggers, so that fixture cannot put them back).
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def method_log() -> _MethodLog:
    return _MethodLog(_server().streamable_http_app())


@pytest.fixture
def mcp_url(method_log: _MethodLog) -> Iterator[str]:
    with _serving(method_log) as url:
        yield url


def _session(root: Path, url: str) -> Path:
    workspace = root / "session"
    config = {"mcpServers": {"chat": {"serverUrl": url}, "broken": "not an object"}}
    make_plugin(workspace, "bridge", mcp_raw=json.dumps(config))
    return workspace


@dataclass
class DefaultMode:
    """One simulator in the default mode (no ``AGY_SIM_MCP_MODE``), its server and the methods
    the server saw. The tests of the default mode share it: each MCP call is a connection of its
    own (discover, handshake, list, call), so a turn sees what the first one would, and the SDK's
    import (0.7-0.9 s of CPU in each simulator that calls a tool) is paid once."""

    sim: Sim
    log: _MethodLog


@contextmanager
def _root_logger_kept() -> Iterator[None]:
    """The root logger's level and handlers as they were. Making the SDK's server sets the root
    logger to INFO with a handler of its own; the autouse ``loggers_as_found`` puts that back
    after a test, but a module's server is made before that fixture looks."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


@pytest.fixture(scope="module")
def default_mode(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[DefaultMode]:
    # Each test that uses the simulator waits on it within its own deadline.
    sims = SimFactory(
        tmp_path_factory.mktemp("default_mode"), Deadline(request.config).seconds_left
    )
    with _root_logger_kept():
        log = _MethodLog(_server().streamable_http_app())
    with _serving(log) as url:
        sim = sims.start("--add-dir", str(_session(sims.root, url)))
        try:
            sim.next_event()
            yield DefaultMode(sim, log)
        finally:
            sim.kill()


@pytest.mark.parametrize("mode", ["seed", "legacy", "auto"])
def test_mcp_tool_call_through_the_sdk(sims: SimFactory, mcp_url: str, mode: str) -> None:
    sim = sims.start("--add-dir", str(_session(sims.root, mcp_url)), AGY_SIM_MCP_MODE=mode)
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


def test_mcp_tool_error_and_unknown_server(default_mode: DefaultMode) -> None:
    default_mode.sim.send("[[mcp chat refuse {}]] [[mcp broken shout {}]]")
    events = default_mode.sim.turn()
    failed = [s for s in steps(events, "tool") if s["state"] == "ERROR"]
    assert len(failed) == 2
    assert "no thread for this session" in failed[0]["tool_info"]["error"]["message"]
    assert "not found" in failed[1]["tool_info"]["error"]["message"]
    result = result_of(events)
    assert result["status"] == "SUCCESS"
    assert "Tool refuse failed: " in result["response"]
    assert "no thread for this session" in result["response"]


def test_by_default_server_discover_comes_before_anything_else(
    default_mode: DefaultMode,
) -> None:
    before = len(default_mode.log.methods)  # what the module's other turns made the server see
    default_mode.sim.send('[[mcp chat shout {"text": "x"}]]')
    assert "Tool shout: X" in result_of(default_mode.sim.turn())["response"]
    methods = default_mode.log.methods[before:]
    # Seed 002's sequence, whatever the server answered to the discover.
    assert methods[:4] == [
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
    ], methods
    assert "tools/call" in methods


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
