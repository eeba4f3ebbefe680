"""Approvals in `agy-bridge console`: ``approve? [y/a/N]`` on the terminal, and a bridge
SIGKILLed while a request waits (a subprocess on the agy simulator)."""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from bridge.core.store.rows import ApprovalState
from tests.chat.console.consoles import Consoles
from tests.chat.console.test_console import _wait_until
from tests.core.harness import SIMULATOR_ENV

CONSOLE = [sys.executable, "-m", "bridge", "console"]


class Console:
    """A console subprocess whose output lines are collected as they come."""

    def __init__(self, consoles: Consoles, approvals: str = 'mode = "ask"\ntimeout = 60') -> None:
        tmp_path = consoles.tmp_path
        command = json.dumps([sys.executable, "-m", "bridge.simulator"])
        config = tmp_path / "config.toml"
        # The simulator's home is its state directory: made first, and passed by name.
        (tmp_path / "sim-home").mkdir(exist_ok=True)
        config.write_text(
            f'[bridge]\ndata_dir = "data"\n[agy]\ncommand = {command}\ninit_timeout = 20\n'
            f"state_dirs = []\npass_env = {json.dumps(SIMULATOR_ENV)}\n"
            f"[approvals]\n{approvals}\n"
        )
        self.workdir_root = tmp_path / "data"
        self.lines: list[str] = []
        # Ended by the fixture's tear-down should the test not close it (a wait that gave up).
        self.proc = consoles.start(
            [*CONSOLE, "--config", str(config), "--user", "alice", "--thread", "t"]
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def type(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait(self, text: str, count: int = 1) -> None:
        _wait_until(lambda: self.count(text) >= count, f"never printed {text!r}: {self.lines}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self._reader.join(timeout=10)  # it reads to the end before the tear-down closes stdout


def made(root: Path, name: str) -> Callable[[], bool]:
    return lambda: any(root.rglob(name))


def test_y_a_and_n_answer_the_prompt_and_always_is_offered_for_a_plain_command_only(
    tmp_path: Path, consoles: Consoles
) -> None:
    """One console for both (a console start costs more CPU than the answers): the prompt's
    answers, then, as the README says, a chained line or a write asks ``approve? [y/N]``."""
    console = Console(consoles)
    console.type("[[tool run_command touch yes.txt]]")
    console.wait("approve? [y/a/N]")
    assert not made(tmp_path / "data", "yes.txt")()
    console.type("y")
    console.wait("✅ Approved by alice")
    console.wait("You said")
    assert made(tmp_path / "data", "yes.txt")()

    console.type("[[tool run_command touch no.txt]]")
    console.wait("approve? [y/a/N]", 2)
    console.type("")  # N is the default
    console.wait("denied by alice")
    assert not made(tmp_path / "data", "no.txt")()

    console.type("[[tool run_command echo always]]")
    console.wait("approve? [y/a/N]", 3)
    console.type("a")
    console.wait("Approved always in this thread")
    console.type("[[tool run_command echo always]] again")
    console.wait("You said", 4)
    assert console.count("approve? [y/a/N]") == 3, "the same command did not ask again"

    console.type("[[tool run_command touch why.txt]]")
    console.wait("approve? [y/a/N]", 4)
    # Typed at once: a bare answer could mean the request decided a moment ago, so it names
    # its request (docs/approvals.md, "An answer decides only the request its author saw").
    console.type("deny 4: not on a Friday")
    console.wait("denied by alice: not on a Friday")
    assert not made(tmp_path / "data", "why.txt")()
    console.wait("You said", 5)

    # Always is offered for a plain command only.
    assert console.count("approve? [y/N]") == 0
    console.type("[[tool run_command ls && ls]]")
    console.wait("approve? [y/N]")
    console.type("y")
    console.wait("✅ Approved by alice", 2)
    console.wait("You said", 6)
    console.type("[[write ../outside.txt hello]]")
    console.wait("approve? [y/N]", 2)
    console.type("n")
    console.wait("denied by alice", 3)
    console.wait("You said", 7)
    console.close()
    assert console.count("approve? [y/a/N]") == 4, "no [y/a/N] for the chained line or the write"
    assert console.proc.returncode == 0


def test_sigkill_while_waiting_then_the_request_reads_as_expired(
    tmp_path: Path, consoles: Consoles
) -> None:
    console = Console(consoles)
    console.type("[[tool run_command touch never.txt]]")
    console.wait("approve? [y/a/N]")
    console.proc.send_signal(signal.SIGKILL)
    console.proc.wait(timeout=10)

    again = Console(consoles)
    again.wait("⌛ Expired")
    again.wait("the bridge restarted while it waited")
    again.close()
    assert not made(tmp_path / "data", "never.txt")()
    with sqlite3.connect(tmp_path / "data" / "bridge.sqlite3") as db:
        states = [row[0] for row in db.execute("SELECT state FROM approvals")]
    assert states == [ApprovalState.EXPIRED]


def test_a_request_shows_terminal_control_characters_instead_of_obeying_them() -> None:
    """A carriage return or an escape sequence in a command would let it overwrite itself on
    the terminal (``rm -rf ~\\rls -la`` shows "ls -la"): they are printed visibly."""
    import asyncio
    import io

    from bridge.chat.console.adapter import ConsoleAdapter
    from bridge.core.approvals.texts import request_text
    from bridge.core.events import ApprovalRequest

    out = io.StringIO()
    adapter = ConsoleAdapter(user="alice", stdin=io.StringIO(), stdout=out)
    summary = "rm -rf ~/work\rls -la \x1b[2K\x1b[1Ads\u202e"
    request = ApprovalRequest(
        id="r",
        thread=adapter.thread,
        tool="run_command",
        summary=summary,
        text=request_text(
            tool="run_command", summary=summary, preview="", requested_by=None, timeout=60
        ),
    )
    asyncio.run(adapter.ask_approval(request))
    shown = out.getvalue()
    assert "\r" not in shown and "\x1b" not in shown and "\u202e" not in shown
    assert "rm -rf ~/work\\rls -la \\x1b[2K\\x1b[1Ads\\u202e" in shown
