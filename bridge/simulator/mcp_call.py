"""One MCP tool call over Streamable HTTP with the official SDK client, as agy makes it.

agy connects, lists the tools, then calls one (seed 002 saw ``server/discover``, then
``initialize``, ``notifications/initialized``, ``tools/list``). The SDK is imported here,
lazily: most turns never call a tool, and importing it costs more than the rest of the
simulator's start. ``AGY_SIM_MCP_MODE`` picks how the client connects: ``seed`` (default: the
sequence seed 002 saw agy 1.2.7 send, a ``server/discover`` request whatever its answer, then
the ``initialize`` handshake), ``auto`` (the SDK's probe: ``server/discover``, and
``initialize`` only on a server that does not know it) or ``legacy`` (``initialize`` only, as
older builds did).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from bridge.simulator.record import record

_DISCOVER = json.dumps(
    {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}}
).encode()


@record(frozen=True)
class McpOutcome:
    output: str
    error: str | None = None  # set when the call failed or the tool answered isError


def call_tool(url: str, tool: str, arguments: dict[str, Any], limit: float) -> McpOutcome:
    """Connect, list the tools, call ``tool``; all of it within ``limit`` seconds.

    Blocks until done: the turn calls it on a thread (``Waits.call``), and the SDK's client runs
    in an event loop of its own there (``anyio.run``), so the simulator imports asyncio only
    for a turn that calls an MCP tool."""
    import anyio

    mode = os.environ.get("AGY_SIM_MCP_MODE", "seed")
    started = time.monotonic()
    try:
        if mode == "seed":
            _discover(url, limit)
            mode = "legacy"
        left = limit - (time.monotonic() - started)
        if left <= 0:
            raise TimeoutError
        result = anyio.run(_session, url, mode, tool, arguments, left, backend="asyncio")
    except TimeoutError:
        return McpOutcome(output="", error=f"MCP call to {tool} timed out after {limit:g}s")
    except Exception as exc:
        return McpOutcome(output="", error=f"MCP call to {tool} failed: {_describe(exc)}")
    text = "\n".join(
        str(getattr(block, "text", ""))
        for block in result.content
        if getattr(block, "type", "") == "text"
    )
    if result.is_error:
        return McpOutcome(output=text, error=text or f"tool {tool} reported an error")
    return McpOutcome(output=text)


async def _session(url: str, mode: str, tool: str, arguments: dict[str, Any], limit: float) -> Any:
    import anyio
    from mcp import Client
    from mcp_types import Implementation

    client_info = Implementation(name="antigravity-client", version="v1.0.0")
    with anyio.fail_after(limit):
        async with Client(url, mode=mode, client_info=client_info) as client:
            await client.list_tools()
            return await client.call_tool(tool, arguments)


def _discover(url: str, limit: float) -> None:
    """One ``server/discover`` POST. Its answer (a result, a JSON-RPC error, an HTTP error) does
    not matter: the handshake follows. Only a server that cannot be talked to fails the call."""
    import urllib.error  # here, not at the top: the turns that call no MCP tool skip http
    import urllib.request

    request = urllib.request.Request(
        url,
        data=_DISCOVER,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    # No proxy from the environment: the URL is loopback and carries a session's token.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=limit) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        exc.read()
        exc.close()


def _describe(exc: BaseException) -> str:
    # Task groups wrap the real failure; show the innermost one.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
