"""One MCP tool call over Streamable HTTP with the official SDK client, as agy makes it.

agy connects, lists the tools, then calls one (seed 002 saw ``server/discover``, then
``initialize``, ``notifications/initialized``, ``tools/list``). The SDK is imported here,
lazily: most turns never call a tool, and importing it costs more than the rest of the
simulator's start. ``AGY_SIM_MCP_MODE`` picks the SDK's connect mode: ``auto`` (default: probe
``server/discover`` first, then the ``initialize`` handshake on a server that does not know it,
as agy 1.2.7 did) or ``legacy`` (``initialize`` only, as older builds did).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class McpOutcome:
    output: str
    error: str | None = None  # set when the call failed or the tool answered isError


async def call_tool(url: str, tool: str, arguments: dict[str, Any], limit: float) -> McpOutcome:
    import anyio
    from mcp import Client
    from mcp_types import Implementation

    mode = os.environ.get("AGY_SIM_MCP_MODE", "auto")
    client_info = Implementation(name="antigravity-client", version="v1.0.0")
    try:
        with anyio.fail_after(limit):
            async with Client(url, mode=mode, client_info=client_info) as client:
                await client.list_tools()
                result = await client.call_tool(tool, arguments)
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


def _describe(exc: BaseException) -> str:
    # Task groups wrap the real failure; show the innermost one.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
