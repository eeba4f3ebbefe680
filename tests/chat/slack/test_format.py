"""Splitting Markdown within Slack's limits, and composing the final reply."""

from __future__ import annotations

from bridge.chat.slack.format import (
    close_open_fence,
    cut_point,
    open_fence_at_end,
    slice_for_display,
    split_markdown,
    tool_line,
)
from bridge.core.events import ToolActivity


def test_short_text_is_one_piece_and_blank_text_none() -> None:
    assert split_markdown("hello **world**", 100) == ["hello **world**"]
    assert split_markdown("  \n ", 100) == []


def test_cuts_fall_between_paragraphs() -> None:
    paragraphs = [f"para {i} " + "a" * 40 for i in range(10)]
    text = "\n\n".join(paragraphs)
    pieces = split_markdown(text, 120)
    assert all(len(p) <= 120 for p in pieces)
    assert "\n\n".join(pieces) == text
    # No paragraph is cut in half.
    assert all(p in paragraphs for piece in pieces for p in piece.split("\n\n"))


def test_a_long_paragraph_is_cut_between_lines_then_words() -> None:
    lines = [f"line {i} " + "b" * 30 for i in range(20)]
    pieces = split_markdown("\n".join(lines), 100)
    assert all(len(p) <= 100 for p in pieces)
    assert "\n".join(pieces) == "\n".join(lines)

    words = " ".join(f"w{i}" for i in range(200))
    pieces = split_markdown(words, 50)
    assert all(len(p) <= 50 for p in pieces)
    assert "".join(pieces) == words
    assert all(p.endswith(" ") for p in pieces[:-1])  # cut after a space, not inside a word


def test_a_code_block_is_closed_and_reopened_with_its_info_string() -> None:
    body = [f"print({i})" for i in range(60)]
    text = "Intro.\n\n```python\n" + "\n".join(body) + "\n```\n\nOutro."
    pieces = split_markdown(text, 200)
    assert len(pieces) > 2
    for piece in pieces:
        assert len(piece) <= 200
        assert open_fence_at_end(piece) is None
    code_pieces = [p for p in pieces if "print(" in p]
    assert all(p.split("\n")[0] == "```python" for p in code_pieces)
    assert all(p.split("\n")[-1] == "```" or p.endswith("```\n\nOutro.") for p in code_pieces)
    kept = [line for p in code_pieces for line in p.split("\n") if line.startswith("print(")]
    assert kept == body


def test_blank_lines_inside_code_are_not_paragraph_breaks() -> None:
    text = "```\na\n\nb\n```"
    assert split_markdown(text, 100) == [text]
    pieces = split_markdown("x" * 30 + "\n\n" + text, 35)
    assert pieces[-1] == text


def test_tilde_fences_and_longer_closers() -> None:
    assert open_fence_at_end("~~~sh\nls\n") == ("~~~sh", "~~~")
    assert open_fence_at_end("````\n```\nstill code\n") == ("````", "````")
    assert open_fence_at_end("````\n```\n````\n") is None
    assert close_open_fence("```\ncode") == "```\ncode\n```"
    assert close_open_fence("plain") == "plain"


def test_slices_of_live_text_render_on_their_own() -> None:
    text = "see:\n```js\nlet a = 1;\nlet b = 2;\n```\nend"
    cut = text.index("let b")
    assert slice_for_display(text, 0, cut) == "see:\n```js\nlet a = 1;\n```"
    assert slice_for_display(text, cut, len(text)) == "```js\nlet b = 2;\n```\nend"


def test_cut_point_prefers_paragraphs_then_lines() -> None:
    text = "a" * 50 + "\n\n" + "b" * 50 + "\n" + "c" * 50
    assert cut_point(text, 0, 120) == 52
    assert cut_point(text, 52, 80) == 52 + 51
    assert cut_point(text, 0, 10_000) == len(text)


def test_tool_lines_are_short_single_lines() -> None:
    assert tool_line(ToolActivity(name="run_command", summary="ls -la")) == "› run_command `ls -la`"
    long = tool_line(ToolActivity(name="run_command", summary="echo `x`\n" + "y" * 500))
    assert "\n" not in long
    assert len(long) < 110
    assert "`echo 'x'" in long
    failed = tool_line(ToolActivity(name="edit", state="ERROR", error="permission check failed"))
    assert failed == "› edit — ⚠️ permission check failed"
