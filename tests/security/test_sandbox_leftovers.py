"""A sandbox that outlived the bridge that started it must not outlive the bridge for good.

A bridge SIGKILLed while bubblewrap still sets a sandbox up can leave bubblewrap's child behind
(it is bound to die with its parent only once set up), holding what it inherited: the thread's
state lock above all. The instance that takes the thread over then waited for that lock until
its init deadline, and the message failed; the lock stayed held forever.

The attack here: sandboxes started the way the bridge starts them, in cgroups named as a bridge's
under this bridge's own cgroup. One as a dead bridge's (a PID no process has), holding a thread's
lock; one as a live bridge's, holding another thread's. On the code before the sweep, the first
thread's message failed at the init deadline ("still uses its conversation").
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import pytest

from bridge.agy import network
from bridge.agy.limits import PREFIX, Confinement, Enforcement, Limits, enforcement, owner_tag
from bridge.agy.private_state import StateBusy, lock_paths, try_lock
from bridge.agy.sandbox import NAMESPACE_ARGS, find_bwrap, state_layout
from tests.agy.sandboxed import Sandboxed, sandboxed_bridge
from tests.core.harness import thread
from tests.security.test_sandbox_limits import require_cgroups

pytestmark = pytest.mark.anyio

A, B = thread("a"), thread("b")


def _namespace() -> int:
    """This process's PID namespace (where the PIDs it sees mean what they say)."""
    return os.stat("/proc/self/ns/pid").st_ino


def _dead_pid() -> int:
    """A PID no process has now (a process that ran and was waited for)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@contextmanager
def _another_bridge() -> Iterator[int]:
    """A live process other than this one (a bridge's PID that is not this test's)."""
    process = subprocess.Popen(["sleep", "987"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


@contextmanager
def _confined(
    enforced: Enforcement,
    owner: str,
    argv: list[str],
    pass_fds: Sequence[int] = (),
    *,
    named: bool = True,
) -> Iterator[tuple[subprocess.Popen[bytes], tuple[Path, ...], Callable[[], None]]]:
    """``argv`` started in a cgroup the way the bridge starts agy (joined before it runs),
    named as the bridge ``owner``'s. Made under this process's own name (no sweep touches a
    live bridge's) and renamed once the process is inside: another test worker's bridge would
    sweep a dead bridge's empty cgroup away before the process joined it. With ``named``
    False the caller renames it (the function yielded third), once the process is ready: a
    dead bridge's cgroup is any starting bridge's to sweep, and the suite starts hundreds."""
    run = secrets.token_hex(4)
    made = tuple(parent / f"{owner_tag(os.getpid())}.{run}.1" for parent in enforced.parents)
    dirs = tuple(folder.with_name(f"{owner}.{run}.1") for folder in made)
    for folder in made:
        folder.mkdir()
    process = subprocess.Popen(
        Confinement(enforced.limits, enforced.mechanism, made).wrap(argv),
        pass_fds=pass_fds,
        start_new_session=True,
    )

    def name() -> None:
        for folder, renamed in zip(made, dirs, strict=True):
            folder.rename(renamed)

    try:
        while not all(process.pid in _procs(folder) for folder in made):
            assert process.poll() is None, "the process could not join its cgroup"
            time.sleep(0.01)
        if named:
            name()
        yield process, dirs, name
    finally:
        process.kill()
        process.wait()
        for folders in (made, dirs):
            Confinement(enforced.limits, enforced.mechanism, folders).close()


@contextmanager
def _sandbox(
    enforced: Enforcement, owner: str, locks: list[Path], tmp: Path
) -> Iterator[tuple[subprocess.Popen[bytes], tuple[Path, ...], Callable[[], None]]]:
    """A bubblewrap sandbox holding ``locks`` (as agy inherits them), in a cgroup to be named
    as the bridge ``owner``'s (the function yielded third)."""
    bwrap = find_bwrap()
    assert bwrap is not None
    ready = tmp / f"ready-{secrets.token_hex(4)}"
    binds = ["--ro-bind", "/", "/", "--bind", str(tmp), str(tmp)]
    argv = [bwrap, *NAMESPACE_ARGS, *binds, "--", "sh", "-c", f"touch {ready}; exec sleep 987"]
    held = try_lock(locks)
    try:
        with _confined(enforced, owner, argv, held, named=False) as started:
            for fd in held:
                os.close(fd)
            held = []
            yield started
    finally:
        for fd in held:
            os.close(fd)


async def _started(sandboxes: list[subprocess.Popen[bytes]], tmp: Path) -> None:
    """Until each sandbox runs its command (set up: bound to die with bubblewrap)."""
    with anyio.fail_after(30):
        while len(list(tmp.glob("ready-*"))) < len(sandboxes):
            assert all(s.poll() is None for s in sandboxes), "a sandbox did not start"
            await anyio.sleep(0.02)


async def test_a_dead_bridges_sandbox_is_ended_and_frees_the_lock_a_live_bridges_is_left(
    tmp_path: Path,
) -> None:
    require_cgroups()
    async with sandboxed_bridge(tmp_path) as box:
        runtime = box.h.bridge.runtime
        assert runtime.isolation.sandbox is not None
        enforced = runtime.limits
        layout = state_layout(runtime.isolation.sandbox)
        lock_a = lock_paths(layout, box.session_dir(A).resolve())
        lock_b = lock_paths(layout, box.session_dir(B).resolve())
        dead_owner = f"{PREFIX}{_dead_pid()}.1.{_namespace()}"  # PID, start, PID namespace
        with _another_bridge() as other:
            with (
                _sandbox(enforced, dead_owner, lock_a, tmp_path) as (stuck, stuck_dirs, name),
                _sandbox(enforced, owner_tag(other), lock_b, tmp_path) as (live, live_dirs, named),
            ):
                await _started([stuck, live], tmp_path)
                # Named as their bridges' only now that both run: until here another worker's
                # bridge, sweeping as it starts, could end the dead one's before it held A's lock.
                name()
                named()
                # The dead bridge's sandbox holds thread A's lock: the turn gets it anyway
                # (waited for past the init deadline, to see how the turn ends either way).
                adapter = box.h.adapter
                await box.h.say("hello after the crash", where=A)
                await adapter.changes.until(
                    lambda: adapter.finished(A) or _notices(box, A.key), timeout=60
                )
                assert _notices(box, A.key) == []
                [reply] = adapter.finished(A)
                assert reply.outcome is not None and reply.outcome.error is None, reply.outcome
                # Killed, not ended by itself: SIGKILL for bubblewrap, or, where the kill
                # reached its sandbox's process first, bubblewrap's own report of that (128 + 9).
                assert stuck.wait() in (-signal.SIGKILL, 128 + signal.SIGKILL)
                assert not any(folder.exists() for folder in stuck_dirs)
                # The live bridge's sandbox is left as it was, still holding B's lock.
                assert live.poll() is None
                assert all(folder.exists() for folder in live_dirs)
                assert _procs(live_dirs[0]) != []
                with pytest.raises(StateBusy):
                    try_lock(lock_b)


async def test_a_sandbox_is_in_its_cgroup_before_its_network_is_set_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the sandbox has a network of its own, bubblewrap waits for it to be set up; a
    bridge killed meanwhile must leave the sandbox where a sweep finds it. On the code before,
    bubblewrap and its child were moved into their cgroup only once that set-up was done."""
    require_cgroups()
    seen: list[str] = []
    real = network._child_pid

    async def child_pid(info_r: int) -> int:  # bubblewrap has said its child's PID: set-up begins
        pid = await real(info_r)
        seen.append(Path(f"/proc/{pid}/cgroup").read_text())
        return pid

    monkeypatch.setattr(network, "_child_pid", child_pid)
    async with sandboxed_bridge(tmp_path) as box:
        assert box.h.bridge.runtime.isolation.network.private
        seen.clear()  # the start's probe of the network (a sandbox of no thread's)
        await box.turn(A, "hello")
    assert seen and all(PREFIX in cgroups for cgroups in seen), seen


def test_a_sweep_tells_a_dead_bridge_from_a_live_one_and_from_a_reused_pid() -> None:
    """Each cgroup holds a process. Swept: a dead bridge's, and one named for a PID now given
    to another process (a later start time). Left: a live bridge's; a live PID's cgroup named
    the older way, without start time and PID namespace; and, since nothing tells whether
    their bridge runs, a dead PID's named that way, and one of another PID namespace."""
    require_cgroups()
    enforced = enforcement(Limits(max_processes=64, max_memory=256 << 20))
    with _another_bridge() as other, ExitStack() as stack:
        dead, here = _dead_pid(), _namespace()
        owners = {
            "dead": f"{PREFIX}{dead}.1.{here}",
            "reused": f"{PREFIX}{other}.1.{here}",  # its PID, someone else's start time
            "live": owner_tag(other),
            "older": f"{PREFIX}{other}",
            "older, dead": f"{PREFIX}{dead}",
            "elsewhere": f"{PREFIX}{dead}.1.{here + 1}",
        }
        started = {
            key: stack.enter_context(_confined(enforced, owner, ["sleep", "987"]))
            for key, owner in owners.items()
        }
        enforced.sweep()
        ended = {key for key, (process, _, _) in started.items() if process.poll() is not None}
        assert ended == {"dead", "reused"}
        gone = {key for key, (_, dirs, _) in started.items() if not any(d.exists() for d in dirs)}
        assert gone == {"dead", "reused"}


def _notices(box: Sandboxed, key: str) -> list[str]:
    return [text for where, text in box.h.adapter.notices if where == key]


def _procs(folder: Path) -> list[int]:
    return [int(word) for word in (folder / "cgroup.procs").read_text().split()]
