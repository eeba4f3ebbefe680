"""One agy at a time on a thread's private state: the lock agy is started holding.

A takeover starts agy on another instance while the lost instance's agy (its sandbox) may still
run. agy inherits the lock on the thread's state, so the lock lasts as long as the sandbox,
whatever became of the bridge that started it; a second start waits for it, and gives up with a
clear error at its init deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.agy.private_state import StateBusy, StateLayout, lock_paths, try_lock
from bridge.agy.process import AgyStartError, ProcessSpec, open_agy
from bridge.agy.sandbox import NAMESPACE_ARGS, find_bwrap
from tests.agy.sandboxed import require_bwrap

pytestmark = pytest.mark.anyio


def test_the_lock_lives_beside_the_private_state_never_inside_it(tmp_path: Path) -> None:
    layout = StateLayout(shared=(tmp_path / "gemini",))
    session = tmp_path / "data" / "sessions" / "slack-abc"
    [lock] = lock_paths(layout, session)
    private = layout.private_dir(tmp_path / "gemini", session)
    assert lock.parent == private.parent and lock.name == "slack-abc.lock"
    rooted = StateLayout(shared=(tmp_path / "gemini",), root=tmp_path / "root")
    [lock] = lock_paths(rooted, session)
    assert lock.parent == tmp_path / "root" / "slack-abc"
    assert not lock.is_relative_to(rooted.private_dir(tmp_path / "gemini", session))


def test_a_sandbox_keeps_the_lock_after_the_bridge_let_go(tmp_path: Path) -> None:
    """The bridge's copy closed (as when it is killed): the sandbox still holds it."""
    require_bwrap()
    bwrap = find_bwrap()
    assert bwrap is not None
    paths = [tmp_path / "threads" / "t.lock"]
    held = try_lock(paths)
    ready = tmp_path / "ready"
    binds = ["--ro-bind", "/", "/", "--bind", str(tmp_path), str(tmp_path)]
    sandbox = subprocess.Popen(
        [bwrap, *NAMESPACE_ARGS, *binds, "--", "sh", "-c", f"touch {ready}; exec sleep 60"],
        pass_fds=held,
        start_new_session=True,
    )
    try:
        for fd in held:
            os.close(fd)
        with pytest.raises(StateBusy):
            try_lock(paths)
        # Running (as agy is by the time its bridge can be lost): killed while bubblewrap
        # still sets up, its child would not yet be bound to die with it.
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert time.monotonic() < deadline, "the sandbox did not start"
            time.sleep(0.02)
    finally:
        sandbox.kill()
        sandbox.wait()
    # Gone with the sandbox: the kernel ends its processes (--die-with-parent) just after.
    deadline = time.monotonic() + 10
    while True:
        try:
            held = try_lock(paths)
            break
        except StateBusy:
            assert time.monotonic() < deadline, "the sandbox's processes kept the lock"
            time.sleep(0.05)
    for fd in held:
        os.close(fd)


async def test_a_start_waits_for_the_earlier_agy_and_then_gives_up_clearly(
    tmp_path: Path,
) -> None:
    paths = [tmp_path / "threads" / "t.lock"]
    spec = ProcessSpec(
        argv=[sys.executable, "-c", "print('never reached')"],
        env=dict(os.environ),
        cwd=tmp_path,
        init_timeout=0.5,
        locks=tuple(paths),
    )
    held = try_lock(paths)  # an earlier agy of the thread
    try:
        with pytest.raises(AgyStartError) as caught:
            async with open_agy(spec, lambda line: None):
                pass
    finally:
        for fd in held:
            os.close(fd)
    assert caught.value.kind == "busy"
    assert "still uses its conversation" in caught.value.message
    # It let go of what it held meanwhile: the lock is free now.
    for fd in try_lock(paths):
        os.close(fd)
