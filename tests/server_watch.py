"""Stop a test run's shared server when the run ends, even when nothing of pytest is left to.

Run as a script (``python -I -S tests/server_watch.py RUNDIR OWNER OWNER_STARTED PID SIGNAL
STARTED [WORKDIR]``) by
the worker that starts a shared server (tests/shared_servers.py): it waits, without polling,
until either the run's owner (the xdist controller, or the one pytest process of ``-n0``) or the
server ends. When the owner ends first (a run killed at its time limit, a controller killed with
SIGKILL: no pytest hook runs), it stops the server itself and removes its working directory and
the run's directory of locks and records.

Standard library only, so it starts in a few milliseconds; :func:`stop` is also what the
controller's ``pytest_unconfigure`` calls for an ordinary end of the run.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
from pathlib import Path

STOP_TIMEOUT = 20.0


def started_at(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with the pid, a name no later
    process can take; None when no such process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def open_process(pid: int, started: str) -> int | None:
    """A pidfd for ``pid`` if it is still the process that started at ``started``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if started_at(pid) != started:  # ended, and its pid given to another process
        os.close(fd)
        return None
    return fd


def _ended(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def stop(pid: int, signum: int, started: str, workdir: str = "") -> None:
    """Signal the server, wait for it to end (SIGKILL after :data:`STOP_TIMEOUT`), remove its
    working directory (when it has one to remove)."""
    fd = open_process(pid, started)
    if fd is not None:
        try:
            signal.pidfd_send_signal(fd, signum)
            if not _ended(fd, STOP_TIMEOUT):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                _ended(fd, STOP_TIMEOUT)
        except ProcessLookupError:
            pass
        finally:
            os.close(fd)
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


def watch(
    run_dir: str, owner: int, owner_started: str, pid: int, signum: int, started: str, workdir: str
) -> None:
    server = open_process(pid, started)
    if server is None:
        return
    run = open_process(owner, owner_started)
    if run is not None:  # else the run is over already: stop the server now
        poller = select.poll()
        poller.register(server, select.POLLIN)
        poller.register(run, select.POLLIN)
        if server in {fd for fd, _ in poller.poll()}:
            return  # stopped by the run's end (or it failed): nothing left to do
    os.close(server)
    stop(pid, signum, started, workdir)
    shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    run_dir, owner, owner_started, pid, signum, started, *rest = sys.argv[1:]
    # Not the run's: a Ctrl-C at the terminal is the run's to handle (it stops the servers).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    workdir = rest[0] if rest else ""
    watch(run_dir, int(owner), owner_started, int(pid), int(signum), started, workdir)
