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
        # One split in C: the last piece is the start of a line still on its way.
        pieces = chunk.split(b"\n")
        tail = pieces.pop()
        batch: list[bytes | LineTooLong] = []
        for index, piece in enumerate(pieces):
            if index == 0 and (skipping or buffer):
                # The end of the line the earlier reads began.
                if skipping:
                    batch.append(LineTooLong(skipping + len(piece), max_bytes))
                    skipping = 0
                    continue
                if len(buffer) + len(piece) > max_bytes:
                    batch.append(LineTooLong(len(buffer) + len(piece), max_bytes))
                    buffer.clear()
                    continue
                buffer += piece
                piece = bytes(buffer)
                buffer.clear()
            elif len(piece) > max_bytes:
                batch.append(LineTooLong(len(piece), max_bytes))
                continue
            # ``isspace`` looks without copying (``strip`` would copy every line).
            if piece and not piece.isspace():
                batch.append(piece)
        if skipping:
            skipping += len(tail)
        elif len(buffer) + len(tail) > max_bytes:
            skipping = len(buffer) + len(tail)
            buffer.clear()
        else:
            buffer += tail
        if batch:
            yield batch
    if skipping:
        yield [LineTooLong(skipping, max_bytes)]
    elif buffer.strip():
        yield [bytes(buffer)]
