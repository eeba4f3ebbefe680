"""Slack's message size, tool lines, and composing the final reply (splitting itself is
tested in tests/chat/common)."""

from __future__ import annotations

from bridge.chat.slack.format import (
    MARKDOWN_LIMIT,
    SPLIT_LIMIT,
    mrkdwn_fallback,
    mrkdwn_sections,
    split_message,
    tool_line,
)
from bridge.core.events import ToolActivity


def test_messages_are_cut_below_slacks_character_limit() -> None:
    assert split_message("hello **world**") == ["hello **world**"]
    assert split_message("  ") == []
    paragraphs = ["p" * 5_000 for _ in range(5)]
    pieces = split_message("\n\n".join(paragraphs))
    assert all(len(piece) <= SPLIT_LIMIT < MARKDOWN_LIMIT for piece in pieces)
    assert "\n\n".join(pieces) == "\n\n".join(paragraphs)


def test_tool_lines_are_short_single_lines() -> None:
    assert tool_line(ToolActivity(name="run_command", summary="ls -la")) == "› run_command `ls -la`"
    long = tool_line(ToolActivity(name="run_command", summary="echo `x`\n" + "y" * 500))
    assert "\n" not in long
    assert len(long) < 110
    assert "`echo 'x'" in long
    failed = tool_line(ToolActivity(name="edit", state="ERROR", error="permission check failed"))
    assert failed == "› edit — ⚠️ permission check failed"


def test_the_cores_commonmark_bold_is_mrkdwn_bold_in_sections() -> None:
    """Block Kit sections are mrkdwn, where bold is one asterisk: the core's ``**bold**`` is
    converted there (outside code), so Slack shows no stray asterisks."""
    text = "🔐 **Approval needed**: run `a**b**c`:\n```\necho **x**\n```\nthen **go** on"
    [section] = mrkdwn_sections(text)
    assert section.startswith("🔐 *Approval needed*: run `a**b**c`:")
    assert "```\necho **x**\n```" in section, "code keeps its asterisks"
    assert section.endswith("then *go* on")
    assert mrkdwn_fallback(text).startswith("🔐 *Approval needed*: run `a**b**c`")
