"""Scripted tool steps: ``run_command``, ``call_mcp_tool``, ``write_to_file``, ``read_url_content``
(done or refused).

Each is a ``tool`` step: ACTIVE with ``tool_info.parameters``, then DONE with ``output`` or
ERROR with ``tool_info.error`` ``{type, message}``, in the shapes of the recorded streams.
Between the two, the ``PreToolUse`` hooks decide: a call they do not allow ends in ERROR with
their message and never runs.
"""

from __future__ import annotations

import json
import os
import time

from bridge.simulator.commands import run_command
from bridge.simulator.context import Context
from bridge.simulator.record import record
from bridge.simulator.script import Action

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

MCP_TIMEOUT = 30.0
FETCH_TIMEOUT = 10.0
FETCH_LIMIT = 100_000


@record(frozen=True)
class ToolOutcome:
    note: str | None = None  # a line for the default reply
    denial: dict[str, str] | None = None  # an entry for result.denied_actions
    # The PreToolUse hooks refused the call: a line every answer carries (the model was told).
    refusal: str | None = None
    hook_error: str | None = None  # a PreToolUse handler failed: the turn's result is ERROR


def run_action(ctx: Context, action: Action) -> ToolOutcome:
    """Run one scripted tool action as a ``tool`` step (ACTIVE, then DONE or ERROR)."""
    if action.kind == "tool":
        return _run_command_step(ctx, action.args[1])
    if action.kind == "mcp":
        return _mcp_step(ctx, *action.args)
    if action.kind == "deny":
        return _denied_write(ctx)
    if action.kind == "write":
        return _write_step(ctx, *action.args)
    if action.kind == "fetch":
        return _fetch_step(ctx, action.args[0])
    raise ValueError(f"unknown action {action.kind!r}")


def _refused(
    ctx: Context, index: int, tool: str, params: Mapping[str, object]
) -> ToolOutcome | None:
    """Ask the PreToolUse hooks; when they refuse, end the step in ERROR and say why."""
    started = time.monotonic()
    verdict = ctx.pre_tool_use(tool, dict(params), index)
    if verdict.allowed:
        return None
    info = _info(tool, params, error={"type": "TOOL_ERROR", "message": verdict.message})
    ctx.step(
        "ERROR",
        "tool",
        index=index,
        tool_name=tool,
        duration_seconds=since(started),
        tool_info=info,
    )
    return ToolOutcome(
        refusal=f"Tool {tool} failed: {verdict.message.rstrip()}",
        hook_error=verdict.message if verdict.hook_failed else None,
    )


def _run_command_step(ctx: Context, command: str) -> ToolOutcome:
    params = {"CommandLine": command}
    index = ctx.step(
        "ACTIVE", "tool", tool_name="run_command", tool_info=_info("run_command", params)
    )
    refused = _refused(ctx, index, "run_command", params)
    if refused is not None:
        return refused  # the command never runs
    started = time.monotonic()
    _, output = ctx.waits.call(run_command, command, ctx.cwd)
    # A failing command still ends DONE; no output means no "output" field, as recorded.
    info = _info("run_command", params, output=output or None)
    ctx.step(
        "DONE",
        "tool",
        index=index,
        tool_name="run_command",
        duration_seconds=since(started),
        tool_info=info,
    )
    return ToolOutcome()


def _mcp_step(ctx: Context, server_name: str, tool: str, raw: str) -> ToolOutcome:
    try:
        arguments = json.loads(raw)
        bad_arguments = not isinstance(arguments, dict)
    except ValueError:
        arguments, bad_arguments = raw, True
    params = {"ServerName": server_name, "ToolName": tool, "Arguments": arguments}
    index = ctx.step(
        "ACTIVE", "tool", tool_name="call_mcp_tool", tool_info=_info("call_mcp_tool", params)
    )
    refused = _refused(ctx, index, "call_mcp_tool", params)
    if refused is not None:
        return refused
    started = time.monotonic()
    server = ctx.find_server(server_name)
    error: str | None
    if bad_arguments:
        output, error = "", f"invalid tool call: Arguments must be a JSON object, got {raw!r}"
    elif server is None:
        output, error = "", f'MCP server "{server_name}" not found'
    else:
        from bridge.simulator.mcp_call import call_tool

        timeout = float(os.environ.get("AGY_SIM_MCP_TIMEOUT", MCP_TIMEOUT))
        outcome = ctx.waits.call(call_tool, server.url, tool, arguments, timeout)
        output, error = outcome.output, outcome.error
    duration = since(started)
    if error is None:
        info = _info("call_mcp_tool", params, output=output)
        ctx.step(
            "DONE",
            "tool",
            index=index,
            tool_name="call_mcp_tool",
            duration_seconds=duration,
            tool_info=info,
        )
        return ToolOutcome(note=f"Tool {tool}: {output}")
    info = _info("call_mcp_tool", params, error={"type": "TOOL_ERROR", "message": error})
    ctx.step(
        "ERROR",
        "tool",
        index=index,
        tool_name="call_mcp_tool",
        duration_seconds=duration,
        tool_info=info,
    )
    return ToolOutcome(note=f"Tool {tool} failed: {error}")


def _write_step(ctx: Context, target: str, text: str) -> ToolOutcome:
    """``write_to_file``: really writes TEXT to TARGET (relative to the working directory)."""
    path = os.path.normpath(os.path.join(ctx.cwd, target))

    def write() -> tuple[str, str | None]:
        try:
            _write_file(path, text)
        except OSError as exc:
            raise _ToolFailed(f"failed to write {path}: {exc.strerror or exc}") from exc
        return f"wrote {path}", None

    return _guarded_tool(ctx, "write_to_file", {"TargetFile": path, "CodeContent": text}, write)


def _fetch_step(ctx: Context, url: str) -> ToolOutcome:
    """``read_url_content``: really fetches URL (GET) when the hooks allow it."""

    def fetch() -> tuple[str, str | None]:
        try:
            body = ctx.waits.call(_get, url)
        except (OSError, ValueError) as exc:
            raise _ToolFailed(f"failed to read {url}: {exc}") from exc
        return f"{len(body)} characters from {url}", body

    return _guarded_tool(ctx, "read_url_content", {"Url": url}, fetch)


class _ToolFailed(Exception):
    """A tool's own failure (not a refusal): the step ends in ERROR with this message."""


def _guarded_tool(
    ctx: Context,
    tool: str,
    params: Mapping[str, object],
    act: Callable[[], tuple[str, str | None]],
) -> ToolOutcome:
    """One tool step as agy runs it: announced, put to the PreToolUse hooks, then carried out
    (``act`` gives the note and the step's output) only when they allow it."""
    index = ctx.step("ACTIVE", "tool", tool_name=tool, tool_info=_info(tool, params))
    refused = _refused(ctx, index, tool, params)
    if refused is not None:
        return refused  # nothing is done
    started = time.monotonic()
    try:
        note, output = act()
    except _ToolFailed as exc:
        info = _info(tool, params, error={"type": "TOOL_ERROR", "message": str(exc)})
        ctx.step(
            "ERROR",
            "tool",
            index=index,
            tool_name=tool,
            duration_seconds=since(started),
            tool_info=info,
        )
        return ToolOutcome(note=f"Tool {tool} failed: {exc}")
    ctx.step(
        "DONE",
        "tool",
        index=index,
        tool_name=tool,
        duration_seconds=since(started),
        tool_info=_info(tool, params, output=output),
    )
    return ToolOutcome(note=f"Tool {tool}: {note}")


def _get(url: str) -> str:
    import urllib.request  # here: most turns fetch nothing, and it pulls in http and email

    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response:
        return bytes(response.read(FETCH_LIMIT)).decode("utf-8", "replace")


def _write_file(path: str, text: str) -> None:
    # Small files on a local disk: a thread would cost more than the write.
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def _denied_write(ctx: Context) -> ToolOutcome:
    target = os.path.join(ctx.cwd, "sim-denied.txt")
    params = {"TargetFile": target}
    index = ctx.step(
        "ACTIVE", "tool", tool_name="write_to_file", tool_info=_info("write_to_file", params)
    )
    refused = _refused(ctx, index, "write_to_file", params)
    if refused is not None:
        return refused
    message = (
        f'permission check failed for write_file "{target}": '
        f"user denied permission for write_file({target})"
    )
    info = _info("write_to_file", params, error={"type": "TOOL_ERROR", "message": message})
    ctx.step(
        "ERROR",
        "tool",
        index=index,
        tool_name="write_to_file",
        duration_seconds=0.01,
        tool_info=info,
    )
    return ToolOutcome(denial={"action": "write_file", "display_name": "WriteToFile"})


def _info(name: str, parameters: Mapping[str, object], **extra: object) -> dict[str, object]:
    info: dict[str, object] = {"name": name, "parameters": parameters}
    info.update({key: value for key, value in extra.items() if value is not None})
    return info


def since(started: float) -> float:
    return round(time.monotonic() - started, 6)
