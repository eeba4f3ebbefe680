"""The bridge's own file I/O on folders an agent can write: never through a link, never blocking.

An agent can replace any name in its workspace or session directory between two calls of the
bridge: a folder by a symlink to elsewhere, a file by a symlink to the config, a file by a FIFO
that blocks whoever opens it. So the bridge never opens such a path by name in one go:

- a directory is opened component by component below a trusted root (a folder the bridge made
  or the operator named), each with ``O_NOFOLLOW | O_DIRECTORY``, so no link is followed
  anywhere on the way;
- a new file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to that directory's
  descriptor: it cannot be an existing file, a link or a FIFO;
- a file to read is opened once the same way with ``O_NONBLOCK`` (a FIFO does not block the
  open), checked on its descriptor (``fstat``: a regular file, under a size cap) and read from
  that descriptor, so what was checked is what is read.

Every function here is synchronous and quick on a regular file; callers on the event loop run
them in a worker thread (``anyio.to_thread``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path the bridge will not use: a link, not a regular file, too big, outside its root."""


def parts_below(root: Path, path: Path) -> tuple[str, ...]:
    """The components of ``path`` below ``root``, lexically (``..`` is refused, not resolved)."""
    try:
        relative = PurePath(path).relative_to(root)
    except ValueError:
        raise UnsafePath(errno.EXDEV, f"{path} is not inside {root}") from None
    parts = tuple(part for part in relative.parts if part not in ("", "."))
    if ".." in parts:
        raise UnsafePath(errno.EXDEV, f"{path} leaves {root}")
    return parts


def open_dir(root: Path, parts: Sequence[str] = (), *, create: bool = False) -> int:
    """A descriptor of ``root/parts…``; no component below ``root`` may be a link.

    ``root`` itself is trusted (the bridge made it or the operator named it) and opened as it
    is. With ``create``, missing components are made (mode 0700).
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if "/" in part or part in ("", ".", ".."):
                raise UnsafePath(errno.EINVAL, f"not a plain folder name: {part!r}")
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(exc.errno, f"{part} is a link or not a folder") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def opened_dir(root: Path, parts: Sequence[str] = (), *, create: bool = False) -> Iterator[int]:
    fd = open_dir(root, parts, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def ensure_real_dir(parent: Path, name: str) -> Path:
    """``parent/name`` as a real folder: a link or file an agent put there is removed first.

    For folders a sandbox binds (a bind follows links, so a link there would show its target).
    """
    with opened_dir(parent) as fd:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=fd)
            info = None
        if info is None:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=fd)
        os.close(os.open(name, _DIR_FLAGS, dir_fd=fd))  # still a folder, not a link
    return parent / name


def create_file(dir_fd: int, name: str, mode: int = 0o600) -> int:
    """A new file ``name`` in the folder ``dir_fd``, opened for writing; never an existing one."""
    if "/" in name or name in ("", ".", ".."):
        raise UnsafePath(errno.EINVAL, f"not a plain file name: {name!r}")
    return os.open(name, _CREATE_FLAGS, mode, dir_fd=dir_fd)


def open_regular(dir_fd: int, name: str, max_bytes: int) -> tuple[int, int]:
    """``name`` in ``dir_fd`` opened for reading, checked: (descriptor, size).

    Refuses a link, anything but a regular file (a FIFO, a device: opened without blocking,
    then refused) and a file over ``max_bytes``.
    """
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(exc.errno, f"{name} is a symbolic link") from None
        raise
    try:
        size = _checked_size(fd, name, max_bytes)
        # Back to blocking reads: a regular file never blocks, and short reads stay simple.
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, size


def _checked_size(fd: int, name: object, max_bytes: int) -> int:
    """The size of the open ``fd``: a regular file of at most ``max_bytes``, or UnsafePath."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePath(errno.EINVAL, f"{name} is not a regular file")
    if info.st_size > max_bytes:
        raise UnsafePath(errno.EFBIG, f"{name} is {info.st_size:,} bytes, over {max_bytes:,}")
    return info.st_size


def read_fd(fd: int, max_bytes: int) -> bytes:
    """At most ``max_bytes`` from ``fd`` (more than that is an error: the file grew)."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise UnsafePath(errno.EFBIG, f"the file grew over {max_bytes:,} bytes")
    return b"".join(chunks)


def read_below(root: Path, path: Path, max_bytes: int) -> bytes:
    """The whole of ``path`` (inside ``root``), opened without following any link."""
    *folders, name = parts_below(root, path) or ("",)
    with opened_dir(root, folders) as dir_fd:
        fd, _ = open_regular(dir_fd, name, max_bytes)
        try:
            return read_fd(fd, max_bytes)
        finally:
            os.close(fd)


def read_small(path: Path, max_bytes: int = 64 * 1024) -> bytes:
    """A small file an agent may have made (a ``.git`` file), without blocking on it.

    The last component must not be a link; a FIFO or device is refused without waiting.
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        _checked_size(fd, path, max_bytes)
        return os.read(fd, max_bytes + 1)[:max_bytes]
    finally:
        os.close(fd)
