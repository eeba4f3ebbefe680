"""Markdown for Slack: its size limits, tool lines, and the composed final reply.

Slack renders standard Markdown given as ``markdown_text`` (or a ``markdown`` block), at most
12,000 characters per call. Long answers become several messages, cut by the shared splitter
(:mod:`bridge.chat.common.markdown`) on paragraph or line boundaries, fences reopened.

Two kinds of text go out, and each is made safe its own way:
- Block Kit sections and ``text`` fallbacks are *mrkdwn*, where ``<…>`` is a control sequence
  (``<!channel>`` pings everyone, ``<https://x|ls>`` shows "ls"): every text the bridge builds
  from agent or user input there is escaped (``&amp;``, ``&lt;``, ``&gt;``, Slack's only three
  entities), cut before escaping so no entity is split, and measured escaped, as Slack counts.
  The bridge's texts are CommonMark: their ``**bold**`` becomes mrkdwn's ``*bold*`` there
  (outside code), the one mark the two write differently that the bridge uses.
- The agent's answers are standard Markdown (``markdown_text``), kept as written (links, code)
  except that channel-wide mentions (``<!channel>``, ``<!here>``, ``<!everyone>``,
  ``<!subteam^…>`` and bare ``@channel``/``@here``/``@everyone``) get a zero-width space after
  their first character: they read the same and ping no one.
"""

from __future__ import annotations

import re

from bridge.chat.common.markdown import fenced_parts, split_markdown
from bridge.core.events import ToolActivity

# Slack's documented limit for markdown_text is 12,000 characters. We cut well below it: Slack
# may count UTF-16 code units (an emoji is two), and a cut can add a fence line to a piece.
MARKDOWN_LIMIT = 12_000
SPLIT_LIMIT = 11_000


# A section block's text is at most 3,000 characters, counted as sent (escaped).
SECTION_LIMIT = 3000
# Room kept in a section for the fence lines that close and reopen a cut code block.
_FENCE_ROOM = 8
# Sections of one message at most (Slack allows 50 blocks; the buttons take one).
MAX_SECTIONS = 40
ZWSP = "\u200b"


def mrkdwn_escape(text: str) -> str:
    """``text`` shown as typed in mrkdwn: Slack's three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escaped_size(text: str) -> int:
    """``len(mrkdwn_escape(text))`` without building it."""
    return len(text) + 4 * text.count("&") + 3 * (text.count("<") + text.count(">"))


def cut_escaped(text: str, limit: int) -> str:
    """The longest start of ``text`` whose escaped size is at most ``limit``: the cut falls
    between characters of the raw text, so never inside an entity."""
    size = 0
    for index, char in enumerate(text):
        size += escaped_size(char)
        if size > limit:
            return text[:index]
    return text


_BROADCAST = re.compile(
    r"<(?=!(?:channel|here|everyone|subteam\^))|(?<![\w@.])@(?=(?:channel|here|everyone)\b)",
    re.IGNORECASE,
)
# The end of a text that could still become a broadcast when more text follows.
_BROADCAST_START = re.compile(r"(?:<(?:![a-z^]{0,9})?|@[a-z]{0,9})$", re.IGNORECASE)


def neutralise_broadcasts(text: str) -> str:
    """``text`` with every channel-wide mention made inert (a zero-width space after its
    first character): it reads the same and notifies no one."""
    return _BROADCAST.sub(lambda m: m.group(0) + ZWSP, text)


class BroadcastGuard:
    """:func:`neutralise_broadcasts` over a text that arrives in pieces: a piece ending in
    what could start a mention (``<!chan``) is held back until the next piece shows what it is,
    so the pieces given out join to exactly ``neutralise_broadcasts`` of the whole text."""

    def __init__(self) -> None:
        self._held = ""
        self._before = ""  # the last character given out (the lookbehind's context)

    def feed(self, text: str) -> str:
        text = self._held + text
        tail = _BROADCAST_START.search(text)
        cut = tail.start() if tail is not None else len(text)
        self._held = text[cut:]
        return self._give(text[:cut])

    def flush(self) -> str:
        text, self._held = self._held, ""
        return self._give(text)

    def _give(self, text: str) -> str:
        if not text:
            return ""
        out = neutralise_broadcasts(self._before + text)[len(self._before) :]
        self._before = text[-1]
        return out


_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
# An inline code span: its text is shown as is, in CommonMark as in mrkdwn.
_CODE_SPAN = re.compile(r"(`+)(?:.*?[^`])?\1(?!`)")


def mrkdwn_bold(line: str) -> str:
    """A line of CommonMark with its ``**bold**`` as mrkdwn's ``*bold*``; code spans kept."""
    out, at = [], 0
    for span in _CODE_SPAN.finditer(line):
        out.append(_STRONG.sub(r"*\1*", line[at : span.start()]))
        out.append(span.group(0))
        at = span.end()
    out.append(_STRONG.sub(r"*\1*", line[at:]))
    return "".join(out)


def _code_line(line: str) -> str:
    # A run of three backticks would end Slack's code block early: keep the run visibly the
    # same, broken by zero-width spaces.
    return re.sub(r"`{3,}", lambda m: ZWSP.join(m.group(0)), line)


def mrkdwn_sections(markdown: str, limit: int = SECTION_LIMIT) -> list[str]:
    """The bridge's own Markdown (an approval request or its result, which quote commands in
    fenced blocks) as mrkdwn section texts of at most ``limit`` characters each, escaped.

    Fenced blocks become Slack code blocks (a block cut between sections is closed and
    reopened); everything is escaped; a line too long for a section is cut before escaping.
    """
    sections: list[str] = []
    current: list[str] = []
    size = 0
    room = limit - _FENCE_ROOM

    def close(in_code: bool) -> None:
        nonlocal current, size
        if in_code:
            current.append("```")
        if any(line.strip("`\n") for line in current):
            sections.append("\n".join(current))
        current, size = [], 0

    def new_section(in_code: bool) -> None:
        nonlocal size
        close(in_code)
        if in_code:
            current.append("```")
            size = 4

    def add(line: str, in_code: bool) -> None:
        nonlocal size
        base = 4 if in_code else 0
        while escaped_size(line) + 1 > room - size:
            if size > base and escaped_size(line) + 1 <= room - base:
                new_section(in_code)  # the whole line fits in a section of its own
                continue
            piece = cut_escaped(line, room - size - 1)
            if not piece:
                if size > base:
                    new_section(in_code)
                    continue
                piece = line[:1]
            current.append(mrkdwn_escape(piece))
            size += escaped_size(piece) + 1
            line = line[len(piece) :]
            new_section(in_code)
        current.append(mrkdwn_escape(line))
        size += escaped_size(line) + 1

    for code, lines in fenced_parts(markdown):
        if code:
            if size + 5 > room:
                close(False)
            current.append("```")
            size += 4
            for line in lines:
                add(_code_line(line), True)
            current.append("```")
            size += 4
        else:
            for line in lines:
                add(mrkdwn_bold(line), False)
    close(False)
    if len(sections) > MAX_SECTIONS:
        hidden = len(sections) - MAX_SECTIONS + 1
        sections = [
            *sections[: MAX_SECTIONS - 1],
            f"⚠️ {hidden} more parts are not shown here; deny unless you know what they do.",
        ]
    return sections


def mrkdwn_fallback(markdown: str, limit: int = 300) -> str:
    """The notification text of a message built from ``markdown``: one line, escaped, at most
    ``limit`` characters as sent."""
    flat = mrkdwn_bold(" ".join(markdown.split()))
    if escaped_size(flat) <= limit:
        return mrkdwn_escape(flat) or "…"
    return mrkdwn_escape(cut_escaped(flat, limit - 1).rstrip()) + "…"


def split_message(text: str, limit: int = SPLIT_LIMIT) -> list[str]:
    """``text`` as Slack messages of at most ``limit`` characters (see
    :func:`bridge.chat.common.markdown.split_markdown`)."""
    return split_markdown(text, limit)


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
