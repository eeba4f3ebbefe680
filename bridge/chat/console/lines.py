"""Lines typed on standard input, read without a thread that can outlive the bridge.

A blocking ``readline`` in a worker thread cannot be cancelled: after SIGTERM the interpreter
waits at exit for that thread until the other side closes the pipe, so a console run under a
supervisor that keeps stdin open never exits. A pipe or terminal is read only once it is
readable (the event loop watches the descriptor), so nothing blocks; in-memory streams, regular
files and devices other than a terminal (``</dev/null``, which epoll refuses to watch) cannot
block and are read directly.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
from typing import TextIO

import anyio

CHUNK = 65536


class InputLines:
    """``await lines.readline()``: the next line with its ``\\n``, or "" at the end of input."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd = _watchable_fd(stream)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._ended = False

    async def readline(self) -> str:
        if self._fd is None:
            return self._stream.readline()
        while "\n" not in self._buffer and not self._ended:
            await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, CHUNK)
            if not chunk:
                self._ended = True
                self._buffer += self._decoder.decode(b"", final=True)
            else:
                self._buffer += self._decoder.decode(chunk)
        line, newline, rest = self._buffer.partition("\n")
        self._buffer = rest
        return line + newline


def _watchable_fd(stream: TextIO) -> int | None:
    """The descriptor to watch, or None when reading the stream cannot block."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return fd
    return None
