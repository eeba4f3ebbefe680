"""Saving attachments for the agent: safe names, a size cap, inside the session directory."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from bridge.core.events import AttachmentError, AttachmentRef, ChatAdapter

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
) -> list[str]:
    """Save each attachment; returns its absolute path, or the reason it could not be saved."""
    folder.mkdir(parents=True, exist_ok=True)
    results: list[str] = []
    for index, ref in enumerate(refs):
        dest = folder / f"{prefix}-{index}-{safe_name(ref.name)}"
        if ref.size is not None and ref.size > max_bytes:
            results.append(f"it is {ref.size:,} bytes, over the {max_bytes:,}-byte limit")
            continue
        try:
            size = await adapter.fetch_attachment(ref, dest, max_bytes)
        except AttachmentError as exc:
            dest.unlink(missing_ok=True)
            results.append(str(exc))
            continue
        except OSError as exc:
            dest.unlink(missing_ok=True)
            results.append(f"could not be written ({exc.strerror or exc})")
            continue
        if size == 0:
            dest.unlink(missing_ok=True)
            results.append("the file is empty")
            continue
        results.append(str(dest.resolve()))
    return results
