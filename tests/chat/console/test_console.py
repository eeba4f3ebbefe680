"""`agy-bridge console` as a user runs it: a subprocess reading lines, talking to the simulator."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in
from tests.faults.console import marked_processes


def _config(tmp_path: Path, **agy: object) -> Path:
    command = json.dumps([sys.executable, "-m", "bridge.simulator"])
    # Unsandboxed unless asked: these tests signal the agent through files outside its workspace.
    agy = {"isolation": "none", "pass_env": SIMULATOR_ENV, **agy}
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in agy.items())
    path = tmp_path / "config.toml"
    path.write_text(
        f'[bridge]\ndata_dir = "data"\n[approvals]\nmode = "off"\n'
        f"[agy]\ncommand = {command}\ninit_timeout = 20\n{extra}"
    )
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AGY_SIM_HOME": str(signed_in(tmp_path / "sim-home")),
        "PYTHONUNBUFFERED": "1",
    }


def _console(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bridge",
        "console",
        "--config",
        str(_config(tmp_path)),
        "--user",
        "alice",
        *args,
    ]


def _open_console(tmp_path: Path) -> subprocess.Popen[str]:
    """A console the test types into line by line."""
    return subprocess.Popen(
        _console(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )


INJECTED = "Injected: (Message written in the chat while you were working)"


def _wait_until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_lines_become_turns_and_the_conversation_continues(tmp_path: Path) -> None:
    first = subprocess.run(
        _console(tmp_path, "--thread", "demo"),
        input="hello bridge\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path),
    )
    assert first.returncode == 0, first.stderr
    assert "You said: alice (console:alice): hello bridge" in first.stdout
    second = subprocess.run(
        _console(tmp_path, "--thread", "demo"),
        input="!status\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path),
    )
    assert second.returncode == 0, second.stderr
    conversation = next(
        line for line in second.stdout.splitlines() if "Conversation:" in line
    ).split("`")[1]
    assert conversation != "none yet"
    stored = " ".join(p.read_text() for p in (tmp_path / "sim-home").rglob("*") if p.is_file())
    assert conversation in stored, "the bridge keeps the id agy minted"


def test_a_line_typed_mid_turn_is_injected_and_sigterm_ends_it_with_input_open(
    tmp_path: Path,
) -> None:
    """One console for both (its start costs more CPU than the turn): a line typed mid-turn
    reaches the running turn; then, as a supervisor that keeps stdin open does, SIGTERM must
    end it without waiting for stdin to close (closing stdin ends it too:
    test_lines_become_turns_and_the_conversation_continues)."""
    started, go = tmp_path / "started", tmp_path / "go"
    proc = _open_console(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    # Two model calls: the first one touches "started"; the second waits for "go".
    proc.stdin.write(f"start [[calls 2]] [[touch {started}]] [[wait {go}]]\n")
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
        proc.kill()
        raise AssertionError("the console did not exit on SIGTERM with stdin open") from None
    finally:
        proc.stdin.close()
    out = "".join(lines) + proc.stdout.read()
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert out.count("and one more thing") == 1


def _wait_stored(db: Path, text: str) -> None:
    """Until the bridge has the line in its inbox (so the next hook call can take it)."""
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(db) as conn:
            if conn.execute("SELECT 1 FROM inbox WHERE text LIKE ?", (f"%{text}",)).fetchone():
                return
        assert time.monotonic() < deadline, "the line never reached the inbox"
        time.sleep(0.02)


def _marked_processes(tmp_path: Path) -> list[int]:
    """This test's agy processes and their children (others' run on the same machine, in
    parallel: the needle, this test's simulator home, keeps them out)."""
    return marked_processes(f"AGY_SIM_HOME={tmp_path / 'sim-home'}")


@pytest.mark.slow
def test_sigkill_mid_turn_then_restart_leaves_nothing_behind(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    before = set(_marked_processes(tmp_path))
    proc = _open_console(tmp_path)
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
    left = set(_marked_processes(tmp_path)) - before
    assert child in left, "agy's command outlives a killed bridge (so restart must end it)"

    again = subprocess.run(
        _console(tmp_path),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path),
    )
    assert again.returncode == 0, again.stderr
    assert "The bridge restarted while the agent was working" in again.stdout
    deadline = time.monotonic() + 10
    while set(_marked_processes(tmp_path)) - before:
        assert time.monotonic() < deadline, (
            f"left running: {set(_marked_processes(tmp_path)) - before}"
        )
        time.sleep(0.05)
