"""The test suite's PostgreSQL server (tests/pg.py) never outlives the run that started it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PG_SKIP_REASON
from tests.pg import postgres_bin

ROOT = Path(__file__).resolve().parent.parent

STARTER = """
import time
from tests.pg import postgres_bin, start_postgres
server = start_postgres(postgres_bin())
print(server.process.pid, server.workdir, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # ended; a zombie only waits for init to reap it


def test_the_server_ends_when_the_run_that_started_it_is_killed() -> None:
    if postgres_bin() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the PostgreSQL tests: " + PG_SKIP_REASON, pytrace=False)
        pytest.skip(PG_SKIP_REASON)
    # A run killed at its time limit (SIGKILL: no fixture's teardown runs) ...
    run = subprocess.Popen(
        [sys.executable, "-c", STARTER], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert run.stdout is not None
    pid_text, workdir = run.stdout.readline().split()
    pid = int(pid_text)
    try:
        assert not _gone(pid)
        run.kill()
        run.wait()
        # ... takes its server with it (the server is in a session of its own).
        deadline = time.monotonic() + 30
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(pid), "PostgreSQL outlived the test run that started it"
    finally:
        if not _gone(pid):
            os.kill(pid, 9)
        shutil.rmtree(workdir, ignore_errors=True)
