"""Driving `python -m bridge console` as a subprocess, and looking at what it left behind.

Shared by the fault and security suites: a config writer, the subprocess with its output in
files (so a SIGKILLed run still leaves its output to read), a read-only view of the bridge's
SQLite store, the simulator's stored conversations, and a /proc scan for agy processes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.agy.launch import RUN_MARKER_ENV
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in
from tests.faults.forked import Zygote

SIMULATOR = [sys.executable, "-m", "bridge.simulator"]
READY_LINE = "console adapter connected"


def write_config(
    root: Path,
    *,
    command: list[str] | None = None,
    log_level: str = "INFO",
    agy: dict[str, Any] | None = None,
    extra: str = "",
) -> Path:
    """A TOML config under ``root`` whose data dir is ``root/data``."""
    # Unsandboxed unless asked: these tests signal the agent through files outside its workspace.
    settings = {
        "command": command or SIMULATOR,
        "init_timeout": 20,
        "stop_grace": 2,
        "isolation": "none",
        # The fake agy's control folder comes from the environment too.
        "pass_env": [*SIMULATOR_ENV, "FAKE_AGY_DIR"],
    }
    settings.update(agy or {})
    lines = [
        "[bridge]",
        'data_dir = "data"',
        f"log_level = {json.dumps(log_level)}",
        "[approvals]",  # these tests run tools freely; approvals have tests of their own
        'mode = "off"',
        "[agy]",
        *(f"{key} = {_toml(value)}" for key, value in settings.items()),
        extra,
    ]
    path = root / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def console_env(root: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "AGY_SIM_HOME": str(signed_in(root / "sim-home")),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@dataclass
class ConsoleRun:
    """One console process; stdout and stderr go to files that outlive a SIGKILL."""

    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the bridge logs that the console adapter is connected (the store is open)."""
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.stderr.read_text(errors="replace"):
            if self.proc.poll() is not None:
                raise AssertionError(f"the console exited early:\n{self.err()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the console never got ready:\n{self.err()}")
            time.sleep(0.05)

    def wait_output(self, text: str, timeout: float = 60) -> None:
        """Until ``text`` is on the console's stdout (the thread)."""
        deadline = time.monotonic() + timeout
        while text not in self.out():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never printed {text!r}:\n{self.out()}\n{self.err()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._close_stdin()

    def finish(self, timeout: float = 120) -> int:
        """Close stdin (the user is done) and wait for the console to exit on its own."""
        self._close_stdin()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the console did not exit:\n{self.err()}") from None

    def out(self) -> str:
        return self.stdout.read_text(errors="replace")

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def _close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass


def start_console(
    root: Path,
    config: Path,
    name: str,
    *,
    thread: str = "T",
    env: dict[str, str] | None = None,
    zygote: Zygote | None = None,
) -> ConsoleRun:
    """``zygote``: the process forked from it (tests/faults/forked.py), not a new interpreter."""
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    stdout, stderr = logs / f"{name}.out", logs / f"{name}.err"
    argv = ["console", "--config", str(config), "--thread", thread, "--user", "alice"]
    with stdout.open("wb") as out, stderr.open("wb") as err:
        if zygote is not None:
            proc: Any = zygote.popen(argv, env or console_env(root), root, stdout, stderr)
        else:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bridge", *argv],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=env or console_env(root),
                cwd=root,
            )
    return ConsoleRun(proc, stdout, stderr)


# --- what the bridge stored ------------------------------------------------------------------


def read_store(root: Path, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
    """Rows from the bridge's store, read-only (run it only while no bridge is running)."""
    path = root / "data" / "bridge.sqlite3"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        db.row_factory = sqlite3.Row
        return list(db.execute(sql, tuple(params)))
    finally:
        db.close()


def sim_conversations(sim_home: Path) -> list[Path]:
    """The simulator's stored conversations. Not its files being written: it writes each one
    as a hidden ``.tmp-…json`` and renames it into place, so a glob for ``*.json`` may list one
    that is renamed before it is read (a FileNotFoundError under load)."""
    folder = sim_home / "conversations"
    found = folder.glob("*.json") if folder.is_dir() else []
    return sorted(path for path in found if not path.name.startswith("."))


def sim_conversation_messages(sim_home: Path, roles: Iterable[str]) -> list[str]:
    """The texts of every stored simulator conversation's messages with one of ``roles``."""
    wanted = set(roles)
    texts = []
    for path in sim_conversations(sim_home):
        data = json.loads(path.read_text("utf-8"))
        texts += [m["text"] for m in data.get("messages", []) if m.get("role") in wanted]
    return texts


# --- processes -------------------------------------------------------------------------------


def marked_processes(needle: str) -> list[int]:
    """Live agy processes (and their children) of bridges whose environment holds ``needle``.

    Every agy the bridge starts carries the run marker; the needle (for example this test's
    AGY_SIM_HOME) keeps processes of other tests running on the same machine out.
    """
    marker = f"{RUN_MARKER_ENV}=".encode()
    wanted = needle.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        variables = environ.split(b"\0")
        if state != "Z" and any(v.startswith(marker) for v in variables) and wanted in variables:
            found.append(int(entry.name))
    return found


def wait_no_marked_processes(needle: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while left := marked_processes(needle):
        if time.monotonic() > deadline:
            details = {pid: _cmdline(pid) for pid in left}
            raise AssertionError(f"agy processes left running: {details}")
        time.sleep(0.05)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "?"
