"""Edges of agy's line reader: the exact cap, a newline first in a chunk, and exact sizes of
what was dropped (each found by mutation testing, see docs/testing.md)."""

from __future__ import annotations

import pytest

from bridge.agy.lines import LineTooLong
from tests.agy.test_lines import _collect

pytestmark = pytest.mark.anyio


def sizes(out: list[bytes | LineTooLong]) -> list[object]:
    return [x.size if isinstance(x, LineTooLong) else x for x in out]


async def test_a_line_of_exactly_the_cap_is_kept() -> None:
    assert await _collect([b"a" * 100 + b"\n"], 100) == [b"a" * 100]
    assert await _collect([b"b" * 60, b"b" * 40 + b"\n"], 100) == [b"b" * 100]
    assert await _collect([b"e" * 60, b"e" * 40, b"\n"], 100) == [b"e" * 100]
    assert sizes(await _collect([b"c" * 101 + b"\n"], 100)) == [101]
    assert sizes(await _collect([b"d" * 60, b"d" * 41 + b"\nok\n"], 100)) == [101, b"ok"]


async def test_a_chunk_that_starts_with_the_newline_ends_the_line_before_it() -> None:
    assert await _collect([b"first", b"\nsecond\n"], 100) == [b"first", b"second"]


async def test_the_size_of_a_dropped_line_counts_every_chunk() -> None:
    out = await _collect([b"x" * 150, b"y" * 30, b"z" * 20 + b"\nok\n"], 100)
    assert sizes(out) == [200, b"ok"]
    # Over the cap only when the second chunk arrives: the first one counts too.
    assert sizes(await _collect([b"x" * 60, b"y" * 60, b"\nok\n"], 100)) == [120, b"ok"]


async def test_after_a_dropped_line_the_next_one_is_read() -> None:
    assert sizes(await _collect([b"x" * 150, b"\nok\n", b"fine\n"], 100)) == [150, b"ok", b"fine"]


async def test_a_dropped_line_at_the_end_of_the_stream_is_reported_with_its_size() -> None:
    [dropped] = await _collect([b"x" * 150], 100)
    assert isinstance(dropped, LineTooLong)
    assert str(dropped) == "line of at least 150 bytes is over the 100-byte limit"
    [dropped] = await _collect([b"x" * 150 + b"\n"], 100)
    assert str(dropped) == "line of at least 150 bytes is over the 100-byte limit"
    [dropped, ok] = await _collect([b"x" * 150, b"\nok\n"], 100)
    assert str(dropped) == "line of at least 150 bytes is over the 100-byte limit" and ok == b"ok"
    [dropped] = await _collect([b"y" * 50, b"y" * 70 + b"\n"], 100)
    assert str(dropped) == "line of at least 120 bytes is over the 100-byte limit"
