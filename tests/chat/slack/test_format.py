"""Slack's message size, tool lines, and composing the final reply (splitting itself is
tested in tests/chat/common)."""

from __future__ import annotations

from bridge.chat.slack.format import (
    MARKDOWN_LIMIT,
    SPLIT_LIMIT,
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
