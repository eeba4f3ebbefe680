"""Files replaced atomically, and the ids the simulator mints, without ``tempfile`` or ``uuid``.

Every turn process writes its conversation (and sometimes its login) this way. ``tempfile``
pulls in ``shutil``, ``random`` and the compression modules, ``uuid`` pulls in ``platform``:
a few milliseconds of CPU in each of the hundreds of simulator processes a test run starts,
for two things the standard library's ``os`` does in a few lines.
"""

from __future__ import annotations

import os
from pathlib import Path

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_TRIES = 100


def replace_file(path: Path, data: bytes, *, prefix: str, sync: bool) -> None:
    """Write ``data`` to a new private file beside ``path`` (``tempfile.mkstemp``'s flags and
    mode), then rename it over ``path``: a reader sees the old file or the new one, never a
    part. ``sync``: fsync before the rename, so a crash cannot leave an empty file."""
    fd, tmp = _create_temp(path.parent, prefix, path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _create_temp(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    for _ in range(_TEMP_TRIES):
        name = os.path.join(directory, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(name, _TEMP_FLAGS, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {directory}")


def new_uuid4() -> str:
    """``str(uuid.uuid4())``: 122 random bits, version 4, RFC 4122 variant."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
