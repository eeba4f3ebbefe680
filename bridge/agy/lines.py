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


async def read_line_batches(
    stream: ByteReceiveStream, max_bytes: int
) -> AsyncIterator[list[bytes | LineTooLong]]:
    """The complete lines of each read from ``stream``, together: a reader that handles them
    as one batch pays its per-wake-up costs once per read, not once per line."""
    splitter = _Splitter(max_bytes)
    while True:
        # Nothing of the read before is referenced while this waits: an idle agy's reader
        # waits here for as long as its session idles.
        try:
            batch = splitter.split(await stream.receive())
        except EndOfStream:
            break
        if batch:
            yield batch
        del batch
    if last := splitter.rest():
        yield last


class _Splitter:
    """Lines out of a byte stream's pieces: the start of a line still on its way is kept (or,
    past the cap, only counted)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.buffer = bytearray()
        self.skipping = 0  # bytes dropped so far of an overlong line

    def split(self, chunk: bytes) -> list[bytes | LineTooLong]:
        max_bytes = self.max_bytes
        buffer = self.buffer
        # One split in C: the last piece is the start of a line still on its way.
        pieces = chunk.split(b"\n")
        tail = pieces.pop()
        batch: list[bytes | LineTooLong] = []
        for index, piece in enumerate(pieces):
            if index == 0 and (self.skipping or buffer):
                # The end of the line the earlier reads began.
                if self.skipping:
                    batch.append(LineTooLong(self.skipping + len(piece), max_bytes))
                    self.skipping = 0
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
        if self.skipping:
            self.skipping += len(tail)
        elif len(buffer) + len(tail) > max_bytes:
            self.skipping = len(buffer) + len(tail)
            buffer.clear()
        else:
            buffer += tail
        return batch

    def rest(self) -> list[bytes | LineTooLong]:
        """What is left at the end of the stream: an unfinished line (or its overlong report)."""
        if self.skipping:
            return [LineTooLong(self.skipping, self.max_bytes)]
        if self.buffer.strip():
            return [bytes(self.buffer)]
        return []
