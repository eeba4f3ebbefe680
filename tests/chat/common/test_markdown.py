"""One Markdown splitter for every chat: cuts at natural breaks, fences kept, any size unit."""

from __future__ import annotations

import pytest

from bridge.chat.common.markdown import (
    close_open_fence,
    cut_point,
    open_fence_at_end,
    slice_for_display,
    split_markdown,
    utf8_size,
)


def test_short_text_is_one_piece_and_blank_text_none() -> None:
    assert split_markdown("hello **world**", 100) == ["hello **world**"]
    assert split_markdown("  \n ", 100) == []
    with pytest.raises(ValueError):
        split_markdown("text", 0)


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


def test_the_size_function_decides_bytes_not_characters() -> None:
    text = "ü" * 1000  # two bytes each in UTF-8
    assert split_markdown(text, 1500) == [text]
    pieces = split_markdown(text, 300, size=utf8_size)
    assert all(utf8_size(p) <= 300 for p in pieces)
    assert "".join(pieces) == text
    assert len(pieces) == 7


def test_any_size_function_holds_for_fenced_code() -> None:
    # An envelope as a Matrix event would add (the text twice, plus framing).
    def envelope(piece: str) -> int:
        return 2 * utf8_size(piece) + 40

    code = "\n".join(f"x_{n} = 'é{n}'" for n in range(300))
    pieces = split_markdown(f"intro\n\n```py\n{code}\n```\nafter", 1000, size=envelope)
    assert len(pieces) > 3
    assert all(envelope(p) <= 1000 for p in pieces)
    assert all(open_fence_at_end(p) is None for p in pieces)
    assert "x_299 = 'é299'" in pieces[-1]


def test_full_pieces_do_not_move_as_the_text_grows() -> None:
    text = " ".join(f"w{n}" for n in range(3000))
    before = split_markdown(text[:9000], 1000)
    after = split_markdown(text, 1000)
    assert after[: len(before) - 1] == before[:-1]


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


def test_cut_point_measures_with_the_size_function() -> None:
    text = "ü" * 100 + "\n" + "ü" * 100
    # 201 characters fit 250 characters, but not 250 bytes: the cut is at the line break.
    assert cut_point(text, 0, 250) == len(text)
    assert cut_point(text, 0, 250, size=utf8_size) == 101
