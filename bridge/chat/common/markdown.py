"""Markdown cut into messages of a bounded size, with code fences kept renderable.

The size of a piece is measured by a function the adapter passes: characters for Slack, the
encoded size of the event a piece travels in for Matrix. Every size function must count at
least one per character (``size(s) >= len(s)``): a window of ``limit`` characters then always
holds the longest piece that fits.

Cuts fall between paragraphs where possible, then between lines, then on whitespace; a code
block too long for one message is closed at the cut and reopened (with its info string) in the
next one. Greedy from the start: a piece depends only on the text from its start on, so the
full pieces of a growing text keep their place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Size = Callable[[str], int]

# CommonMark fences: three or more backticks or tildes, indented by at most three spaces.
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# How far back from the limit a hard cut may move to land on whitespace.
_SOFT_CUT_WINDOW = 200


def utf8_size(text: str) -> int:
    """Bytes in UTF-8 (for limits counted in bytes)."""
    return len(text.encode())


def opens_fence(line: str) -> str | None:
    """The fence marker (for example "```") when ``line`` opens a fenced code block."""
    match = _FENCE_OPEN.match(line)
    if match is None:
        return None
    marker, info = match.group(1), match.group(2)
    if marker[0] == "`" and "`" in info:
        return None  # a backtick fence's info string may not contain backticks
    return marker


def closes_fence(line: str, marker: str) -> bool:
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return (
        indent <= 3
        and len(stripped) >= len(marker)
        and set(stripped) == {marker[0]}
        and not line.startswith("\t")
    )


def fenced_parts(text: str) -> list[tuple[bool, list[str]]]:
    """``text`` as runs of lines, ``(True, the code lines)`` for each fenced code block (its
    fence lines left out, an unclosed one running to the end) and ``(False, lines)`` between."""
    parts: list[tuple[bool, list[str]]] = []
    marker: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):
        if marker is None:
            found = opens_fence(line)
            if found is None:
                lines.append(line)
                continue
            if lines:
                parts.append((False, lines))
            marker, lines = found, []
        elif closes_fence(line, marker):
            parts.append((True, lines))
            marker, lines = None, []
        else:
            lines.append(line)
    if lines or marker is not None:
        parts.append((marker is not None, lines))
    return parts


def open_fence_at_end(text: str) -> tuple[str, str] | None:
    """``(opener line, marker)`` of a code fence left open at the end of ``text``, if any."""
    opener: str | None = None
    marker = ""
    for line in text.split("\n"):
        if opener is None:
            found = opens_fence(line)
            if found is not None:
                opener, marker = line, found
        elif closes_fence(line, marker):
            opener = None
    return None if opener is None else (opener, marker)


def close_open_fence(text: str) -> str:
    """``text`` with a code fence left open at its end closed (for showing partial text)."""
    state = open_fence_at_end(text)
    if state is None:
        return text
    return text + ("" if text.endswith("\n") else "\n") + state[1]


def slice_for_display(text: str, start: int, end: int) -> str:
    """``text[start:end]`` as a message of its own: a fence open at ``start`` is reopened and a
    fence open at ``end`` is closed, so each piece of a long answer renders on its own."""
    piece = text[start:end]
    before = open_fence_at_end(text[:start]) if start > 0 else None
    if before is not None:
        piece = before[0] + "\n" + piece
    return close_open_fence(piece)


def _longest_fitting(text: str, fits: Callable[[str], bool]) -> int:
    """The length of the longest prefix of ``text`` that fits (at least 1, to make progress).

    Assumes that a prefix of a fitting text fits too (sizes grow with the text)."""
    low, high = 1, len(text)
    if fits(text):
        return len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(text[:middle]):
            low = middle
        else:
            high = middle - 1
    return low


def _soft_cut(window: str) -> int:
    """A cut inside one long line: on the last whitespace near the end, else at the limit."""
    at = window.rfind(" ", max(0, len(window) - _SOFT_CUT_WINDOW))
    return at + 1 if at > 0 else len(window)


def cut_point(text: str, start: int, limit: int, size: Size = len) -> int:
    """Where to end a piece that starts at ``start`` and may measure at most ``limit``:
    after the last blank line, else after the last line break, else on whitespace."""
    window = text[start : start + limit]
    if start + limit >= len(text) and size(window) <= limit:
        return len(text)
    window = window[: _longest_fitting(window, lambda s: size(s) <= limit)]
    for separator in ("\n\n", "\n"):
        at = window.rfind(separator)
        if at > len(window) // 4:
            return start + at + len(separator)
    return start + _soft_cut(window)


@dataclass
class _Block:
    separator: str  # what joined this block to the previous one in the source ("\n\n" or "\n")
    lines: list[str]
    fence: str | None = None  # the fence marker when the block is a fenced code block

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _blocks(text: str) -> list[_Block]:
    """Paragraphs (split on blank lines) and fenced code blocks (kept whole, blank lines too)."""
    blocks: list[_Block] = []
    current: _Block | None = None
    separator = ""
    for line in text.split("\n"):
        if current is not None and current.fence is not None:
            current.lines.append(line)
            if len(current.lines) > 1 and closes_fence(line, current.fence):
                blocks.append(current)
                current, separator = None, "\n"
            continue
        marker = opens_fence(line)
        if marker is not None:
            if current is not None:
                blocks.append(current)
                separator = "\n"
            current = _Block(separator=separator if blocks else "", lines=[line], fence=marker)
            continue
        if not line.strip():
            if current is not None:
                blocks.append(current)
                current = None
            separator = "\n\n"
            continue
        if current is None:
            current = _Block(separator=separator if blocks else "", lines=[])
        current.lines.append(line)
    if current is not None:
        blocks.append(current)
    return blocks


def _pack_lines(lines: list[str], fits: Callable[[str], bool]) -> list[str]:
    """Group lines into pieces that fit; split over-long lines on whitespace."""
    pieces: list[str] = []
    current = ""
    for line in lines:
        while not fits(line):
            if current:
                pieces.append(current)
                current = ""
            cut = _soft_cut(line[: _longest_fitting(line, fits)])
            pieces.append(line[:cut])
            line = line[cut:]
        candidate = f"{current}\n{line}" if current else line
        if current and not fits(candidate):
            pieces.append(current)
            current = line
        else:
            current = candidate
    if current:
        pieces.append(current)
    return pieces


def _split_block(block: _Block, limit: int, size: Size) -> list[str]:
    text = block.text
    if size(text) <= limit:
        return [text]

    def fits(piece: str) -> bool:
        return size(piece) <= limit

    if block.fence is None:
        return _pack_lines(block.lines, fits)
    opener = block.lines[0]
    closed = len(block.lines) > 1 and closes_fence(block.lines[-1], block.fence)
    closer = block.lines[-1] if closed else block.fence
    body = block.lines[1:-1] if closed else block.lines[1:]
    if size(f"{opener}\n\n{closer}") > limit // 2:
        # An absurdly long fence line: treat the block as plain lines.
        return _pack_lines(block.lines, fits)

    def fits_fenced(group: str) -> bool:
        return size(f"{opener}\n{group}\n{closer}") <= limit

    return [f"{opener}\n{group}\n{closer}" for group in _pack_lines(body, fits_fenced)]


def split_markdown(text: str, limit: int, size: Size = len) -> list[str]:
    """Split ``text`` into pieces that each measure at most ``limit`` by ``size``.

    Blank text gives no piece. Joining the pieces with the separators they were cut at gives
    the text back (plus the fence lines added around cuts inside code blocks).
    """
    if limit < 1:
        raise ValueError("the limit must be positive")
    if size(text) <= limit:
        return [text] if text.strip() else []
    chunks: list[str] = []
    current = ""
    for block in _blocks(text):
        for index, piece in enumerate(_split_block(block, limit, size)):
            separator = block.separator if index == 0 else "\n"
            candidate = f"{current}{separator}{piece}" if current else piece
            if current and size(candidate) > limit:
                chunks.append(current)
                current = piece
            else:
                current = candidate
    if current.strip():
        chunks.append(current)
    return chunks
