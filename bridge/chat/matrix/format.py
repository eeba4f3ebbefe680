"""Markdown to Matrix message content: HTML rendering, relations, mentions, splitting long text.

One Matrix event holds at most 65,536 bytes, and an edit (``m.replace``) carries the text
several times (the fallback ``body``, then ``body`` and ``formatted_body`` of ``m.new_content``).
What counts is the event as sent: in an encrypted room nio encrypts ``json.dumps`` with
``ensure_ascii=True`` (every non-ASCII character becomes ``\\uXXXX``: 6 bytes, 12 for an emoji)
and base64 adds a third, so Cyrillic text grows about sixfold. Pieces are cut by that measure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from bridge.chat.common.markdown import split_markdown

HTML_FORMAT = "org.matrix.custom.html"
MEGOLM = "m.megolm.v1.aes-sha2"
# Synapse refuses events over 64 KiB; what it adds around our content (ids, hashes, signatures,
# prev and auth events) takes a few KB of that.
EVENT_LIMIT = 65_536
DEFAULT_EVENT_BYTES = EVENT_LIMIT - 6_000
# Markdown per message, measured as sent (see text_size): the edit carries it three times,
# with HTML around one copy.
DEFAULT_TEXT_BYTES = 13_000


@dataclass(frozen=True)
class Limits:
    # The first cut: the text of one piece, by text_size.
    text_bytes: int = DEFAULT_TEXT_BYTES
    # The largest event a piece travels in (its edit), by event_size: the real limit.
    event_bytes: int = DEFAULT_EVENT_BYTES


def text_size(encrypted: bool) -> Callable[[str], int]:
    """The size of ``text`` inside a JSON event as sent: UTF-8 in the clear; escaped to ASCII
    and then base64 (4/3) when encrypted. Never less than one per character."""
    if encrypted:
        return lambda text: (len(json.dumps(text)) - 2) * 4 // 3 + 1
    return lambda text: len(json.dumps(text, ensure_ascii=False).encode()) - 2


# Placeholders as long as the real values, for measuring an event before it exists.
_SAMPLE_ROOM_ID = "!" + "x" * 40 + ":" + "x" * 60
_SAMPLE_KEY = "x" * 43


def _canonical(obj: dict[str, Any], *, ascii_only: bool = False) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":")).encode()


def _varint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def event_size(
    content: dict[str, Any], *, encrypted: bool, event_type: str = "m.room.message"
) -> int:
    """The size of ``content`` as the homeserver gets it: the content itself, or in an
    encrypted room the ``m.room.encrypted`` content nio makes of it."""
    if not encrypted:
        return len(_canonical(content))
    plaintext = len(
        _canonical(
            {"type": event_type, "content": content, "room_id": _SAMPLE_ROOM_ID}, ascii_only=True
        )
    )
    # A Megolm message: version, message index, AES-CBC ciphertext (padded to 16), MAC (8)
    # and ed25519 signature (64), then unpadded base64.
    ciphertext = (plaintext // 16 + 1) * 16
    message = 1 + 1 + 5 + 1 + _varint_size(ciphertext) + ciphertext + 8 + 64
    envelope: dict[str, Any] = {
        "algorithm": MEGOLM,
        "sender_key": _SAMPLE_KEY,
        "ciphertext": "",
        "session_id": _SAMPLE_KEY,
        "device_id": "x" * 32,
    }
    if "m.relates_to" in content:
        # nio copies the relation to the clear so that servers can aggregate it.
        envelope["m.relates_to"] = content["m.relates_to"]
    return len(_canonical(envelope)) + (message * 4 + 2) // 3


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


# "@room" in a plain ``body`` notifies the whole room (the legacy ``.m.rule.roomnotif`` push
# rule, for servers and clients that predate intentional mentions).
_ROOM_MENTION = re.compile(r"@(?=room\b)", re.IGNORECASE)


def neutralise_room_mention(body: str) -> str:
    """``body`` with every ``@room`` made inert by a zero-width space after the ``@``: it reads
    the same and notifies no one. The HTML (``formatted_body``), which no push rule reads,
    keeps the text exactly."""
    return _ROOM_MENTION.sub("@\u200b", body)


class Renderer:
    """Markdown to ``(body, formatted_body)``; one instance per adapter (the parser is costly).

    The agent's text and everything quoted from users is untrusted: raw HTML in it is escaped,
    never passed through (``formatted_body`` holds only what the Markdown itself makes), and
    ``@room`` in the plain ``body`` is neutralised (:func:`neutralise_room_mention`); whom a
    message notifies is said only by ``m.mentions`` (:func:`with_mentions`), never ``room``.
    """

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
        content: dict[str, Any] = {"msgtype": msgtype, "body": neutralise_room_mention(markdown)}
        html = self.html(markdown)
        if html and html != f"<p>{_escape(markdown)}</p>":
            content["format"] = HTML_FORMAT
            content["formatted_body"] = html
        return content

    def pieces(
        self, markdown: str, limits: Limits | None = None, *, encrypted: bool = False
    ) -> list[dict[str, Any]]:
        """``markdown`` as the contents of as many messages as it needs.

        Each piece's edit (the largest event it will be sent in), measured as sent (encrypted
        where the room is), stays under ``limits.event_bytes``; a piece whose HTML grows too
        much is split again.
        """
        limits = limits or Limits()
        size = text_size(encrypted)
        out: list[dict[str, Any]] = []
        for piece in split_markdown(markdown, limits.text_bytes, size):
            # A cut on whitespace leaves it at the end of the piece: no use in a message.
            piece = piece.rstrip()
            out.extend(self._fitted(piece, limits.text_bytes, limits.event_bytes, encrypted))
        return out

    def _fitted(
        self, piece: str, text_bytes: int, event_bytes: int, encrypted: bool
    ) -> list[dict[str, Any]]:
        content = self.content(piece)
        edit = edit_content(content, _SAMPLE_EVENT_ID)
        if event_size(edit, encrypted=encrypted) <= event_bytes:
            return [content]
        smaller = text_bytes // 2
        size = text_size(encrypted)
        if smaller < 256:
            # Pathological text (every character escaped many times): send it as plain text.
            return [
                {"msgtype": "m.text", "body": neutralise_room_mention(p)}
                for p in split_markdown(piece, 4_096, size)
            ]
        out: list[dict[str, Any]] = []
        for part in split_markdown(piece, smaller, size):
            out.extend(self._fitted(part, smaller, event_bytes, encrypted))
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
    content: dict[str, Any],
    *,
    thread_root: str = "",
    reply_to: str | None = None,
    latest: str | None = None,
) -> dict[str, Any]:
    """Put a new message into a thread or make it a reply.

    In a thread, the reply fallback (for clients without threads) points at the message
    answered, else at the thread's latest message (``latest``), as the spec asks, else at the
    root.
    """
    if thread_root:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": thread_root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": reply_to or latest or thread_root},
        }
    elif reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    return content


def with_mentions(content: dict[str, Any], user_ids: Sequence[str] = ()) -> dict[str, Any]:
    """Intentional mentions (``m.mentions``): whom this message should notify; ``{}`` for
    nobody (continuations, notices), so no client guesses from the text."""
    content["m.mentions"] = {"user_ids": list(user_ids)} if user_ids else {}
    return content


def edit_content(new_content: dict[str, Any], target_event_id: str) -> dict[str, Any]:
    """An ``m.replace`` edit of ``target_event_id`` carrying ``new_content``.

    The outer fallback is the plain text only (no HTML): clients that understand edits ignore
    it, and leaving the HTML out saves a third of the event's size. Its ``m.mentions`` is empty
    (an edit must not notify again); ``m.new_content`` keeps the message's own mentions.
    """
    return {
        "msgtype": new_content.get("msgtype", "m.text"),
        "body": "* " + str(new_content.get("body", "")),
        "m.new_content": new_content,
        "m.mentions": {},
        "m.relates_to": {"rel_type": "m.replace", "event_id": target_event_id},
    }


def content_size(content: dict[str, Any]) -> int:
    """The UTF-8 size of ``content`` as JSON (an unencrypted event's content)."""
    return event_size(content, encrypted=False)


def plain_excerpt(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (for tool lines and notices)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: max(limit - 1, 1)] + "…"
