"""Threads that cannot see each other, through the bridge and the simulator's ``run_command``.

Each test runs a real bridge with ``isolation = "bwrap"``; the agent's commands run inside the
sandbox of its thread, and their output is read back from the thread's own workspace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from bridge.agy.launch import RUN_MARKER_ENV
from bridge.agy.plugin import PLUGIN_NAME
from bridge.agy.process import group_members, pid_state
from bridge.core.workspaces import thread_slug
from tests.agy.sandboxed import require_bwrap, sandboxed_bridge, write_config
from tests.core.harness import running, thread
from tests.doubles import one_commit_repository

pytestmark = pytest.mark.anyio

A, B = thread("a"), thread("b")


async def test_a_thread_cannot_read_the_store_another_threads_token_or_the_config(
    tmp_path: Path,
) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        await box.turn(B, "hello from b")
        data = box.data_dir
        hooks = box.session_dir(B) / ".agents" / "plugins" / PLUGIN_NAME / "hooks.json"
        # Everything the agent must not read is there, seen from outside.
        assert (data / "bridge.sqlite3").is_file() and hooks.is_file()
        assert box.config_path.is_file()

        store = await box.run(A, f"cat {data / 'bridge.sqlite3'}")
        token = await box.run(A, f"cat {hooks}")
        config = await box.run(A, f"cat {box.config_path}")
        config_dir = await box.run(A, f"ls -a {box.config_path.parent}")
        listing = await box.run(A, f"ls -aR {data}")

    for output in (store, token, config):
        assert "No such file or directory" in output and "rc=1" in output, output
    assert "config.toml" not in config_dir and "xoxb-" not in config
    b_slug, a_slug = thread_slug(B), thread_slug(A)
    assert b_slug not in listing, listing
    assert "bridge.sqlite3" not in listing
    assert a_slug in listing  # its own directories are there, nothing else


async def test_the_agent_writes_in_its_own_workspace(tmp_path: Path) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        output = await box.run(A, "echo made inside > made.txt && cat made.txt")
        assert "made inside" in output and output.endswith("rc=0\n")
        assert (box.workdir(A) / "made.txt").read_text() == "made inside\n"
        # The private /tmp is not the host's.
        marker = tmp_path / "host-tmp-marker"
        marker.write_text("host")
        seen = await box.run(A, f"cat {marker}")
        assert "No such file" in seen


def _processes(command: bytes, marker: str) -> list[int]:
    """Host PIDs of processes running ``command`` that carry this bridge's run marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if cmdline == command and f"{RUN_MARKER_ENV}={marker}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


async def _appears(command: bytes, marker: str) -> list[int]:
    with anyio.fail_after(20):
        while not (pids := _processes(command, marker)):
            await anyio.sleep(0.02)
    return pids


HIDDEN_SLEEP = "[[tool run_command setsid sleep 1000 > /dev/null 2>&1 &]] [[calls 2]] [[wait go]]"
SLEEP = b"sleep\x001000\x00"


async def test_a_background_process_of_the_agent_ends_with_its_agy_on_stop(
    tmp_path: Path,
) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        await box.h.say(HIDDEN_SLEEP, where=A)
        marker = box.h.bridge.runtime.run_marker
        [pid] = await _appears(SLEEP, marker)
        await box.h.say("!stop", where=A, who="bob")
        stopped_at = anyio.current_time()
        [stopped] = await box.h.adapter.wait_finished(1, A)
        # SIGINT reached agy inside the sandbox: an interrupt, not a crash of the sandbox.
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert stopped.outcome.error is None
        assert "Stopped by Bob" in " ".join(stopped.outcome.notes)  # agy's own answer came
        with anyio.fail_after(10):
            while _processes(SLEEP, marker):
                await anyio.sleep(0.01)
        print(f"sleep {pid} gone {anyio.current_time() - stopped_at:.3f} s after !stop")
        # The conversation goes on after the stop.
        await box.turn(A, "carry on")


async def test_without_the_sandbox_a_background_process_survives_the_stop(
    tmp_path: Path,
) -> None:
    """What the sandbox fixes: a ``setsid`` child leaves agy's process group and outlives it.

    No caps per thread here (no cgroup): a thread's cgroup is emptied when its agy ends, which
    would end this sleep too, a few milliseconds after the group (the next test). With the
    cgroup on, this test once raced that and, under load, lost."""
    no_cgroup = {"max_processes_per_thread": 0, "max_memory_per_thread": 0}
    async with running(tmp_path, isolation="none", **no_cgroup) as h:
        assert h.bridge.runtime.limits.mechanism == "off"
        await h.say(HIDDEN_SLEEP, where=A)
        marker = h.bridge.runtime.run_marker
        [pid] = await _appears(SLEEP, marker)
        try:
            proc = h.bridge.core.threads[A.key].proc
            assert proc is not None
            await h.say("!stop", where=A, who="bob")
            await h.adapter.wait_finished(1, A)
            with anyio.fail_after(20):  # agy and its whole process group are gone
                while any(pid_state(p) not in (None, "Z") for p in group_members(proc.pid)):
                    await anyio.sleep(0.02)
            assert _processes(SLEEP, marker) == [pid]
        finally:
            os.kill(pid, signal.SIGKILL)


async def test_without_the_sandbox_the_threads_cgroup_ends_a_background_process_after_agy(
    tmp_path: Path,
) -> None:
    """The same ``setsid`` child, with the caps per thread on: it leaves agy's process group,
    but not agy's cgroup, which is emptied once agy has ended."""
    async with running(tmp_path, isolation="none") as h:
        if h.bridge.runtime.limits.mechanism not in ("cgroup1", "cgroup2"):
            pytest.skip(f"no cgroup on this host ({h.bridge.runtime.limits.mechanism})")
        await h.say(HIDDEN_SLEEP, where=A)
        marker = h.bridge.runtime.run_marker
        [pid] = await _appears(SLEEP, marker)
        try:
            await h.say("!stop", where=A, who="bob")
            await h.adapter.wait_finished(1, A)
            with anyio.fail_after(20):
                while _processes(SLEEP, marker):
                    await anyio.sleep(0.02)
        finally:
            if _processes(SLEEP, marker):
                os.kill(pid, signal.SIGKILL)


async def test_an_mcp_call_and_the_hook_reach_the_listener_from_inside(tmp_path: Path) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        h = box.h
        mcp = '[[mcp bridge_chat post_message {"text": "posted from the sandbox"}]]'
        await h.say(f"work {mcp} [[calls 2]] [[touch started]] [[wait go]]", where=A)
        workdir = box.workdir(A)
        with anyio.fail_after(20):
            while not (workdir / "started").exists():
                await anyio.sleep(0.02)
        await h.say("late news: use the staging db", where=A)
        with anyio.fail_after(20):
            while not await h.bridge.store.pending(A.key):
                await anyio.sleep(0.02)
        (workdir / "go").touch()
        [reply] = await h.adapter.wait_finished(1, A)
        assert reply.outcome is not None and reply.outcome.error is None
        # The PreInvocation hook (curl inside the sandbox) fetched the late message.
        assert "Injected:" in reply.outcome.final_text
        assert "use the staging db" in reply.outcome.final_text
        await h.adapter.wait_notice("posted from the sandbox")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


async def test_a_worktree_thread_can_commit(tmp_path: Path) -> None:
    repo = one_commit_repository(tmp_path / "repo")
    workspaces = [{"channel": "room", "path": str(repo), "worktree": True}]
    async with sandboxed_bridge(tmp_path, workspaces=workspaces) as box:
        output = await box.run(
            A, "echo change > f.txt && git add f.txt && git commit -qm 'from the sandbox'"
        )
        assert output.endswith("rc=0\n"), output
        # The repository's git directory is there for git; its checkout is not.
        main_checkout = await box.run(A, f"cat {repo / 'README.md'}")
        assert "No such file" in main_checkout
    branch = f"agy/{thread_slug(A)}"
    assert "from the sandbox" in _git(repo, "log", "--format=%s", branch)


async def test_a_workspace_sees_its_operator_listed_paths_and_only_it_does(
    tmp_path: Path,
) -> None:
    shared, cache = tmp_path / "shared", tmp_path / "cache"
    shared.mkdir()
    cache.mkdir()
    (shared / "docs.txt").write_text("shared docs\n")
    work = tmp_path / "ws"
    work.mkdir()
    workspaces = [
        {
            "channel": "room",
            "path": str(work),
            "read_only": [str(shared)],
            "read_write": [str(cache)],
        }
    ]
    other = thread("o").model_copy(update={"channel": "elsewhere"})
    async with sandboxed_bridge(tmp_path, workspaces=workspaces) as box:
        read = await box.run(A, f"cat {shared / 'docs.txt'}")
        write_ro = await box.run(A, f"touch {shared / 'nope'}")
        write_rw = await box.run(A, f"echo cached > {cache / 'entry'}")
        elsewhere = await box.run(other, f"cat {shared / 'docs.txt'}")
    assert "shared docs" in read and read.endswith("rc=0\n")
    assert "Read-only file system" in write_ro and not (shared / "nope").exists()
    assert write_rw.endswith("rc=0\n") and (cache / "entry").read_text() == "cached\n"
    assert "No such file" in elsewhere


def _marked(command: bytes) -> list[int]:
    """Host PIDs running ``command`` that carry any bridge run's marker."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == command:
                if f"{RUN_MARKER_ENV}=".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_killed_bridge_leaves_nothing_of_the_agent_behind(tmp_path: Path) -> None:
    """SIGKILL of the bridge mid-turn: --die-with-parent ends every sandbox at once, even a
    child that left agy's process group (without the sandbox it waits for the next start)."""
    require_bwrap()
    config = write_config(tmp_path)
    sleeper = b"sleep\x001001\x00"
    before = set(_marked(sleeper))
    console = subprocess.Popen(
        [sys.executable, "-m", "bridge", "console", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert console.stdin is not None
        console.stdin.write(
            "[[tool run_command setsid sleep 1001 > /dev/null 2>&1 &]] [[calls 2]] [[wait go]]\n"
        )
        console.stdin.flush()
        deadline = time.monotonic() + 30
        while not set(_marked(sleeper)) - before:
            assert time.monotonic() < deadline, "the agent's command never started"
            time.sleep(0.02)
        console.send_signal(signal.SIGKILL)
        console.wait(timeout=10)
        deadline = time.monotonic() + 10
        while left := set(_marked(sleeper)) - before:
            assert time.monotonic() < deadline, f"left running after the bridge died: {left}"
            time.sleep(0.02)
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
