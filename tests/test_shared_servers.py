"""The servers a run shares (tests/shared_servers.py): started once, stopped with the run.

Stand-ins for the servers (``sleep``), so these take milliseconds; the real ones are the Matrix
and PostgreSQL tests' fixtures, and tests/test_pg.py kills a run that started a PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.server_watch import started_at
from tests.shared_servers import Run


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # ended; a zombie only waits for its parent to reap it


def _until_gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def _run(directory: Path, owner: subprocess.Popen[bytes]) -> Run:
    started = started_at(owner.pid)
    assert started is not None
    return Run(directory, owner.pid, started)


def test_a_server_is_started_once_however_many_ask_at_once(tmp_path: Path) -> None:
    owner = _sleeper()
    run = _run(tmp_path, owner)
    starts: list[int] = []
    records: list[dict[str, Any]] = []

    def start(_: Run) -> dict[str, Any]:
        starts.append(1)
        time.sleep(0.2)  # the others ask while this one starts
        return {"port": 1234}

    askers = [
        threading.Thread(target=lambda: records.append(run.shared("x", start))) for _ in range(4)
    ]
    try:
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join(30)
        assert len(starts) == 1
        assert records == [{"port": 1234}] * 4
    finally:
        owner.kill()
        owner.wait()


def test_the_runs_end_stops_what_was_registered(tmp_path: Path) -> None:
    owner = _sleeper()
    server = _sleeper()
    workdir = tmp_path / "server"
    workdir.mkdir()
    try:
        run = _run(tmp_path, owner)
        run.register(server.pid, signal.SIGTERM, workdir)
        run.stop_all()
        assert server.wait(30) == -signal.SIGTERM
        assert not workdir.exists()
    finally:
        for process in (owner, server):
            process.kill()
            process.wait()


def test_a_server_ends_with_a_run_killed_before_its_hooks_ran(tmp_path: Path) -> None:
    owner = _sleeper()
    # Not a child of this process (as a server outlives the worker that started it): the
    # watchdog, not a wait here, must see it end.
    launcher = subprocess.run(
        ["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    server_pid = int(launcher.stdout)
    workdir = tmp_path / "server"
    workdir.mkdir()
    try:
        run = _run(tmp_path / "run", owner)
        run.directory.mkdir()
        run.register(server_pid, signal.SIGTERM, workdir)
        assert not _gone(server_pid)
        owner.kill()  # SIGKILL: no pytest_unconfigure
        owner.wait()
        assert _until_gone(server_pid), "the server outlived the run"
        deadline = time.monotonic() + 30
        while (workdir.exists() or run.directory.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not workdir.exists() and not run.directory.exists()
    finally:
        if not _gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_pid_taken_by_another_process_is_not_stopped(tmp_path: Path) -> None:
    bystander = _sleeper()
    try:
        run = _run(tmp_path, bystander)
        owned = tmp_path / "owned"
        owned.mkdir()
        # A record whose process ended and whose pid is now the bystander's.
        (owned / f"{bystander.pid}.json").write_text(
            f'{{"pid": {bystander.pid}, "signal": 15, "started": "1", "workdir": ""}}'
        )
        run.stop_all()  # a stop waits until its process has ended
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
