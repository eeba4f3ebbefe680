"""Splitting agy's stdout into lines, with a cap on line length.

agy writes one JSON object per line, split on ``\\n`` only (U+2028 inside a string is not a
break, so no text-mode line splitting). A line longer than the cap is dropped whole and reported,
without holding more than the cap in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from anyio import EndOfStream
from anyio.abc import ByteReceiveStream


class LineTooLong(Exception):
    def __init__(self, size: int, limit: int):
        super().__init__(f"line of at least {size} bytes is over the {limit}-byte limit")
        self.size = size


async def read_lines(
    stream: ByteReceiveStream, max_bytes: int
) -> AsyncIterator[bytes | LineTooLong]:
    """Yield each complete line (without its newline), or a LineTooLong for a dropped one."""
    async for batch in read_line_batches(stream, max_bytes):
        for line in batch:
            yield line


async def read_line_batches(
    stream: ByteReceiveStream, max_bytes: int
) -> AsyncIterator[list[bytes | LineTooLong]]:
    """The complete lines of each read from ``stream``, together: a reader that handles them
    as one batch pays its per-wake-up costs once per read, not once per line."""
    buffer = bytearray()
    skipping = 0  # bytes dropped so far of an overlong line
    while True:
        try:
            chunk = await stream.receive()
        except EndOfStream:
            break
        batch: list[bytes | LineTooLong] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                piece = chunk[start:]
                if skipping:
                    skipping += len(piece)
                elif len(buffer) + len(piece) > max_bytes:
                    skipping = len(buffer) + len(piece)
                    buffer.clear()
                else:
                    buffer += piece
                break
            piece = chunk[start:newline]
            start = newline + 1
            if skipping:
                batch.append(LineTooLong(skipping + len(piece), max_bytes))
                skipping = 0
            elif len(buffer) + len(piece) > max_bytes:
                batch.append(LineTooLong(len(buffer) + len(piece), max_bytes))
                buffer.clear()
            elif buffer:
                buffer += piece
                line = bytes(buffer)
                buffer.clear()
                if line.strip():
                    batch.append(line)
            elif piece.strip():
                batch.append(bytes(piece))
        if batch:
            yield batch
    if skipping:
        yield [LineTooLong(skipping, max_bytes)]
    elif buffer.strip():
        yield [bytes(buffer)]
