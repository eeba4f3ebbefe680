"""Disk space: one thread that fills a filesystem must not stop the others or cost a message.

Three parts:

- a **reserve**: a file of ``RESERVE_BYTES`` in the data directory, made at start. When the
  data directory's filesystem falls below the free-space floor it is deleted, so the store has
  room to record messages, turns and approvals while an agent fills the disk; it is made again
  once space is back;
- a **watch** beside each running turn: every ``CHECK_SECONDS`` the free space of the thread's
  workspace (``statvfs``), and every ``SIZE_CHECK_SECONDS`` the workspace's size when
  ``[agy] max_workspace_bytes`` is set. A turn whose workspace is past its size, or that is
  writing (its workspace grew) while its filesystem is below ``[agy] min_free_bytes``, is
  stopped, and its thread is told why (its growth is measured from the turn's start);
- a **gate** before each turn: while the workspace's filesystem is below the floor (or the
  workspace past its size) no turn starts there; the messages wait in the inbox, and the
  thread is told once.

Sizes are measured by walking the workspace (``st_blocks``, links not followed, other
filesystems not entered), off the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio

from bridge.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

RESERVE_NAME = ".disk-reserve"
RESERVE_BYTES = 64 << 20
CHECK_SECONDS = 1.0
RESERVE_CHECK_SECONDS = 5.0
SIZE_CHECK_SECONDS = 10.0
# A workspace that grew by less than this between two checks is not "the one writing".
_GROWTH_BYTES = 1 << 20


def size_words(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Filesystem:
    device: int
    free: int
    total: int


def filesystem(path: Path) -> Filesystem | None:
    """The filesystem ``path`` (or its nearest existing parent) is on."""
    path = path.resolve()
    for candidate in (path, *path.parents):
        try:
            info = os.statvfs(candidate)
            device = candidate.stat().st_dev
        except OSError:
            continue
        return Filesystem(device, info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize)
    return None


def describe(found: Filesystem) -> str:
    return f"{size_words(found.free)} free of {size_words(found.total)}"


def tree_bytes(root: Path) -> int:
    """Bytes ``root`` takes on disk (blocks), without following links or leaving its filesystem.
    Blocking."""
    try:
        device = root.lstat().st_dev
    except OSError:
        return 0
    total, todo = 0, [str(root)]
    while todo:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode) and info.st_dev == device:
                todo.append(entry.path)
    return total


@dataclass
class DiskSpace:
    """The bridge's disk rules: the floor, the workspace cap, the store's reserve."""

    data_dir: Path
    min_free: int
    max_workspace: int | None = None
    reserve_bytes: int = RESERVE_BYTES
    # Threads told that no turn starts (told once until space is back).
    _told: set[str] = field(default_factory=set)

    @property
    def reserve(self) -> Path:
        return self.data_dir / RESERVE_NAME

    def keep_reserve(self) -> None:
        """Make the reserve when there is room for it above the floor; drop it below. Blocking
        (one statvfs, at most one allocation)."""
        found = filesystem(self.data_dir)
        if found is None:
            return
        exists = self.reserve.exists()
        if found.free < self.min_free:
            if exists:
                with contextlib.suppress(OSError):
                    self.reserve.unlink()
                    log.warning(
                        "the data directory's filesystem has %s free, under the floor of %s: "
                        "the store's reserve is released",
                        size_words(found.free),
                        size_words(self.min_free),
                    )
            return
        if not exists and found.free > self.min_free + self.reserve_bytes:
            _allocate(self.reserve, self.reserve_bytes)

    def _low(self, found: Filesystem | None) -> bool:
        """Below the floor. While the store's reserve is given out, its room counts as taken:
        the space it freed is the store's, not the next turn's."""
        if found is None:
            return False
        floor = self.min_free
        store = filesystem(self.data_dir)
        if store is not None and store.device == found.device and not self.reserve.exists():
            floor += self.reserve_bytes
        return found.free < floor

    async def keep_reserve_forever(self) -> None:
        """``keep_reserve`` every ``RESERVE_CHECK_SECONDS``, until cancelled: a process left
        running between turns can fill the disk too."""
        while True:
            await anyio.sleep(RESERVE_CHECK_SECONDS)
            await anyio.to_thread.run_sync(self.keep_reserve)

    def problem(self, workdir: Path, size: int | None = None) -> str | None:
        """Why no turn may run in ``workdir`` now, in words for the thread (None: it may)."""
        found = filesystem(workdir)
        if found is not None and self._low(found):
            return (
                f"the disk of this thread's workspace is nearly full ({size_words(found.free)} "
                f"free, under the bridge's floor of {size_words(self.min_free)}): free some "
                "space (delete build output or large files), then write again"
            )
        if self.max_workspace is not None and size is not None and size > self.max_workspace:
            return (
                f"this thread's workspace takes {size_words(size)}, more than the "
                f"{size_words(self.max_workspace)} it may use: delete some files, then write again"
            )
        return None

    def _over(self, size: int) -> bool:
        return self.max_workspace is not None and size > self.max_workspace

    async def may_start(self, key: str, workdir: Path) -> str | None:
        """Before a turn: None when it may run; else the words to tell the thread, the first
        time only ("" after that)."""
        size = None
        if self.max_workspace is not None:
            size = await anyio.to_thread.run_sync(tree_bytes, workdir)
        await anyio.to_thread.run_sync(self.keep_reserve)
        reason = await anyio.to_thread.run_sync(self.problem, workdir, size)
        if reason is None:
            self._told.discard(key)
            return None
        if key in self._told:
            return ""
        self._told.add(key)
        return f"No turn starts: {reason}. Your messages wait and run once there is room."

    async def watch(self, workdir: Path, began: int, stop: Callable[[str], None]) -> None:
        """Beside a running turn, until cancelled: ``stop(reason)`` once, when this turn's
        workspace is past its size or has grown (from ``began`` bytes, its size before the
        turn was sent) while its filesystem is below the floor."""
        last = began
        since_size = 0.0
        while True:
            await anyio.sleep(CHECK_SECONDS)
            since_size += CHECK_SECONDS
            await anyio.to_thread.run_sync(self.keep_reserve)
            found = await anyio.to_thread.run_sync(filesystem, workdir)
            low = await anyio.to_thread.run_sync(self._low, found)
            if not low and (self.max_workspace is None or since_size < SIZE_CHECK_SECONDS):
                continue
            since_size = 0.0
            size = await anyio.to_thread.run_sync(tree_bytes, workdir)
            grew, last = max(size - last, size - began), size
            if low and grew < _GROWTH_BYTES and not self._over(size):
                continue  # not this turn that is writing
            reason = self.problem(workdir, size)
            if reason is not None:
                stop(f"This turn was stopped: {reason}.")
                return


def _allocate(path: Path, size: int) -> None:
    """A file of ``size`` bytes really on disk (fallocate where it works, else written)."""
    temporary = path.with_name(path.name + ".new")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        log.warning("cannot make the store's disk reserve %s: %s", path, exc)
        return
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            chunk = b"\0" * (1 << 20)
            for _ in range(size // len(chunk)):
                os.write(fd, chunk)
        os.fsync(fd)
    except OSError as exc:
        log.warning("cannot make the store's disk reserve %s: %s", path, exc)
        os.close(fd)
        with contextlib.suppress(OSError):
            temporary.unlink()
        return
    os.close(fd)
    os.replace(temporary, path)


async def status_line(space: DiskSpace, workdir: Path) -> str:
    """One line for ``!status``: what the thread's workspace takes, what is left on its disk."""
    size = await anyio.to_thread.run_sync(tree_bytes, workdir)
    found = await anyio.to_thread.run_sync(filesystem, workdir)
    cap = f" of {size_words(space.max_workspace)} allowed" if space.max_workspace else ""
    line = f"• 💾 Disk: the workspace takes {size_words(size)}{cap}"
    if found is not None:
        line += f"; {describe(found)} on its filesystem"
    reason = await anyio.to_thread.run_sync(space.problem, workdir, size)
    if reason is not None:
        line += f" ⚠️ no turn starts: {reason}"
    return line


async def workspace_bytes(space: DiskSpace | None, workdir: Path | None) -> int:
    """A workspace's size before a turn (0 when no disk rules apply)."""
    if space is None or workdir is None:
        return 0
    return await anyio.to_thread.run_sync(tree_bytes, workdir)


async def watched(
    space: DiskSpace | None,
    workdir: Path | None,
    began: int,
    follow: Coroutine[Any, Any, T],
    stop: Callable[[str], None],
) -> T:
    """``follow`` (a turn) awaited with its workspace watched beside it (see ``watch``)."""
    if space is None or workdir is None:
        return await follow
    async with anyio.create_task_group() as tg:
        tg.start_soon(space.watch, workdir, began, stop)
        result = await follow
        tg.cancel_scope.cancel()
    return result


def disk_space(config: Config) -> DiskSpace:
    limit = config.agy.max_workspace_bytes
    return DiskSpace(
        data_dir=config.bridge.data_dir.resolve(),
        min_free=int(config.agy.min_free_bytes),
        max_workspace=int(limit) if limit is not None else None,
    )
