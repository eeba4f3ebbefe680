"""One agy session as the core holds it: its directory (the plugin), its listener place, and the
flag that lets the hook command call the bridge.

The hook command runs ``curl`` only while the flag file exists (see
:func:`bridge.agy.plugin.gated_hook_command`), so a model call with nothing to inject costs a
file test instead of an HTTP round trip. The session is the flag's one owner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bridge.agy import wire
from bridge.agy.listener import HookFunc, Registration, UndeliveredFunc
from bridge.agy.plugin import PLUGIN_NAME, lower_flag, raise_flag

InjectFunc = Callable[[str], Awaitable[list[str]]]
"""``await inject(conversation_id)``: the user messages to hand to that conversation's next
model call (an empty list for none)."""

LostFunc = Callable[[], Awaitable[None]]
"""``await lost()``: the messages of the last injection never reached agy."""


@dataclass(frozen=True)
class ToolCall:
    """A tool call agy is about to make, as the core sees it (from ``PreToolUse``)."""

    name: str  # as agy names it: run_command, write_to_file, call_mcp_tool, ...
    # Keyed as agy keys them: CommandLine, TargetFile, AbsolutePath, ServerName, ...
    args: Mapping[str, Any] = field(default_factory=dict)
    conversation_id: str = ""
    workspace_paths: tuple[str, ...] = ()
    scratch: str | None = None  # agy's own artifact folder of this conversation
    step_idx: int | None = None  # the call's step in agy's stream (its step_index)
    # When the hook call reached the listener (``anyio.current_time()``): the listener's answer
    # deadline counts from it, so a decision's own deadline must too. None: when decided.
    arrived: float | None = None


@dataclass(frozen=True)
class ToolVerdict:
    """The core's answer: run it or not; ``reason`` is what the model reads when not."""

    allow: bool
    reason: str | None = None


def server_name(server: str) -> str:
    """The name agy gives a session's MCP server (``ServerName`` of its tool calls)."""
    return wire.mcp_tool_name(PLUGIN_NAME, server)


DecideFunc = Callable[[ToolCall], Awaitable[ToolVerdict]]
"""``await decide(call)``: whether agy may run this tool call (may wait for a person)."""


def _decision(verdict: ToolVerdict) -> wire.ToolDecision:
    # Only allow or deny: ask/force_ask would ask agy's own prompt, which print mode cannot show.
    if verdict.allow:
        return wire.ToolDecision(decision="allow")
    return wire.ToolDecision(decision="deny", reason=verdict.reason or "not allowed")


def injection_hook(inject: InjectFunc, decide: DecideFunc | None = None) -> HookFunc:
    """The listener's hook function for one session: ``PreInvocation`` injects messages;
    ``PreToolUse`` asks ``decide`` (and denies every call when there is none)."""

    async def hook(event: str, data: wire.HookInput) -> wire.HookAnswer:
        if event == wire.PRE_TOOL_USE:
            if decide is None or not isinstance(data, wire.PreToolUseInput):
                return wire.ToolDecision(decision="deny", reason="this session decides no tools")
            call = ToolCall(
                # The listener started its clock as it started this function, just before.
                arrived=anyio.current_time(),
                name=data.tool_call.name,
                args=dict(data.tool_call.args),
                conversation_id=data.conversation_id,
                workspace_paths=tuple(data.workspace_paths),
                scratch=data.artifact_directory_path,
                step_idx=data.step_idx,
            )
            return _decision(await decide(call))
        if event != "PreInvocation":
            return wire.EMPTY_HOOK_REPLY
        texts = await inject(data.conversation_id)
        if not texts:
            return wire.EMPTY_HOOK_REPLY
        return wire.HookReply(inject_steps=[wire.InjectedStep(user_message=t) for t in texts])

    return hook


def undelivered_injection(lost: LostFunc) -> UndeliveredFunc:
    """The listener's report of an answer agy cannot have read, for injections only."""

    async def on_undelivered(event: str, answer: wire.HookAnswer) -> None:
        if event == "PreInvocation" and isinstance(answer, wire.HookReply) and answer.inject_steps:
            await lost()

    return on_undelivered


@dataclass(eq=False)
class AgySession:
    directory: Path
    registration: Registration
    # Whether the flag file may be there. Unknown at first (an earlier run may have left it),
    # so the first clear removes it; from then on the session, its one owner, knows, and a
    # turn that finds it down costs no file operation.
    _flag_up: bool = field(default=True, init=False, repr=False)

    def mark_pending(self) -> None:
        """A message waits: the next hook call must reach the bridge."""
        raise_flag(self.directory)
        self._flag_up = True

    def clear_pending(self) -> None:
        """Nothing waits (a turn or a hook call is taking it all): hook calls stay local.

        Called before the messages are taken, so one stored meanwhile raises the flag again
        and no signal is lost."""
        if self._flag_up:
            lower_flag(self.directory)
            self._flag_up = False

    async def close(self) -> None:
        await self.registration.close()
