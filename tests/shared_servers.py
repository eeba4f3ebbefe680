"""One Synapse and one PostgreSQL per test run, shared by every xdist worker (a pytest plugin).

Who starts a server: the first worker that needs it. The run's owner (the xdist controller, or
the one pytest process of ``-n0``) makes a directory for the run in ``pytest_configure`` and
hands its path and its own pid to the workers (``pytest_configure_node``). A worker's session
fixture takes the server's lock there (``flock``: released by the kernel if the worker dies):
the first finds no record, starts the server and writes the record (how to reach it); the
others wait on the lock and read it.

Who stops it: the owner. Every server process is registered in the run's directory as soon as
it is spawned (before it is ready, so a worker that dies while starting one leaves nothing
behind), and ``pytest_unconfigure`` of the owner, after the workers have ended, stops what was
registered. Should the owner itself be killed (no hook runs), each server has a watchdog
(tests/server_watch.py, a process of a few milliseconds' CPU that waits on the owner's pidfd)
that stops it. A worker that crashes takes nothing with it: the servers belong to the run.

The Matrix outage tests stop no server: they take the shared homeserver's address away for a
while (tests/chat/matrix/outage.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server_watch import started_at, stop

_DIR_KEY = "agy_bridge_run_dir"
_OWNER_KEY = "agy_bridge_run_owner"
_WATCH = Path(__file__).with_name("server_watch.py")


@dataclass(frozen=True)
class Run:
    """The run's directory of locks and records, and the process whose end ends the servers."""

    directory: Path
    owner: int
    owner_started: str

    def register(self, pid: int, signum: int, workdir: Path | None = None) -> None:
        """Own a just-spawned server process: stopped at the run's end, whatever ends it."""
        started = started_at(pid)
        if started is None:
            return  # ended already (a failed start)
        entry = {"pid": pid, "signal": int(signum), "started": started, "workdir": ""}
        if workdir is not None:
            entry["workdir"] = str(workdir)
        owned = self.directory / "owned"
        owned.mkdir(exist_ok=True)
        _write(owned / f"{pid}.json", entry)
        subprocess.Popen(
            [sys.executable, "-I", "-S", str(_WATCH), str(self.directory),
             str(self.owner), self.owner_started, str(pid), str(int(signum)), started,
             entry["workdir"]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def shared(self, name: str, start: Callable[[Run], dict[str, Any]]) -> dict[str, Any]:
        """The record of the run's server ``name`` (what reaches it), started on first use."""
        record = self.directory / f"{name}.json"
        with (self.directory / f"{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if record.exists():
                found: dict[str, Any] = json.loads(record.read_text())
                return found
            info = start(self)
            _write(record, info)
            return info

    def stop_all(self) -> None:
        owned = self.directory / "owned"
        for path in sorted(owned.glob("*.json")) if owned.is_dir() else []:
            entry = json.loads(path.read_text())
            stop(entry["pid"], entry["signal"], entry["started"], entry["workdir"])


def _write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)


_RUN = pytest.StashKey[Run]()


def run_of(config: pytest.Config) -> Run:
    """This run's :class:`Run`, in the owner and in every worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        owner = int(workerinput[_OWNER_KEY])
        return Run(Path(workerinput[_DIR_KEY]), owner, str(started_at(owner)))
    return config.stash[_RUN]


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    directory = Path(tempfile.mkdtemp(prefix="agy-bridge-run-"))
    config.stash[_RUN] = Run(directory, os.getpid(), str(started_at(os.getpid())))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's hook, in the controller, for each worker it starts."""
    run: Run = node.config.stash[_RUN]
    node.workerinput[_DIR_KEY] = str(run.directory)
    node.workerinput[_OWNER_KEY] = run.owner


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The owner, after the workers have ended: stop every server of the run."""
    if hasattr(config, "workerinput") or _RUN not in config.stash:
        return
    run = config.stash[_RUN]
    run.stop_all()
    shutil.rmtree(run.directory, ignore_errors=True)
