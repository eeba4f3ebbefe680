"""What a Matrix client shows of the bot's replies: each message with its newest edit.

Shared by the reply tests and the Matrix bench.
"""

from __future__ import annotations

from typing import Any

from nio.events import Event


def content(event: Event) -> dict[str, Any]:
    value = event.source.get("content", {})
    return value if isinstance(value, dict) else {}


def is_edit(event: Event) -> bool:
    return content(event).get("m.relates_to", {}).get("rel_type") == "m.replace"


def shown_messages(events: list[Event], sender: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event id, content shown)`` of ``sender``'s messages, oldest first, edits applied and
    redacted ones left out."""
    shown: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for event in events:
        if getattr(event, "sender", None) != sender:
            continue
        body = content(event)
        if event.source.get("type") == "m.room.redaction":
            shown.pop(str(event.source.get("redacts", "")), None)
        elif is_edit(event):
            target = body["m.relates_to"]["event_id"]
            if target in shown and isinstance(body.get("m.new_content"), dict):
                shown[target] = body["m.new_content"]
        elif "body" in body:
            shown[event.event_id] = body
            order.append(event.event_id)
    return [(event_id, shown[event_id]) for event_id in order if event_id in shown]


def shown_text(events: list[Event], sender: str) -> str:
    return "\n".join(str(c.get("body", "")) for _, c in shown_messages(events, sender))


def squeezed(text: str) -> str:
    """``text`` without whitespace: splitting a message may move it, never the words."""
    return "".join(text.split())
