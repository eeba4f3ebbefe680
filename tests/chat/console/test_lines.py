"""Standard input as the console reads it: a pipe is watched, what cannot block is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.chat.console.lines import InputLines

pytestmark = pytest.mark.anyio


async def test_a_console_reads_dev_null_as_an_empty_input() -> None:
    # epoll refuses /dev/null ("Operation not permitted"): `agy-bridge console </dev/null`
    # ended in a traceback instead of an orderly end of input.
    with Path(os.devnull).open() as stream:  # noqa: ASYNC230 (a device: opening never blocks)
        assert await InputLines(stream).readline() == ""


async def test_a_pipe_is_read_line_by_line() -> None:
    read, write = os.pipe()
    os.write(write, b"first\nsecond")
    os.close(write)
    with os.fdopen(read) as stream:
        lines = InputLines(stream)
        assert [await lines.readline() for _ in range(3)] == ["first\n", "second", ""]
