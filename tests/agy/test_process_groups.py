"""Finding and ending a process group left by an earlier run: /proc parsing and the marker check
(found by mutation testing, see docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from bridge.agy.launch import RUN_MARKER_ENV
from bridge.agy.process import group_members, pid_state, reap_group


@contextmanager
def leftover(tmp_path: Path, marker: str, name: str = "sleep") -> Iterator[int]:
    """A process in its own group carrying ``marker``, as a killed bridge leaves agy behind."""
    program = tmp_path / name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    proc = subprocess.Popen(
        [str(program), "60"], env={**os.environ, RUN_MARKER_ENV: marker}, start_new_session=True
    )
    try:
        yield proc.pid
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_process_is_found_in_its_own_group_only(tmp_path: Path) -> None:
    # A command name with a parenthesis and spaces: /proc/PID/stat must be split after the last ")".
    with leftover(tmp_path, "m1", name="a) b (c") as pid:
        assert pid_state(pid) in ("S", "R")
        assert group_members(pid) == [pid]
        assert pid not in group_members(os.getpgid(0))
    assert pid_state(pid) is None
    assert pid_state(2**22 + 12345) is None


@pytest.mark.anyio
async def test_a_leftover_group_is_ended_only_when_it_carries_our_marker(tmp_path: Path) -> None:
    with leftover(tmp_path, "run-1") as pid:
        assert not await reap_group(pid, "run-2"), "a recycled id of someone else's process"
        assert pid_state(pid) in ("S", "R")
        assert await reap_group(pid, "run-1")
        with anyio.fail_after(10):
            while pid_state(pid) not in (None, "Z"):
                await anyio.sleep(0.02)
    assert not await reap_group(pid, "run-1"), "nothing left to end"
    assert sys.platform.startswith("linux")
