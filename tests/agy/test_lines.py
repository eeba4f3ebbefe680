from __future__ import annotations

import anyio
import pytest

from bridge.agy.lines import LineTooLong, read_line_batches


async def _collect(chunks: list[bytes], limit: int) -> list[bytes | LineTooLong]:
    send, receive = anyio.create_memory_object_stream[bytes](100)
    for chunk in chunks:
        await send.send(chunk)
    send.close()

    class _Bytes:
        async def receive(self) -> bytes:
            return await receive.receive()

    batches = read_line_batches(_Bytes(), limit)  # type: ignore[arg-type]
    return [line async for batch in batches for line in batch]


@pytest.mark.anyio
async def test_splits_on_newline_only_across_chunks() -> None:
    out = await _collect([b'{"a":"x\xe2\x80\xa8', b'y"}\n{"b"', b":1}\n\n", b"tail"], 1000)
    assert out == [b'{"a":"x\xe2\x80\xa8y"}', b'{"b":1}', b"tail"]


@pytest.mark.anyio
async def test_overlong_line_is_dropped_and_reported() -> None:
    out = await _collect([b"x" * 50, b"y" * 60 + b"\nok\n", b"z" * 200], 100)
    assert isinstance(out[0], LineTooLong) and out[0].size == 110
    assert out[1] == b"ok"
    assert isinstance(out[2], LineTooLong)
