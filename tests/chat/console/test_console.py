"""`agy-bridge console` as a user runs it: a subprocess reading lines, talking to the simulator."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.agy.launch import RUN_MARKER_ENV
from bridge.agy.process import pid_state
from tests.chat.console.consoles import Consoles, marked_for

INJECTED = "Injected: (Message written in the chat while you were working)"


def _wait_until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_lines_become_turns_sigterm_ends_a_console_and_the_conversation_continues(
    tmp_path: Path, consoles: Consoles
) -> None:
    """Two consoles on one thread (a console's start costs more CPU than its turns). The
    first: a line becomes a turn, a line typed mid-turn reaches the running turn, and SIGTERM
    ends it with its stdin still open (as a supervisor that keeps stdin open does). The
    second: the conversation agy minted goes on, and closing stdin ends the console once the
    line typed last has had its turn."""
    started, go = tmp_path / "started", tmp_path / "go"
    proc = consoles.open("--thread", "demo")
    assert proc.stdin is not None and proc.stdout is not None
    # Two model calls: the first one touches "started"; the second waits for "go".
    proc.stdin.write(f"hello bridge [[calls 2]] [[touch {started}]] [[wait {go}]]\n")
    proc.stdin.flush()
    _wait_until(started.exists, "the turn never started")
    proc.stdin.write("and one more thing\n")
    proc.stdin.flush()
    _wait_stored(tmp_path / "data" / "bridge.sqlite3", "and one more thing")
    go.touch()
    # Until the turn's answer and the injected line's reaction are out (a blocking readline:
    # the console prints both, then waits for input).
    lines: list[str] = []
    while not all(text in "".join(lines) for text in (INJECTED, "seen by the agent mid-turn")):
        line = proc.stdout.readline()
        assert line, "the console ended before the turn did"
        lines.append(line)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the console did not exit on SIGTERM with stdin open") from None
    out = "".join(lines) + proc.stdout.read()
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert "You said: alice (console:alice): hello bridge" in out
    assert out.count("and one more thing") == 1

    code, out, err = consoles.run("--thread", "demo", typed="!status\nhello again\n")
    assert code == 0, err
    assert "You said: alice (console:alice): hello again" in out
    conversation = next(line for line in out.splitlines() if "Conversation:" in line).split("`")[1]
    assert conversation != "none yet"
    stored = " ".join(p.read_text() for p in (tmp_path / "sim-home").rglob("*") if p.is_file())
    assert conversation in stored, "the bridge keeps the id agy minted"


def _wait_stored(db: Path, text: str) -> None:
    """Until the bridge has the line in its inbox (so the next hook call can take it)."""
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(db) as conn:
            if conn.execute("SELECT 1 FROM inbox WHERE text LIKE ?", (f"%{text}",)).fetchone():
                return
        assert time.monotonic() < deadline, "the line never reached the inbox"
        time.sleep(0.02)


@pytest.mark.slow
def test_sigkill_mid_turn_then_restart_leaves_nothing_behind(
    tmp_path: Path, consoles: Consoles
) -> None:
    pidfile = tmp_path / "child.pid"
    # No per-thread caps, so no cgroup: a killed bridge's sandbox cgroup is ended by the next
    # bridge to start anywhere on the machine (`Enforcement.sweep`), which on a busy machine
    # came before this test looked (the command was gone: a failure now and then). What is
    # left is then only the process group the store recorded, which the restart must end.
    consoles.agy = {"max_processes_per_thread": 0, "max_memory_per_thread": 0}
    before = set(marked_for(tmp_path))
    proc = consoles.open()
    assert proc.stdin is not None
    proc.stdin.write(f"[[tool run_command echo $$ > {pidfile}; exec sleep 60]]\n")
    proc.stdin.flush()
    _wait_until(
        lambda: pidfile.exists() and bool(pidfile.read_text().strip()),
        "the turn never started its command",
    )
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    left = set(marked_for(tmp_path)) - before
    assert child in left, (
        f"agy's command outlives a killed bridge (so restart must end it): {_described(child)}"
    )

    code, out, err = consoles.run(typed="")
    assert code == 0, err
    assert "The bridge restarted while the agent was working" in out
    deadline = time.monotonic() + 10
    while set(marked_for(tmp_path)) - before:
        assert time.monotonic() < deadline, f"left running: {set(marked_for(tmp_path)) - before}"
        time.sleep(0.05)


# A console as a failed test leaves it: its stdin open, a process in its own group, and an agy
# in a session of its own (marked as the bridge marks agy, with the test's simulator home).
_LEFT_RUNNING = f"""
import os, subprocess, sys
agy = subprocess.Popen(["sleep", "120"], env={{**os.environ, "{RUN_MARKER_ENV}": "1"}},
                       start_new_session=True)
helper = subprocess.Popen(["sleep", "120"])
print(agy.pid, helper.pid, flush=True)
sys.stdin.read()
"""


def test_the_tear_down_ends_a_console_left_running_its_group_and_its_agy(
    tmp_path: Path, consoles: Consoles
) -> None:
    """A stand-in console (a real one's agy is found the same way: the SIGKILL test above)."""
    proc = consoles.start([sys.executable, "-c", _LEFT_RUNNING])
    assert proc.stdout is not None
    agy, helper = (int(pid) for pid in proc.stdout.readline().split())
    assert marked_for(tmp_path) == [agy]
    consoles.end()
    assert proc.returncode == -signal.SIGKILL
    # Gone, or a zombie (one whose parent died may wait for a reaper that never comes).
    assert pid_state(agy) in (None, "Z") and pid_state(helper) in (None, "Z")


def _described(pid: int) -> str:
    """What /proc shows of ``pid``: whether it runs, what, and with which marker."""
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        marked = [v for v in (proc / "environ").read_bytes().split(b"\0") if b"AGY_" in v]
    except (OSError, IndexError) as exc:
        return f"pid {pid}: {exc!r}"
    return f"pid {pid}: state {state}, {argv!r}, {marked!r}"
