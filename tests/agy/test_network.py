"""A sandbox's own network (bridge/agy/network.py): its set-up's deadline on a slow host."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from bridge.agy.network import find_slirp, network_problem, resolve_network
from bridge.agy.sandbox import find_bwrap
from tests.agy.sandboxed import require_bwrap, sandboxed_bridge
from tests.core.harness import thread

pytestmark = pytest.mark.anyio

# Longer than the fixed 10 s the set-up once had: a loaded host's bubblewrap, slow to set its
# sandbox up (namespaces, mounts) and say which process to connect.
SLOW_START = 11
A = thread("a")


async def test_a_network_slow_to_set_up_on_a_loaded_host_is_still_the_sandboxes_own(
    tmp_path: Path,
) -> None:
    """The set-up is part of agy's start and has the start's allowance (``init_timeout``). A
    fixed window of its own, passed on a busy host at the bridge's start, gave every sandbox
    the host's network (its loopback services: the store, the listener) for the bridge's life;
    passed at a thread's start, it failed that thread's turn."""
    require_bwrap()
    if find_slirp() is None or os.geteuid() != 0:
        pytest.skip("a sandbox's own network needs slirp4netns and root")
    bwrap = find_bwrap()
    assert bwrap is not None
    slow = tmp_path / "slow-bwrap"
    slow.write_text(f'#!/bin/sh\nsleep {SLOW_START}\nexec {bwrap} "$@"\n')
    slow.chmod(0o755)
    network = await resolve_network(None, str(slow))
    assert network.private, network.problem


# --- a slirp4netns that hangs for good ----------------------------------------------------------

# The set-up's allowance in these tests (``init_timeout``, short), and the tests' own bound: the
# old code's waits ran in threads the deadline could not cancel, and never ended.
SHORT_SETUP = 2.0
# The thread's: its check at the bridge's start is a real sandbox with the real slirp4netns.
INIT_TIMEOUT = 10
BOUND = 90


def _hanging_slirp(tmp_path: Path, *, real_until: Path | None = None) -> tuple[Path, Path]:
    """A slirp4netns that starts, never writes its ready byte, never exits (not when its exit-fd
    closes, not on SIGTERM): it records its PID and the sandbox's PID it was given, then sleeps.
    With ``real_until``: the real slirp4netns until that file exists."""
    seen = tmp_path / "slirp-seen"
    fake = tmp_path / "bin" / "slirp4netns"
    fake.parent.mkdir()
    real = f'[ -e {real_until} ] || exec {find_slirp()} "$@"\n' if real_until else ""
    # ``exec`` keeps the recorded PID; an ignored SIGTERM stays ignored across it. The record
    # appears whole (renamed into place): a test that sees it and stops the bridge at once must
    # not read a file created but not yet written (the bridge then kills this before it writes).
    args = 'for a in "$@"; do last2=$last1; last1=$a; done'
    record = f'echo "$$ $last2" > {seen}.part && mv {seen}.part {seen}'
    fake.write_text(f"#!/bin/sh\n{real}trap '' TERM\n{args}\n{record}\nexec sleep 100000\n")
    fake.chmod(0o755)
    return fake, seen


def _gone(pid: int) -> bool:
    """The process has ended and been reaped (or ended, a zombie whose parent is gone)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return status.rsplit(")", 1)[1].split()[0] == "Z"


def _require_private() -> str:
    require_bwrap()
    if find_slirp() is None or os.geteuid() != 0:
        pytest.skip("a sandbox's own network needs slirp4netns and root")
    bwrap = find_bwrap()
    assert bwrap is not None
    return bwrap


async def test_a_slirp4netns_that_never_gets_ready_fails_the_check_within_its_deadline(
    tmp_path: Path,
) -> None:
    """The check at the bridge's start connects one real sandbox: a slirp4netns that hangs fails
    it within the allowance (the host's network, said why), and leaves no process behind."""
    bwrap = _require_private()
    fake, seen = _hanging_slirp(tmp_path)
    with anyio.fail_after(BOUND):
        problem = await network_problem(bwrap, str(fake), SHORT_SETUP)
    assert problem == (
        "a sandbox's own network could not be set up: it was not ready within 2 s "
        "([agy] init_timeout; slirp4netns did not report it was ready)"
    )
    slirp_pid, sandbox_pid = (int(word) for word in seen.read_text().split())
    assert _gone(slirp_pid) and _gone(sandbox_pid), seen.read_text()


async def test_a_thread_whose_slirp4netns_hangs_is_told_and_the_bridge_still_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's start with a slirp4netns that hangs for good fails at the start's deadline
    (``init_timeout``), in words; no slirp4netns or sandbox is left; the bridge then stops (it
    used to wait for the set-up's thread for ever). The bridge found slirp4netns on PATH, and
    it worked for the check at the bridge's start."""
    _require_private()
    hang = tmp_path / "hang-from-now-on"
    fake, seen = _hanging_slirp(tmp_path, real_until=hang)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with anyio.fail_after(BOUND):
        async with sandboxed_bridge(tmp_path, agy={"init_timeout": INIT_TIMEOUT}) as box:
            network = box.h.bridge.runtime.isolation.network
            assert network.private and network.slirp == str(fake), network
            hang.touch()
            await box.h.say("hello", where=A)
            told = (
                "the sandbox's network could not be set up: it was not ready within "
                f"{INIT_TIMEOUT} s ([agy] init_timeout; slirp4netns did not report it was ready)"
            )
            await box.h.adapter.wait_notice(told, timeout=BOUND)
            slirp_pid, sandbox_pid = (int(word) for word in seen.read_text().split())
            assert _gone(slirp_pid) and _gone(sandbox_pid), seen.read_text()


async def test_the_bridge_stops_while_a_threads_slirp4netns_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bridge stops while a thread's set-up waits for a slirp4netns that hangs, long before
    the start's deadline: the wait is cancelled, slirp4netns and the sandbox are ended."""
    _require_private()
    hang = tmp_path / "hang-from-now-on"
    fake, seen = _hanging_slirp(tmp_path, real_until=hang)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    # The deadline is far beyond the test's bound: only a cancelled wait lets the bridge stop.
    with anyio.fail_after(BOUND):
        async with sandboxed_bridge(tmp_path, agy={"init_timeout": 3 * BOUND}) as box:
            hang.touch()
            await box.h.say("hello", where=A)
            while not seen.exists():
                await anyio.sleep(0.05)
    slirp_pid, sandbox_pid = (int(word) for word in seen.read_text().split())
    assert _gone(slirp_pid) and _gone(sandbox_pid), seen.read_text()
