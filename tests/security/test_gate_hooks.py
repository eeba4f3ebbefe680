"""A gate that notices when agy does not run its hooks.

Some agy builds load the plugin's hooks but never run them (reported for logins by API key;
plugin hooks not loaded on some builds): every tool call then runs without the gate, and the
bridge did not notice. The simulator's ``AGY_SIM_NO_HOOKS=1`` is such a build. A ``[[sleep
3]]`` stands for the model's latency before its tool call: nothing may run, and the thread
must be told why and what to check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.harness import running, thread
from tests.security.test_gate_attacks import TEAM

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _extra(workspace: Path) -> dict[str, object]:
    approvals = {"mode": "ask", "timeout": 60, "allow_commands": TEAM}
    return {"approvals": approvals, "workspaces": [{"path": str(workspace)}]}


async def test_an_agy_that_runs_no_hooks_is_stopped_before_its_tools_run(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with running(tmp_path, extra=_extra(workspace), env={"AGY_SIM_NO_HOOKS": "1"}) as h:
        await h.say("[[sleep 3]] [[tool run_command touch pwned]]")
        await h.adapter.wait_notice("did not run the bridge's hooks")
        [notice] = [text for _, text in h.adapter.notices if "hooks" in text]
        assert "agy-bridge doctor" in notice and "login" in notice and "version" in notice
        await h.adapter.wait_finished(1)
        assert not (workspace / "pwned").exists(), "a tool ran without the gate"
        # The next message starts no turn that could run a tool unasked either.
        await h.say("[[sleep 3]] [[tool run_command touch pwned-again]]", where=thread())
        await h.adapter.wait_finished(2)
        assert not (workspace / "pwned-again").exists()


async def test_an_agy_that_runs_its_hooks_works_as_before(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with running(tmp_path, extra=_extra(workspace)) as h:
        await h.say("[[sleep 3]] [[tool run_command ls -la]]")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.tools and reply.tools[-1].state == "DONE", (reply, h.adapter.notices)
        assert not [text for _, text in h.adapter.notices if "hooks" in text]
