"""Markdown to Matrix message content: HTML rendering, relations, and splitting long text.

One Matrix event holds at most 65,536 bytes, and an edit (``m.replace``) carries the text
several times (the fallback ``body``, then ``body`` and ``formatted_body`` of ``m.new_content``);
Megolm encryption adds another third. So long answers are split into several messages whose
edit content stays well below the limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

HTML_FORMAT = "org.matrix.custom.html"
# Markdown text per message, in UTF-8 bytes: 3 copies plus HTML overhead stay near 40 KB,
# and encryption (base64, about 4/3) keeps the event under 64 KiB.
DEFAULT_TEXT_BYTES = 10_000
# The serialized content of an edit must stay below this (before encryption).
DEFAULT_CONTENT_BYTES = 42_000
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Limits:
    text_bytes: int = DEFAULT_TEXT_BYTES
    content_bytes: int = DEFAULT_CONTENT_BYTES


def _render_image_as_link(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Matrix clients show only mxc: images inline; a web image becomes a plain link.
    token = tokens[idx]
    src = escapeHtml(str(token.attrGet("src") or ""))
    alt = escapeHtml(token.content) or src
    return f'<a href="{src}">{alt}</a>'


def _markdown() -> MarkdownIt:
    # Raw HTML in the agent's text is escaped, never passed through: the agent may quote
    # untrusted content. Soft line breaks become <br>, as chat users expect.
    md = MarkdownIt("js-default", {"html": False, "breaks": True, "linkify": False})
    md.add_render_rule("image", _render_image_as_link)
    return md


class Renderer:
    """Markdown to ``(body, formatted_body)``; one instance per adapter (the parser is costly)."""

    def __init__(self) -> None:
        self._md = _markdown()

    def html(self, markdown: str) -> str:
        tokens = self._md.parse(markdown)
        for token in _walk(tokens):
            # <s> is not in Matrix's list of suggested tags; <del> is.
            if token.tag == "s":
                token.tag = "del"
        return self._md.renderer.render(tokens, self._md.options, {}).strip()

    def content(self, markdown: str, *, msgtype: str = "m.text") -> dict[str, Any]:
        """A message content with a plain ``body`` (the Markdown itself) and HTML."""
        content: dict[str, Any] = {"msgtype": msgtype, "body": markdown}
        html = self.html(markdown)
        if html and html != f"<p>{_escape(markdown)}</p>":
            content["format"] = HTML_FORMAT
            content["formatted_body"] = html
        return content

    def pieces(self, markdown: str, limits: Limits | None = None) -> list[dict[str, Any]]:
        """``markdown`` as the contents of as many messages as it needs.

        Each piece's edit (the largest event it will be sent in) stays under
        ``limits.content_bytes``; a piece whose HTML grows too much is split again.
        """
        limits = limits or Limits()
        out: list[dict[str, Any]] = []
        for piece in split_markdown(markdown, limits.text_bytes):
            out.extend(self._fitted(piece, limits.text_bytes, limits.content_bytes))
        return out

    def _fitted(self, piece: str, text_bytes: int, content_bytes: int) -> list[dict[str, Any]]:
        content = self.content(piece)
        if content_size(edit_content(content, _SAMPLE_EVENT_ID)) <= content_bytes:
            return [content]
        smaller = text_bytes // 2
        if smaller < 256:
            # Pathological text (every character escaped many times): send it as plain text.
            return [{"msgtype": "m.text", "body": p} for p in split_markdown(piece, 4_096)]
        out: list[dict[str, Any]] = []
        for part in split_markdown(piece, smaller):
            out.extend(self._fitted(part, smaller, content_bytes))
        return out


# As long as a real event id, for measuring an edit before the event exists.
_SAMPLE_EVENT_ID = "$" + "x" * 43


def _walk(tokens: Sequence[Token]) -> list[Token]:
    out: list[Token] = []
    for token in tokens:
        out.append(token)
        if token.children:
            out.extend(_walk(token.children))
    return out


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def with_relation(
    content: dict[str, Any], *, thread_root: str = "", reply_to: str | None = None
) -> dict[str, Any]:
    """Put a new message into a thread (with the fallback reply) or make it a reply."""
    if thread_root:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": thread_root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": reply_to or thread_root},
        }
    elif reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    return content


def edit_content(new_content: dict[str, Any], target_event_id: str) -> dict[str, Any]:
    """An ``m.replace`` edit of ``target_event_id`` carrying ``new_content``.

    The outer fallback is the plain text only (no HTML): clients that understand edits ignore
    it, and leaving the HTML out saves a third of the event's size.
    """
    return {
        "msgtype": new_content.get("msgtype", "m.text"),
        "body": "* " + str(new_content.get("body", "")),
        "m.new_content": new_content,
        "m.relates_to": {"rel_type": "m.replace", "event_id": target_event_id},
    }


def content_size(content: dict[str, Any]) -> int:
    return len(json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode())


def _fence_state(text: str) -> tuple[str, str] | None:
    """Whether ``text`` ends inside a fenced code block: ``(marker, info)`` of it, or None."""
    state: tuple[str, str] | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        marker, info = match.group(1), match.group(2)
        if state is None:
            state = (marker, info.strip())
        elif marker[0] == state[0][0] and len(marker) >= len(state[0]) and not info.strip():
            state = None
    return state


def _prefix_within(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that takes at most ``max_bytes`` in UTF-8."""
    return text.encode()[:max_bytes].decode(errors="ignore")


def _cut_point(window: str) -> tuple[int, int]:
    """Where to cut a window of text, and how long the separator there is.

    A paragraph break, else a line break, else a space, else the end of the window.
    """
    for separator in ("\n\n", "\n", " "):
        index = window.rfind(separator)
        # Not too early: a piece that is mostly empty would only add messages.
        if index > len(window) // 3:
            return index, len(separator)
    return len(window), 0


def split_markdown(text: str, max_bytes: int = DEFAULT_TEXT_BYTES) -> list[str]:
    """Split Markdown into pieces of at most ``max_bytes`` (UTF-8), at natural breaks.

    A cut inside a fenced code block closes the fence in one piece and reopens it (with its
    language) in the next. Greedy: a piece depends only on the text from its start to
    ``max_bytes`` later, so the pieces of a growing text do not move once they are full.
    """
    if max_bytes < 64:
        raise ValueError("max_bytes is too small to split Markdown sensibly")
    pieces: list[str] = []
    rest = text
    # Room for a closing fence line added to a piece that ends inside a code block.
    budget = max_bytes - 24
    while len(rest.encode()) > max_bytes:
        cut, separator = _cut_point(_prefix_within(rest, budget))
        piece, rest = rest[:cut], rest[cut + separator :]
        open_fence = _fence_state(piece)
        if open_fence is not None:
            piece = piece.rstrip("\n") + "\n" + open_fence[0]
            rest = f"{open_fence[0]}{open_fence[1]}\n{rest}"
        pieces.append(piece.rstrip())
    if rest.strip() or not pieces:
        pieces.append(rest)
    return pieces


def plain_excerpt(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (for tool lines and notices)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: max(limit - 1, 1)] + "…"
