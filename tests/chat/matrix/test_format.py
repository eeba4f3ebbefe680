"""Markdown rendering and splitting for Matrix messages."""

from __future__ import annotations

import pytest

from bridge.chat.matrix.format import (
    HTML_FORMAT,
    Limits,
    Renderer,
    content_size,
    edit_content,
    split_markdown,
    with_relation,
)


def test_markdown_becomes_matrix_html_with_plain_body() -> None:
    content = Renderer().content("**bold** and ~~gone~~\n\n```python\nx = 1 < 2\n```")
    assert content["body"].startswith("**bold**")
    assert content["format"] == HTML_FORMAT
    html = content["formatted_body"]
    assert "<strong>bold</strong>" in html
    assert "<del>gone</del>" in html
    assert '<code class="language-python">x = 1 &lt; 2' in html


def test_raw_html_is_escaped_and_web_images_become_links() -> None:
    html = Renderer().html('<img src="x" onerror="evil()"> ![cat](https://example.org/c.png)')
    assert "<img" not in html
    assert "&lt;img" in html
    assert '<a href="https://example.org/c.png">cat</a>' in html


def test_plain_text_needs_no_html() -> None:
    assert Renderer().content("just words") == {"msgtype": "m.text", "body": "just words"}


def test_short_text_is_one_piece() -> None:
    assert split_markdown("hello", 100) == ["hello"]
    assert split_markdown("", 100) == [""]


def test_split_prefers_paragraphs_and_keeps_every_word() -> None:
    paragraphs = [f"paragraph {n} " + "word " * 30 + "end." for n in range(12)]
    text = "\n\n".join(paragraphs)
    pieces = split_markdown(text, 500)
    assert len(pieces) > 1
    assert all(len(p.encode()) <= 500 for p in pieces)
    assert "\n\n".join(pieces) == text
    assert all(p.endswith("end.") for p in pieces)


def test_split_counts_bytes_not_characters() -> None:
    text = "ü" * 1000  # 2 bytes each
    pieces = split_markdown(text, 300)
    assert all(len(p.encode()) <= 300 for p in pieces)
    assert "".join(pieces) == text


def test_split_inside_a_code_block_closes_and_reopens_it() -> None:
    code = "\n".join(f"line_{n} = {n}" for n in range(200))
    text = f"intro\n\n```python\n{code}\n```\nafter"
    pieces = split_markdown(text, 400)
    assert len(pieces) > 2
    for piece in pieces[1:-1]:
        assert piece.startswith("```python\n")
        assert piece.endswith("\n```")
    rendered = [Renderer().html(p) for p in pieces]
    assert all(r.count("<pre>") == r.count("</pre>") for r in rendered)
    assert "line_199 = 199" in pieces[-1]


def test_full_pieces_do_not_move_as_the_text_grows() -> None:
    text = " ".join(f"w{n}" for n in range(3000))
    before = split_markdown(text[:9000], 1000)
    after = split_markdown(text, 1000)
    # Every piece that was full before is unchanged once more text follows.
    assert after[: len(before) - 1] == before[:-1]


def test_pieces_fit_an_edit_under_the_content_limit() -> None:
    # Characters that HTML escapes grow a lot: the piece is split again to fit.
    text = "<&>" * 6000
    limits = Limits(text_bytes=10_000, content_bytes=20_000)
    pieces = Renderer().pieces(text, limits)
    assert len(pieces) > 1
    for content in pieces:
        assert content_size(edit_content(content, "$" + "e" * 43)) <= 20_000
    assert "".join(p["body"] for p in pieces) == text


def test_too_small_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        split_markdown("text", 10)


def test_relations_for_threads_replies_and_edits() -> None:
    threaded = with_relation({"body": "x"}, thread_root="$root", reply_to="$msg")
    assert threaded["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$msg"},
    }
    reply = with_relation({"body": "x"}, reply_to="$msg")
    assert reply["m.relates_to"] == {"m.in_reply_to": {"event_id": "$msg"}}
    assert "m.relates_to" not in with_relation({"body": "x"})
    edit = edit_content({"msgtype": "m.text", "body": "new"}, "$orig")
    assert edit["body"] == "* new"
    assert edit["m.new_content"] == {"msgtype": "m.text", "body": "new"}
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$orig"}
