"""Drive ``python -m bridge.simulator`` as a subprocess, as the bridge drives agy."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.doubles import signed_in

REPO = Path(__file__).resolve().parents[2]
STREAM_ARGS = ["--input-format", "stream-json", "--output-format", "stream-json", "--print="]


def user_line(text: str) -> bytes:
    message = {
        "event": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }
    return (json.dumps(message) + "\n").encode()


class Sim:
    """One simulator process: write stdin lines, read stdout events with a deadline.

    Every wait on it (a line, its exit) lasts until shortly before the running test's own
    deadline (``seconds_left``, tests/deadline.py), not a fixed time: the line after an MCP call
    waits for the simulator to import the SDK, and beside other workers a fixed 15 s ran out
    while the test had 120 s."""

    def __init__(
        self,
        args: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        seconds_left: Callable[[], float],
    ):
        self.seconds_left = seconds_left
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge.simulator", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.raw_lines: list[bytes] = []
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: list[bytes] = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        self._stderr_pump = threading.Thread(target=self._pump_stderr, daemon=True)
        self._stderr_pump.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in iter(self.proc.stderr.readline, b""):
            self._stderr.append(line)

    def send(self, text: str) -> None:
        self.send_raw(user_line(text))

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def next_line(self) -> bytes | None:
        """The next stdout line, or ``None`` at EOF."""
        try:
            line = self._lines.get(timeout=self.seconds_left())
        except queue.Empty:
            raise AssertionError("the simulator printed nothing in time") from None
        if line is not None:
            self.raw_lines.append(line)
        return line

    def next_event(self) -> dict[str, Any]:
        line = self.next_line()
        assert line is not None, f"stdout closed; stderr: {self.stderr()}"
        return json.loads(line)

    def until(self, event: str, **match: Any) -> list[dict[str, Any]]:
        """Events up to and including the first ``event`` whose step/result fields match."""
        seen = []
        while True:
            obj = self.next_event()
            seen.append(obj)
            body = obj.get(event) if obj.get("event") == event else None
            if isinstance(body, dict) and all(body.get(k) == v for k, v in match.items()):
                return seen

    def turn(self) -> list[dict[str, Any]]:
        return self.until("result")

    def rest(self) -> list[bytes]:
        """Every remaining stdout line until EOF."""
        lines = []
        while (line := self.next_line()) is not None:
            lines.append(line)
        return lines

    def wait(self) -> int:
        return self.proc.wait(timeout=self.seconds_left())

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def stderr(self) -> str:
        """What the simulator wrote to stderr; all of it once it has exited (the pump may still
        be reading the pipe's last lines when ``wait`` returns)."""
        if self.proc.poll() is not None:
            self._stderr_pump.join(self.seconds_left())
        return b"".join(self._stderr).decode("utf-8", "replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class SimFactory:
    def __init__(self, root: Path, seconds_left: Callable[[], float]):
        self.root = root
        # How long a wait on a simulator may last now (tests/deadline.py).
        self.seconds_left = seconds_left
        self.home = signed_in(root / "home")  # a test may sign it out again
        self.cwd = root / "cwd"
        self.cwd.mkdir()
        self.started: list[Sim] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGY_SIM_")}
        env["AGY_SIM_HOME"] = str(self.home)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(extra)
        return env

    def start(self, *args: str, stream: bool = True, **env: str) -> Sim:
        argv = [*STREAM_ARGS, *args] if stream else list(args)
        sim = Sim(argv, cwd=self.cwd, env=self.env(**env), seconds_left=self.seconds_left)
        self.started.append(sim)
        return sim

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """A short command (``--help``, ``models``) run to completion."""
        return subprocess.run(
            [sys.executable, "-m", "bridge.simulator", *args],
            cwd=self.cwd,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=self.seconds_left(),
            check=False,
        )


def make_plugin(
    workspace: Path,
    name: str = "bridge",
    *,
    hooks: Any = None,
    hooks_raw: str | None = None,
    mcp_raw: str | None = None,
    rules: dict[str, bytes] | None = None,
) -> Path:
    """A plugin folder under ``workspace/.agents/plugins/<name>``; returns the folder."""
    root = workspace / ".agents" / "plugins" / name
    root.mkdir(parents=True)
    (root / "plugin.json").write_text(json.dumps({"name": name}))
    if hooks is not None:
        hooks_raw = json.dumps(hooks)
    if hooks_raw is not None:
        (root / "hooks.json").write_text(hooks_raw)
    if mcp_raw is not None:
        (root / "mcp_config.json").write_text(mcp_raw)
    for file_name, data in (rules or {}).items():
        (root / "rules").mkdir(exist_ok=True)
        (root / "rules" / file_name).write_bytes(data)
    return root


def steps(events: list[dict[str, Any]], step_type: str | None = None) -> list[dict[str, Any]]:
    found = [e["step_update"] for e in events if e.get("event") == "step_update"]
    return [s for s in found if step_type is None or s["step_type"] == step_type]


def result_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["event"] == "result", events[-1]
    return events[-1]["result"]
