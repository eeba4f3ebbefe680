"""bridge.cli: the console's end of input waits for the thread's last turn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bridge.chat.console.tour import HINT, SIMULATOR_STEPS, TOUR
from bridge.cli import wait_idle
from tests.core.harness import hold_after_taking, running, thread

pytestmark = pytest.mark.anyio


async def test_a_turn_that_has_taken_its_messages_is_not_idle(tmp_path: Path) -> None:
    """Between taking its messages from the inbox and running, a turn has nothing pending and
    is not yet busy: ``wait_idle`` returning there would end the console before the answer."""
    async with running(tmp_path) as h:
        taken, go_on = hold_after_taking(h.bridge.store)
        await h.say("hello [[reply hi there]]")
        with anyio.fail_after(30):
            await taken.wait()
        idle = anyio.Event()

        async def watch() -> None:
            await wait_idle(h.bridge.core, thread())
            idle.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await anyio.sleep(0.3)
            assert not idle.is_set(), "idle while the turn held its messages"
            go_on.set()
            with anyio.fail_after(30):
                await idle.wait()
        [reply] = h.adapter.finished()
        assert reply.outcome is not None and "hi there" in reply.outcome.final_text


def test_the_console_on_a_machine_without_agy_answers_with_the_simulator(tmp_path: Path) -> None:
    """`make run` on a fresh machine: no agy on PATH, no ~/.gemini, no config. The console
    falls back to the simulator, which keeps its state in its own home, not in agy's."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "console", "--user", "newcomer"],
        input="hello bridge\n!status\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "built-in agy simulator" in done.stderr
    assert "You said: newcomer (console:newcomer): hello bridge" in done.stdout
    assert not (home / ".gemini").exists(), "agy's state was neither needed nor made"
    # The banner ends with the tour; the default reply is followed by the hint.
    assert done.stderr.rstrip().endswith("\n".join(f"`{line}`" for line in TOUR))
    answer = done.stdout.split("You said: newcomer (console:newcomer): hello bridge\n", 1)[1]
    assert answer.startswith(f"[bridge] {HINT}\n")
    # One line each for the isolation and the approvals, the same in the banner and !status.
    status = [line.removeprefix("[bridge] ") for line in done.stdout.splitlines()]
    isolation = next(line for line in status if "solated" in line)
    approvals = next(line for line in status if line.startswith("• Approvals:"))
    assert "`ask`" in approvals and f"`{SIMULATOR_STEPS}`" in approvals
    assert isolation in done.stderr.splitlines() and approvals in done.stderr.splitlines()
