"""`agy-bridge console` started as a user runs it, for the console's tests: its config, its
environment, and the consoles a test starts, ended by the ``consoles`` fixture's tear-down
(tests/chat/console/conftest.py) however the test ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.core.harness import SIMULATOR_ENV
from tests.faults.console import console_env, marked_processes


def console_config(tmp_path: Path, **agy: object) -> Path:
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


def console_argv(tmp_path: Path, *args: str, **agy: object) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bridge",
        "console",
        "--config",
        str(console_config(tmp_path, **agy)),
        "--user",
        "alice",
        *args,
    ]


class Consoles:
    """The consoles one test starts, each leading a process group of its own. Its tear-down
    (`end`, run by the ``consoles`` fixture however the test ended: a wait that gave up,
    pytest-timeout's signal) ends what is left: a console whose stdin is still open and whose
    turn waits runs on after a failed test, and so does its agy, forever."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen[str]] = []
        # The [agy] settings of the consoles `open` starts, over `console_config`'s.
        self.agy: dict[str, object] = {}

    def open(self, *args: str) -> subprocess.Popen[str]:
        """A console the test types into line by line."""
        return self.start(console_argv(self.tmp_path, *args, **self.agy))

    def start(self, argv: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=console_env(self.tmp_path),
            start_new_session=True,
        )
        self.started.append(proc)
        return proc

    def run(self, *args: str, typed: str) -> tuple[int, str, str]:
        """A console given ``typed``, then its stdin closed: its exit code, stdout, stderr."""
        proc = self.open(*args)
        out, err = proc.communicate(typed, timeout=60)
        return proc.returncode, out, err

    def end(self) -> None:
        """SIGKILL each console's process group while the console is not reaped (its pid, the
        group's id, cannot have been reused), then every process of this test's agy (each in
        a group of its own, found by this test's simulator home), then reap the consoles."""
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while left := marked_for(self.tmp_path):
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert time.monotonic() < deadline, f"agy processes would not die: {left}"
            time.sleep(0.02)
        for proc in self.started:
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()


def marked_for(tmp_path: Path) -> list[int]:
    """This test's agy processes and their children (others' run on the same machine, in
    parallel: the needle, this test's simulator home, keeps them out)."""
    return marked_processes(f"AGY_SIM_HOME={tmp_path / 'sim-home'}")
