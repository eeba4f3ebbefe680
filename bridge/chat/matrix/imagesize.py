"""Width and height of an image from its first bytes (PNG, GIF, JPEG, WebP), for ``m.image``.

Element sizes the placeholder of an image from ``info.w``/``info.h`` before it downloads it;
without them the timeline jumps when the image arrives. Only the header is read.
"""

from __future__ import annotations

import struct

# JPEG start-of-frame markers (baseline, progressive, ...): they carry the size.
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
HEADER_BYTES = 64 * 1024


def image_size(head: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the start of an image file, or None when unknown."""
    try:
        if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
            width, height = struct.unpack(">II", head[16:24])
            return width, height
        if head[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", head[6:10])
            return width, height
        if head.startswith(b"\xff\xd8"):
            return _jpeg_size(head)
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            return _webp_size(head)
    except struct.error:
        return None
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(head):
        if head[at] != 0xFF:
            return None
        marker = head[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        (length,) = struct.unpack(">H", head[at + 2 : at + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", head[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None
