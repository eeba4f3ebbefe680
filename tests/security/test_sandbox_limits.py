"""One thread's agent trying to starve the host: thousands of processes, a memory hog, gigabytes
written to its /tmp and its home. Each attack runs in a real bubblewrap sandbox (the simulator as
agy, the commands in a real bash) with a bounded load, and legitimate work runs beside it.

On the code before the caps (issue 40), every one of these succeeded: 3,000 processes started,
and /tmp and the sandbox's root were tmpfs of half the host's memory each.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from bridge.agy.launch import RUN_MARKER_ENV
from bridge.agy.limits import Limits, enforcement
from bridge.config import AgySection
from tests.agy.sandboxed import sandboxed_bridge
from tests.core.harness import thread

pytestmark = pytest.mark.anyio

A, B = thread("a"), thread("b")
# The default cap: 3,000 processes do not all start with the default config.
MAX_PROCESSES = AgySection().max_processes_per_thread


def require_cgroups() -> None:
    found = enforcement(Limits(max_processes=10, max_memory=64 << 20))
    if found.mechanism not in ("cgroup1", "cgroup2"):
        pytest.skip(f"no cgroups the bridge may create here: {found.problem}")


def _count(argv0: bytes, marker: str) -> int:
    """Processes on the host whose command line starts with ``argv0`` and that carry this
    bridge's run marker (so other tests' processes are not counted)."""
    found = 0
    wanted = f"{RUN_MARKER_ENV}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "cmdline").read_bytes().startswith(argv0):
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found += 1
        except OSError:
            continue
    return found


def _cgroups() -> list[Path]:
    """This process's sandbox cgroups (named with its PID: another test worker's bridge has
    its own)."""
    return [
        path
        for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/memory"))
        for path in root.rglob(f"agy-bridge.{os.getpid()}.*")
        if path.is_dir()
    ]


async def test_thousands_of_processes_stop_at_the_cap_and_the_other_thread_carries_on(
    tmp_path: Path,
) -> None:
    require_cgroups()
    sleep = b"sleep\x00987\x00"
    assert MAX_PROCESSES < 3000
    async with sandboxed_bridge(tmp_path) as box:
        marker = box.h.bridge.runtime.run_marker
        # Legitimate work first: a test suite with a few dozen workers.
        suite = await box.run(A, "for i in $(seq 40); do sleep 0.3 & done; wait; echo suite ok")
        assert "suite ok" in suite and suite.endswith("rc=0\n"), suite
        # The attack: 3,000 background processes (bash retries a refused fork for a while).
        bomb = "for i in $(seq 3000); do sleep 987 > /dev/null 2>&1 & done"
        await box.h.say(f"[[tool run_command {bomb}]]", where=A)
        with anyio.fail_after(60):
            while _count(sleep, marker) < MAX_PROCESSES - 50:
                await anyio.sleep(0.1)
        await anyio.sleep(1)
        started = _count(sleep, marker)
        assert started <= MAX_PROCESSES, f"{started} processes started in one thread"
        # Another thread is answered meanwhile.
        await box.turn(B, "hello from b")
        await box.h.say("!stop", where=A, who="bob")
        [_, stopped] = await box.h.adapter.wait_finished(2, A)
        assert stopped.outcome is not None
        notes = " ".join(stopped.outcome.notes)
        assert f"limit of {MAX_PROCESSES} processes" in notes, stopped.outcome
        with anyio.fail_after(20):
            while _count(sleep, marker):
                await anyio.sleep(0.05)
        # The thread works again after the stop.
        again = await box.run(A, "echo still here")
        assert "still here" in again
    assert _cgroups() == []  # every sandbox's cgroup went with it


async def test_a_memory_hog_and_huge_writes_to_tmp_and_home_are_stopped_early(
    tmp_path: Path,
) -> None:
    require_cgroups()
    agy = {"max_memory_per_thread": "512MiB", "tmp_size": "256MiB"}
    async with sandboxed_bridge(tmp_path, agy=agy) as box:
        # A 100 MB build in /tmp works.
        build = await box.run(
            A, "head -c 100M /dev/urandom > /tmp/build.o && ls -l /tmp/build.o && rm /tmp/build.o"
        )
        assert build.endswith("rc=0\n"), build
        # 4 GiB into /tmp: the disk is full at /tmp's size.
        tmp = await box.run(A, "head -c 4G /dev/zero > /tmp/big; du -m /tmp/big; rm /tmp/big")
        assert "No space left on device" in tmp, tmp
        assert int(tmp.split("\n")[1].split()[0]) <= 256, tmp
        # 4 GiB into the home (on the sandbox's root): stopped too, before a byte is written
        # since the read-only root (issue 38); a sized root tmpfs was the stop before that.
        home = await box.run(
            A,
            'mkdir -p "$HOME" && head -c 4G /dev/zero > "$HOME/big"; du -m "$HOME/big"; '
            'rm "$HOME/big"',
        )
        assert "Read-only file system" in home, home
        # And into /dev/shm.
        shm = await box.run(
            A, "head -c 4G /dev/zero > /dev/shm/big; du -m /dev/shm/big; rm /dev/shm/big"
        )
        assert "No space left on device" in shm, shm
        # A memory hog: tail keeps a line without end in memory.
        hog_marker = len(box.h.adapter.finished(A)) + 1
        await box.h.say("[[tool run_command head -c 3G /dev/zero | tail > /dev/null]]", where=A)
        [*_, hogged] = await box.h.adapter.wait_finished(hog_marker, A)
        assert hogged.outcome is not None
        assert "ran out of memory" in " ".join(hogged.outcome.notes), hogged.outcome
        # The agent (and its thread) go on; another thread never noticed.
        after = await box.run(A, "echo alive")
        assert "alive" in after
        await box.turn(B, "hello from b")
