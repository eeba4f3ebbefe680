"""A gate that notices when agy does not run its hooks.

Some agy builds load the plugin's hooks but never run them (reported for logins by API key;
plugin hooks not loaded on some builds): every tool call then runs without the gate, and the
bridge did not notice. The simulator's ``AGY_SIM_NO_HOOKS=1`` is such a build. A ``[[sleep
30]]`` stands for the model's latency before its tool call: nothing may run, and the thread
must be told why and what to check.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from tests.core.harness import running, thread
from tests.security.test_gate_attacks import TEAM

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _extra(workspace: Path, **approvals: object) -> dict[str, object]:
    approvals = {"mode": "ask", "timeout": 60, "allow_commands": TEAM, **approvals}
    return {"approvals": approvals, "workspaces": [{"path": str(workspace)}]}


# An undecided step is stopped after [approvals] hook_step_grace: 10 s by default, the margin
# for a hook call late on a loaded machine. The builds here never make that call, so a
# shorter grace stops the same tool while it runs (its `sleep 30` still far from its end),
# 8 s sooner.
QUICK_GRACE = {"hook_step_grace": 2}


async def test_an_agy_that_runs_no_hooks_is_stopped_before_its_tools_run(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with running(tmp_path, extra=_extra(workspace), env={"AGY_SIM_NO_HOOKS": "1"}) as h:
        # The model's latency is longer than the window, by far (a margin of a second was all a
        # loaded machine had, with `[[sleep 3]]` against the 2 s window).
        await h.say("[[sleep 30]] [[tool run_command touch pwned]]")
        await h.adapter.wait_notice("did not run the bridge's hooks")
        [notice] = [text for _, text in h.adapter.notices if "hooks" in text]
        assert "agy-bridge doctor" in notice and "login" in notice and "version" in notice
        await h.adapter.wait_finished(1)
        assert not (workspace / "pwned").exists(), "a tool ran without the gate"
        # The next message starts no turn that could run a tool unasked either: the thread is
        # held until an agy that runs the hooks is back.
        await h.say("[[sleep 3]] [[tool run_command touch pwned-again]]", where=thread())
        await h.adapter.wait_notice("no new turn")
        assert not (workspace / "pwned-again").exists()


async def test_an_agy_that_runs_its_hooks_works_as_before(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with running(tmp_path, extra=_extra(workspace)) as h:
        await h.say("[[sleep 3]] [[tool run_command ls -la]]")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.tools and reply.tools[-1].state == "DONE", (reply, h.adapter.notices)
        assert not [text for _, text in h.adapter.notices if "hooks" in text]


async def test_an_agy_slow_to_begin_its_turn_on_a_loaded_host_is_not_stopped(
    tmp_path: Path,
) -> None:
    """The proof's window counts from agy's first line of the turn: an agy that reads its turn
    late (a loaded host, a slow disk) and then runs its hooks is not taken for one without."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"AGY_SIM_TURN_DELAY": "4"}  # twice the window (hook_proof_seconds, 2 by default)
    async with running(tmp_path, extra=_extra(workspace), env=env) as h:
        await h.say("[[tool run_command ls -la]]")
        [reply] = await h.adapter.wait_finished(1, timeout=40)
        assert not [text for _, text in h.adapter.notices if "hooks" in text], h.adapter.notices
        assert reply.tools and reply.tools[-1].state == "DONE", reply.tools


async def test_a_model_answer_before_any_hook_call_stops_agy_whatever_the_window(
    tmp_path: Path,
) -> None:
    """agy calls PreInvocation, and waits for it, before every model call: a model's answer
    (here a tool call that comes at once) with no hook call before it is proof, window or not.
    The window is an hour here, so only that proof can stop the tool."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    extra = _extra(workspace, hook_proof_seconds=3600)
    async with running(tmp_path, extra=extra, env={"AGY_SIM_NO_HOOKS": "1"}) as h:
        await h.say("[[tool run_command sleep 30; touch pwned]]")
        notice = await h.adapter.wait_notice("did not run the bridge's hooks", timeout=25)
        assert "agy-bridge doctor" in notice
        await h.adapter.wait_finished(1, timeout=25)
        assert not (workspace / "pwned").exists(), "a tool ran without the gate"


# --- a build that runs PreInvocation but never PreToolUse -------------------------------------
#
# The hook proof above passes for such a build (its PreInvocation call reaches the listener),
# and nothing but the stream shows its tool calls. The bridge matches every tool step of the
# stream to a PreToolUse call of the gate (the step's index is the hook's stepIdx). What it
# can guarantee, since no hook announces a tool before it starts: a tool step the gate never
# decided is stopped with agy's whole process group once it has run longer than the hook's
# grace (a few seconds) or at its end, whichever comes first; the thread is told; and the
# thread starts no new turn until an agy that runs the hooks is back.


async def test_a_tool_the_gate_never_decided_is_stopped_and_the_thread_held(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"AGY_SIM_NO_TOOL_HOOKS": "1"}
    async with running(tmp_path, extra=_extra(workspace, **QUICK_GRACE), env=env) as h:
        await h.say("[[sleep 3]] [[tool run_command sleep 30; touch pwned]]")
        notice = await h.adapter.wait_notice("never decided", timeout=40)
        assert "agy-bridge doctor" in notice and "login" in notice and "version" in notice
        await h.adapter.wait_finished(1, timeout=40)
        assert not (workspace / "pwned").exists(), "an ungated tool ran to its end"
        # The thread is held: the next message starts no agy and runs nothing.
        await h.say("[[tool run_command touch pwned-again]]", where=thread())
        await h.adapter.wait_notice("no new turn", timeout=40)
        await h.say("!status", where=thread())
        status = await h.adapter.wait_notice("• Hooks:", timeout=20)
        assert "stopped" in status, status
        assert not (workspace / "pwned-again").exists()


async def test_a_quick_ungated_tool_ends_its_agy_at_its_end(tmp_path: Path) -> None:
    """A tool quicker than the grace has run by the time its step ends (the limit that stays):
    agy is stopped there, before its next model call, and the thread is held."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"AGY_SIM_NO_TOOL_HOOKS": "1"}
    async with running(tmp_path, extra=_extra(workspace), env=env) as h:
        await h.say("[[sleep 3]] [[tool run_command touch first]] [[calls 3]]")
        await h.adapter.wait_notice("never decided", timeout=40)
        [reply] = await h.adapter.wait_finished(1, timeout=40)
        assert (workspace / "first").exists()
        assert not [t for t in reply.tools if "step 2" in t.summary], reply.tools


async def test_an_ordinary_turn_with_many_tools_is_not_stopped(tmp_path: Path) -> None:
    """Every kind of step the recorded streams show, with hooks that run: nothing is stopped."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    extra = _extra(workspace)
    async with running(tmp_path, extra=extra) as h:
        script = (
            "[[subagent]] [[tool run_command ls -la]] [[tool run_command git status]] "
            "[[write notes.txt hello]] [[tool run_command cat notes.txt]] "
            "[[tool run_command echo done]] [[calls 4]]"
        )
        await h.say(script)
        [reply] = await h.adapter.wait_finished(1, timeout=40)
        assert [t.state for t in reply.tools if t.state != "ACTIVE"].count("DONE") >= 6, reply.tools
        await h.say("[[tool run_command ls]] [[sleep 1]]", where=thread())
        await h.adapter.wait_finished(2, timeout=40)
        assert not [text for _, text in h.adapter.notices if "hook" in text.lower()]


async def test_in_the_sandbox_the_ungated_tool_dies_with_its_agy(tmp_path: Path) -> None:
    """Under bubblewrap the process group the bridge kills is the sandbox's: the command that
    runs inside it ends with it, and never writes."""
    from tests.agy.sandboxed import require_bwrap

    require_bwrap()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"AGY_SIM_NO_TOOL_HOOKS": "1"}
    marker = f"sleep 3{os.getpid() % 10}.5"  # a command line no other test runs
    extra = _extra(workspace, **QUICK_GRACE)
    async with running(tmp_path, extra=extra, env=env, isolation="bwrap") as h:
        await h.say(f"[[sleep 3]] [[tool run_command {marker}; touch pwned]]")
        await h.adapter.wait_notice("never decided", timeout=60)
        with anyio.fail_after(20):
            while _running(marker):
                await anyio.sleep(0.1)
        assert not (workspace / "pwned").exists()


def _running(command: str) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if argv.strip() == command:
                return True
    return False
