"""An agent filling the disk its workspace and the store share (a small tmpfs in the test).

On the code before issue 40 the store on that filesystem could not take another message
("database or disk is full") until someone deleted the file by hand. Now the writing turn is
stopped and its thread told, the store's reserve gives it room, another thread's messages are
stored and answered, the full thread takes no new turn (its messages wait, none is lost) until
space is free, and then it carries on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bridge.core.disk import RESERVE_NAME
from bridge.core.events import ThreadRef
from tests.agy.sandboxed import sandboxed_bridge
from tests.core.harness import thread

pytestmark = pytest.mark.anyio

A = thread("a")
B = ThreadRef(platform="test", channel="elsewhere", thread="b")


@contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem for the test: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_a_thread_filling_the_disk_is_stopped_and_the_others_carry_on(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "ws-b"
    elsewhere.mkdir()
    with small_filesystem(tmp_path / "small", "300m") as small:
        agy = {"min_free_bytes": "32MiB"}
        workspaces = [{"channel": "elsewhere", "path": str(elsewhere)}]
        async with sandboxed_bridge(small, agy=agy, workspaces=workspaces) as box:
            h = box.h
            assert (box.data_dir / RESERVE_NAME).is_file()  # made at start
            # Legitimate work first: a build writes a few files.
            built = await box.run(A, "head -c 20M /dev/urandom > build.o && echo built")
            assert "built" in built
            # The attack: 4 GiB into the workspace, then on with the turn.
            await h.say("[[tool run_command head -c 4G /dev/zero > big; sleep 20]]", where=A)
            [*_, stopped] = await h.adapter.wait_finished(2, A)
            assert stopped.outcome is not None and stopped.outcome.interrupted, stopped.outcome
            notes = " ".join(stopped.outcome.notes)
            assert "This turn was stopped: the disk of this thread's workspace" in notes, notes
            assert not (box.data_dir / RESERVE_NAME).exists()  # given to the store
            # Another thread: its messages are stored and answered.
            await box.turn(B, "hello from b")
            await box.turn(B, "and again")
            # The full thread takes no new turn; its message waits (told once).
            await h.say("please carry on", where=A)
            await h.adapter.wait_notice("No turn starts: the disk of this thread's workspace")
            assert [m.text for m in await h.bridge.store.pending(A.key)] == ["please carry on"]
            # Space is freed; the next message runs, with the one that waited.
            (box.workdir(A) / "big").unlink()
            await h.say("space is back", where=A)
            [*_, answered] = await h.adapter.wait_finished(3, A)
            assert answered.outcome is not None and answered.outcome.error is None
            assert "please carry on" in answered.outcome.final_text, answered.outcome
            assert "space is back" in answered.outcome.final_text
