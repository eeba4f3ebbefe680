"""Markdown rendering and splitting for Matrix messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
import vodozemac

from bridge.chat.matrix.format import (
    DEFAULT_EVENT_BYTES,
    EVENT_LIMIT,
    HTML_FORMAT,
    Limits,
    Renderer,
    content_size,
    edit_content,
    event_size,
    with_relation,
)
from bridge.core.approvals.texts import request_text, result_text
from bridge.core.events import Author
from bridge.core.store.rows import ApprovalState


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


def test_pieces_fit_an_edit_under_the_content_limit() -> None:
    # Characters that HTML escapes grow a lot: the piece is split again to fit.
    text = "<&>" * 6000
    limits = Limits(text_bytes=10_000, event_bytes=20_000)
    pieces = Renderer().pieces(text, limits)
    assert len(pieces) > 1
    for content in pieces:
        assert content_size(edit_content(content, "$" + "e" * 43)) <= 20_000
    assert "".join(p["body"] for p in pieces) == text


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
    # An edit notifies nobody again.
    assert edit["m.mentions"] == {}
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$orig"}


def _megolm_envelope(content: dict[str, Any]) -> int:
    """The m.room.encrypted content nio sends for ``content``, encrypted for real."""
    session = vodozemac.GroupSession()
    plaintext = json.dumps(
        {"content": content, "type": "m.room.message", "room_id": "!" + "r" * 17 + ":example.org"},
        separators=(",", ":"),
    )
    envelope = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "sender_key": "k" * 43,
        "ciphertext": session.encrypt(plaintext.encode()).to_base64(),
        "session_id": session.session_id,
        "device_id": "ABCDEFGHIJ",
        "m.relates_to": content["m.relates_to"],
    }
    return len(json.dumps(envelope, separators=(",", ":")).encode())


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii words " * 4_000,
        "Длинный ответ на русском языке, с **выделением** и `кодом`. " * 1_500,
        "长的中文回答，包含表情符号 🎉🚀 和更多文字。" * 2_000,
    ],
)
def test_encrypted_pieces_are_measured_as_sent(text: str) -> None:
    renderer = Renderer()
    pieces = renderer.pieces(text, encrypted=True)
    assert len(pieces) > 1
    for content in pieces:
        edit = edit_content(content, "$" + "e" * 43)
        estimate = event_size(edit, encrypted=True)
        actual = _megolm_envelope(edit)
        # The estimate never undercounts, and is close.
        assert actual <= estimate <= actual + 300
        assert estimate <= DEFAULT_EVENT_BYTES < EVENT_LIMIT
    assert "".join(p["body"] for p in pieces).replace("\n", "").replace(" ", "") == text.replace(
        " ", ""
    )


def test_a_requesters_name_or_a_reason_makes_no_link_in_an_approval_request() -> None:
    # Display names and deny reasons are the users' own words, not the bridge's Markdown.
    sly = Author(id="@eve:x", display_name="[Alice](https://evil.example) <https://evil.example>")
    asked = request_text(tool="run_command", summary="ls", preview="", requested_by=sly, timeout=60)
    decided = result_text("ls", ApprovalState.DENIED, sly, "see [docs](https://evil.example)")
    for text in (asked, decided):
        html = Renderer().html(text)
        assert "<a " not in html and "href" not in html, html
        assert "Alice" in html and "evil.example" in html  # still shown, as text


def test_an_approval_request_shows_bold_in_matrix_not_asterisks() -> None:
    asked = request_text(tool="run_command", summary="ls", preview="", requested_by=None, timeout=9)
    html = Renderer().content(asked)["formatted_body"]
    assert "<strong>Approval needed</strong>" in html and "*" not in html
