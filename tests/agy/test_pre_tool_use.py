"""The bridge's PreToolUse pieces end to end with the simulator: the plugin writer's matcher
groups, the always-decide hook command, the listener's routing, and what agy then does."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bridge.agy import wire
from bridge.agy.listener import (
    Registration,
    open_listener,
    tool_hook_command,
    tool_hook_timing,
    url_file_name,
    url_file_text,
)
from bridge.agy.plugin import plugin_dir, tool_hook_groups, write_plugin
from bridge.agy.process import AgyProcess, ProcessExit, ProcessSpec, open_agy
from tests.doubles import signed_in

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("curl") is None, reason="hook commands run curl"),
]
SIM = [sys.executable, "-m", "bridge.simulator"]
FLAGS = ["--print=", "--input-format", "stream-json", "--output-format", "stream-json"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Decider:
    """The bridge's hook function for this test: a decision per command line."""

    def __init__(self) -> None:
        self.decisions: dict[str, wire.ToolDecision] = {}
        self.asked: list[wire.PreToolUseInput] = []

    async def __call__(self, event: str, hook_input: wire.HookInput) -> wire.HookAnswer:
        assert event == wire.PRE_TOOL_USE and isinstance(hook_input, wire.PreToolUseInput)
        self.asked.append(hook_input)
        command = str(hook_input.tool_call.args.get("CommandLine", ""))
        return self.decisions.get(command, wire.ToolDecision(decision="deny", reason="unknown"))


@asynccontextmanager
async def session(tmp_path: Path, decider: Decider) -> AsyncIterator[tuple[Registration, Path]]:
    timing = tool_hook_timing(5)
    async with open_listener() as listener:
        registration = await listener.register(
            decider, answer_within={wire.PRE_TOOL_USE: timing.answer_within}
        )
        session_dir = tmp_path / "session"
        url_name = url_file_name(wire.PRE_TOOL_USE)
        write_plugin(
            session_dir,
            guidance="",
            notes="",
            hook_commands={},
            hook_timeout=10,
            mcp_servers={},
            pre_tool_use=tool_hook_groups(
                tool_hook_command(plugin_dir(session_dir) / url_name, timing.hook_timeout),
                timing.hook_timeout,
                ["run_command"],
            ),
            url_files={url_name: url_file_text(registration.hook_url(wire.PRE_TOOL_USE))},
        )
        yield registration, session_dir


def spec(tmp_path: Path, session_dir: Path) -> ProcessSpec:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    return ProcessSpec(
        argv=[*SIM, *FLAGS, "--add-dir", str(session_dir)],
        env={**os.environ, "AGY_SIM_HOME": str(signed_in(tmp_path / "home"))},
        cwd=workdir,
        init_timeout=20,
        stop_grace=2,
    )


async def turn(proc: AgyProcess, text: str) -> tuple[list[wire.StepUpdate], wire.ResultInfo]:
    await proc.send_turn([text])
    tools = []
    while True:
        out = await proc.next()
        assert not isinstance(out, ProcessExit), out
        if isinstance(out, wire.StepUpdateEvent) and out.step_update.step_type == "tool":
            tools.append(out.step_update)
        if isinstance(out, wire.ResultEvent):
            return tools, out.result


async def test_a_denied_command_does_not_run_and_the_reason_reaches_the_answer(
    tmp_path: Path,
) -> None:
    decider = Decider()
    decider.decisions["touch allowed.txt"] = wire.ToolDecision(decision="allow")
    decider.decisions["touch denied.txt"] = wire.ToolDecision(
        decision="deny", reason="denied by Bob: use the staging db"
    )
    async with session(tmp_path, decider) as (_, session_dir):
        async with open_agy(spec(tmp_path, session_dir), lambda _: None) as proc:
            denied, result = await turn(proc, "[[tool run_command touch denied.txt]]")
            tools = denied
            assert tools[-1].state == "ERROR" and tools[-1].tool_info is not None
            assert tools[-1].tool_info.error is not None
            assert tools[-1].tool_info.error.message == (
                "Tool call denied by pre-tool hook: denied by Bob: use the staging db"
            )
            assert "denied by Bob: use the staging db" in result.response
            assert not (tmp_path / "work" / "denied.txt").exists()

            tools, result = await turn(proc, "[[tool run_command touch allowed.txt]]")
            assert tools[-1].state == "DONE" and result.ok
            assert (tmp_path / "work" / "allowed.txt").exists()
    [first, _] = decider.asked
    assert first.tool_call.name == "run_command"
    assert first.step_idx == denied[0].step_index  # the tool step's index


async def test_an_unreachable_bridge_means_deny_not_run(tmp_path: Path) -> None:
    decider = Decider()
    decider.decisions["touch ran.txt"] = wire.ToolDecision(decision="allow")
    async with session(tmp_path, decider) as (registration, session_dir):
        await registration.close()  # the bridge is gone: every URL answers 404
        async with open_agy(spec(tmp_path, session_dir), lambda _: None) as proc:
            tools, result = await turn(proc, "[[tool run_command touch ran.txt]]")
    assert tools[-1].state == "ERROR" and tools[-1].tool_info is not None
    assert tools[-1].tool_info.error is not None
    assert "could not be reached" in tools[-1].tool_info.error.message
    assert "could not be reached" in result.response
    assert result.ok, "an explicit deny is a decision, not a failing hook"
    assert not (tmp_path / "work" / "ran.txt").exists() and decider.asked == []
