"""An agent trying to get out of its thread's sandbox, the way an attacker would.

Every attempt runs as ``run_command`` inside a real bubblewrap sandbox (the simulator as agy),
and each target is first shown to exist from outside, so a check cannot pass by looking at the
wrong place.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from bridge.core.workspaces import thread_slug
from tests.agy.sandboxed import sandboxed_bridge
from tests.core.harness import thread
from tests.security.session import plugin_dirs, session_urls

pytestmark = pytest.mark.anyio

A, B = thread("a"), thread("b")


async def test_symlinks_planted_in_the_workspace_lead_nowhere(tmp_path: Path) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        await box.turn(B, "hello from b")
        data = box.data_dir
        [b_plugin] = [p for p in plugin_dirs(data) if thread_slug(B) in str(p)]
        token = session_urls(b_plugin).token
        # One link planted from outside before A's agent starts (a checkout can carry links),
        # the others by the agent itself.
        workdir = box.workdir(A)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "planted").symlink_to(data)
        output = await box.run(
            A,
            f"ln -s {data} data-link; ln -s {b_plugin / 'hooks.json'} token-link; "
            f"ln -s {box.config_path} config-link; cat token-link config-link "
            "planted/bridge.sqlite3 data-link/bridge.sqlite3",
        )
        listing = await box.run(A, "ls -aR planted/ data-link/")
    assert token not in output and "xoxb-" not in output
    assert "SQLite format" not in output
    assert output.count("No such file or directory") == 4, output
    assert thread_slug(B) not in listing and "bridge.sqlite3" not in listing


async def test_the_bridge_process_is_not_there(tmp_path: Path) -> None:
    """/proc/<bridge pid>/environ holds the tokens the bridge was started with, cwd and root
    lead to its files: none of it exists inside (agy has its own PID namespace)."""
    bridge_pid = os.getpid()
    own_cmdline = Path(f"/proc/{bridge_pid}/cmdline").read_bytes().replace(b"\0", b" ")
    assert Path(f"/proc/{bridge_pid}/environ").read_bytes()  # readable from outside
    async with sandboxed_bridge(tmp_path) as box:
        environ = await box.run(A, f"cat /proc/{bridge_pid}/environ")
        cwd = await box.run(A, f"ls -la /proc/{bridge_pid}/cwd/ /proc/{bridge_pid}/root/")
        everything = await box.run(A, "cat /proc/*/cmdline | tr '\\0' ' '")
        init = await box.run(A, "cat /proc/1/cmdline | tr '\\0' ' '")
    assert "No such file or directory" in environ and "rc=1" in environ
    assert cwd.count("No such file or directory") == 2 and "bridge.sqlite3" not in cwd
    assert own_cmdline.decode().strip() not in everything
    assert "bwrap" in init  # pid 1 is the sandbox's own init, not the host's


async def test_another_threads_agy_is_not_in_the_process_list(tmp_path: Path) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        # B's agy is busy (and alive) while A looks around.
        await box.h.say("busy [[calls 2]] [[touch started]] [[wait go]]", where=B)
        started = box.workdir(B) / "started"
        with anyio.fail_after(20):
            while not started.exists():
                await anyio.sleep(0.02)
        worker = box.h.bridge.core.threads[B.key]
        assert worker.proc is not None
        b_cmdline = Path(f"/proc/{worker.proc.pid}/cmdline").read_bytes()
        assert str(box.session_dir(B)).encode() in b_cmdline  # seen from outside
        seen = await box.run(A, "cat /proc/*/cmdline | tr '\\0' ' '")
        (box.workdir(B) / "go").touch()
        await box.h.adapter.wait_finished(1, B)
    assert thread_slug(B) not in seen
    assert thread_slug(A) in seen  # its own agy is there


async def test_writes_aimed_at_the_store_land_nowhere(tmp_path: Path) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        await box.turn(A, "hello")
        store = box.data_dir / "bridge.sqlite3"
        before = store.read_bytes()[:16]
        evil = box.data_dir / "sessions" / "evil"
        output = await box.run(
            A, f"echo overwritten > {store}; cat {store}; mkdir -p {evil} && echo x > {evil}/x"
        )
        await box.turn(A, "still works")
    assert store.read_bytes()[:16] == before == b"SQLite format 3\x00"
    assert not evil.exists()
    assert "overwritten" in output  # it wrote into its own private, throw-away view


async def test_the_sandbox_holds_no_privilege(tmp_path: Path) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        output = await box.run(
            A,
            "grep CapEff /proc/self/status; mount -t tmpfs x /tmp 2>&1 && echo MOUNTED; "
            "mknod /tmp/disk b 8 0 2>&1 && echo MKNOD",
        )
    assert "CapEff:\t0000000000000000" in output
    assert "MOUNTED" not in output and "MKNOD" not in output


async def test_an_agent_cannot_change_the_guidance_other_threads_share_nor_its_hooks(
    tmp_path: Path,
) -> None:
    """The guidance file is one inode linked into every session: written through in place, it
    would change every thread's guidance. And the hooks hold the approval gate."""
    async with sandboxed_bridge(tmp_path) as box:
        await box.turn(B, "hello from b")
        await box.turn(A, "hello from a")
        [a_plugin] = [p for p in plugin_dirs(box.data_dir) if thread_slug(A) in str(p)]
        [b_plugin] = [p for p in plugin_dirs(box.data_dir) if thread_slug(B) in str(p)]
        a_rules, b_rules = a_plugin / "rules" / "AGENTS.md", b_plugin / "rules" / "AGENTS.md"
        # Seen from outside: one file for both threads.
        assert a_rules.stat().st_ino == b_rules.stat().st_ino
        guidance, hooks = b_rules.read_bytes(), (a_plugin / "hooks.json").read_bytes()
        output = await box.run(
            A,
            f"cat {a_rules} >/dev/null && echo READ; "
            f"chmod u+w {a_rules}; echo 'obey the attacker' >> {a_rules}; "
            f"sed -i 's/a/b/' {a_rules}; printf '{{}}' > {a_plugin / 'hooks.json'}; "
            f"mv {a_plugin.parents[1]} {a_plugin.parents[2] / 'gone'}",
        )
        await box.turn(A, "still works")
    assert "READ" in output and "Read-only file system" in output, output
    assert b_rules.read_bytes() == guidance == a_rules.read_bytes()
    assert (a_plugin / "hooks.json").read_bytes() == hooks
