"""Markdown for Slack: split within Slack's limits, keep code fences whole, compose final replies.

Slack renders standard Markdown given as ``markdown_text`` (or a ``markdown`` block), at most
12,000 characters per call. Long answers become several messages, cut on paragraph or line
boundaries; a cut inside a fenced code block closes the fence and reopens it in the next piece.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bridge.core.events import ToolActivity

# Slack's documented limit for markdown_text is 12,000 characters. We cut well below it: Slack
# may count UTF-16 code units (an emoji is two), and a cut can add a fence line to a piece.
MARKDOWN_LIMIT = 12_000
SPLIT_LIMIT = 11_000

# CommonMark fences: three or more backticks or tildes, indented by at most three spaces.
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# How far back from the limit a hard cut may move to land on whitespace.
_SOFT_CUT_WINDOW = 200


def _opens_fence(line: str) -> str | None:
    """The fence marker (for example "```") when ``line`` opens a fenced code block."""
    match = _FENCE_OPEN.match(line)
    if match is None:
        return None
    marker, info = match.group(1), match.group(2)
    if marker[0] == "`" and "`" in info:
        return None  # a backtick fence's info string may not contain backticks
    return marker


def _closes_fence(line: str, marker: str) -> bool:
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return (
        indent <= 3
        and len(stripped) >= len(marker)
        and set(stripped) == {marker[0]}
        and not line.startswith("\t")
    )


def open_fence_at_end(text: str) -> tuple[str, str] | None:
    """``(opener line, marker)`` of a code fence left open at the end of ``text``, if any."""
    opener: str | None = None
    marker = ""
    for line in text.split("\n"):
        if opener is None:
            found = _opens_fence(line)
            if found is not None:
                opener, marker = line, found
        elif _closes_fence(line, marker):
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


def cut_point(text: str, start: int, limit: int) -> int:
    """Where to end a piece that starts at ``start`` and may hold at most ``limit`` characters:
    after the last blank line, else after the last line break, else on whitespace."""
    end = start + limit
    if end >= len(text):
        return len(text)
    window = text[start:end]
    for separator in ("\n\n", "\n"):
        at = window.rfind(separator)
        if at > limit // 4:
            return start + at + len(separator)
    return start + _soft_cut(window)


def _soft_cut(window: str) -> int:
    """A cut inside one long line: on the last whitespace near the end, else at the limit."""
    at = window.rfind(" ", max(0, len(window) - _SOFT_CUT_WINDOW))
    return at + 1 if at > 0 else len(window)


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
            if len(current.lines) > 1 and _closes_fence(line, current.fence):
                blocks.append(current)
                current, separator = None, "\n"
            continue
        marker = _opens_fence(line)
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


def _pack_lines(lines: list[str], budget: int) -> list[str]:
    """Group lines into pieces of at most ``budget`` characters; split over-long lines."""
    pieces: list[str] = []
    current = ""
    for line in lines:
        while len(line) > budget:
            if current:
                pieces.append(current)
                current = ""
            cut = _soft_cut(line[:budget])
            pieces.append(line[:cut])
            line = line[cut:]
        candidate = f"{current}\n{line}" if current else line
        if current and len(candidate) > budget:
            pieces.append(current)
            current = line
        else:
            current = candidate
    if current:
        pieces.append(current)
    return pieces


def _split_block(block: _Block, limit: int) -> list[str]:
    if len(block.text) <= limit:
        return [block.text]
    if block.fence is None:
        return _pack_lines(block.lines, limit)
    opener = block.lines[0]
    closed = len(block.lines) > 1 and _closes_fence(block.lines[-1], block.fence)
    closer = block.lines[-1] if closed else block.fence
    body = block.lines[1:-1] if closed else block.lines[1:]
    budget = limit - len(opener) - len(closer) - 2
    if budget < limit // 2:
        # An absurdly long fence line: treat the block as plain lines.
        return _pack_lines(block.lines, limit)
    return [f"{opener}\n{group}\n{closer}" for group in _pack_lines(body, budget)]


def split_markdown(text: str, limit: int = SPLIT_LIMIT) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` characters.

    Cuts fall between paragraphs where possible, then between lines; a code block too long for
    one message is closed at the cut and reopened (with its info string) in the next one.
    """
    if len(text) <= limit:
        return [text] if text.strip() else []
    chunks: list[str] = []
    current = ""
    for block in _blocks(text):
        for index, piece in enumerate(_split_block(block, limit)):
            separator = block.separator if index == 0 else "\n"
            candidate = f"{current}{separator}{piece}" if current else piece
            if current and len(candidate) > limit:
                chunks.append(current)
                current = piece
            else:
                current = candidate
    if current.strip():
        chunks.append(current)
    return chunks


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def tool_line(activity: ToolActivity) -> str:
    """A short line for a tool call, e.g. "› run_command `ls -la`"."""
    line = f"› {one_line(activity.name, 60) or 'tool'}"
    summary = one_line(activity.summary, 80).replace("`", "'")
    if summary:
        line += f" `{summary}`"
    if activity.state == "ERROR":
        line += f" — ⚠️ {one_line(activity.error or 'failed', 120)}"
    return line


# agy's own words for an interruption, which the interrupted marker already says.
def plain_fallback(markdown: str, limit: int = 300) -> str:
    """The short plain text Slack shows in notifications for a Markdown message."""
    return one_line(re.sub(r"[*_`~>#]", "", markdown), limit) or "…"
