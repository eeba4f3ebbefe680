"""Saving attachments for the agent: safe names, a size cap, inside the session directory.

The folder is the session's ``attachments/``, which every sandbox shows read-only: the agent
reads what teammates sent, and cannot replace the folder. It is opened without following any
link (:mod:`bridge.safe_files`), and each file is created new (``O_EXCL | O_NOFOLLOW``) under
that descriptor, so a link an agent planted (before isolation, or without it) leads nowhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import unicodedata
from pathlib import Path

import anyio

from bridge.core.events import AttachmentError, AttachmentRef, ChatAdapter
from bridge.safe_files import create_file, open_dir, parts_below

MAX_NAME = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, fallback: str = "file") -> str:
    """A file name that cannot leave its folder or hide: no separators, no leading dots."""
    name = unicodedata.normalize("NFKC", name)
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name).strip("._-")
    if not name:
        name = fallback
    if len(name) > MAX_NAME:
        stem, dot, ext = name.rpartition(".")
        if dot and 0 < len(ext) <= 10:
            name = stem[: MAX_NAME - len(ext) - 1] + "." + ext
        else:
            name = name[:MAX_NAME]
    return name


async def save_attachments(
    adapter: ChatAdapter,
    refs: list[AttachmentRef],
    folder: Path,
    prefix: str,
    max_bytes: int,
    *,
    root: Path | None = None,
) -> list[str]:
    """Save each attachment; returns its absolute path, or the reason it could not be saved.

    ``root`` is the trusted folder ``folder`` lies in (the session directory, made by the
    bridge); every component below it is opened without following links. By default the
    folder's parent.
    """
    root = folder.parent if root is None else root
    parts = parts_below(root, folder)

    def opened() -> int:
        root.mkdir(parents=True, exist_ok=True)  # the bridge's own folder
        return open_dir(root, parts, create=True)

    try:
        dir_fd = await anyio.to_thread.run_sync(opened)
    except OSError as exc:
        # A link or a file where the folder should be: nothing is written through it.
        reason = f"the attachments folder cannot be used safely ({exc.strerror or exc})"
        return [reason for _ in refs]
    try:
        return [
            await _save_one(adapter, ref, dir_fd, folder, f"{prefix}-{index}", max_bytes)
            for index, ref in enumerate(refs)
        ]
    finally:
        os.close(dir_fd)


async def _save_one(
    adapter: ChatAdapter, ref: AttachmentRef, dir_fd: int, folder: Path, stem: str, max_bytes: int
) -> str:
    name = f"{stem}-{safe_name(ref.name)}"
    if ref.size is not None and ref.size > max_bytes:
        return f"it is {ref.size:,} bytes, over the {max_bytes:,}-byte limit"
    try:
        fd = create_file(dir_fd, name)
    except FileExistsError:
        # Saved before (the bridge restarted mid-download): start that file again.
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        try:
            fd = create_file(dir_fd, name)
        except OSError as exc:
            return f"could not be written ({exc.strerror or exc})"
    except OSError as exc:
        return f"could not be written ({exc.strerror or exc})"
    try:
        with os.fdopen(fd, "wb") as out:
            size = await adapter.fetch_attachment(ref, out, max_bytes)
    except AttachmentError as exc:
        _remove(dir_fd, name)
        return str(exc)
    except OSError as exc:
        _remove(dir_fd, name)
        return f"could not be written ({exc.strerror or exc})"
    if size == 0:
        _remove(dir_fd, name)
        return "the file is empty"
    return str(folder / name)


def _remove(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
