"""Markdown for Slack: its size limits, tool lines, and the composed final reply.

Slack renders standard Markdown given as ``markdown_text`` (or a ``markdown`` block), at most
12,000 characters per call. Long answers become several messages, cut by the shared splitter
(:mod:`bridge.chat.common.markdown`) on paragraph or line boundaries, fences reopened.
"""

from __future__ import annotations

import re

from bridge.chat.common.markdown import split_markdown
from bridge.core.events import ToolActivity

# Slack's documented limit for markdown_text is 12,000 characters. We cut well below it: Slack
# may count UTF-16 code units (an emoji is two), and a cut can add a fence line to a piece.
MARKDOWN_LIMIT = 12_000
SPLIT_LIMIT = 11_000


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


def plain_fallback(markdown: str, limit: int = 300) -> str:
    """The short plain text Slack shows in notifications for a Markdown message."""
    return one_line(re.sub(r"[*_`~>#]", "", markdown), limit) or "…"
