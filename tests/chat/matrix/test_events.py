"""nio events to neutral messages: threads, reply fallbacks, media, stop reactions."""

from __future__ import annotations

import json
from typing import Any

from nio import MatrixRoom
from nio.events import Event

from bridge.chat.matrix.events import (
    is_stop_key,
    stop_target,
    strip_reply_fallback,
    thread_ref,
    to_incoming,
)
from bridge.chat.matrix.media import attachment_ref
from bridge.core.events import ThreadRef

ROOM_ID = "!room:example.org"


def _event(content: dict[str, Any], kind: str = "m.room.message", **extra: Any) -> Event:
    source = {
        "type": kind,
        "event_id": "$ev",
        "sender": "@alice:example.org",
        "origin_server_ts": 1_700_000_000_000,
        "content": content,
        **extra,
    }
    return Event.parse_event(source)


def _room() -> MatrixRoom:
    room = MatrixRoom(ROOM_ID, "@bot:example.org")
    room.add_member("@alice:example.org", "Alice", None)
    return room


def test_text_message_becomes_incoming_message() -> None:
    message = to_incoming(_event({"msgtype": "m.text", "body": "hi"}), _room(), threads=False)
    assert message is not None
    assert message.thread == ThreadRef(platform="matrix", channel=ROOM_ID)
    assert message.event_id == message.message_id == "$ev"
    assert message.author.id == "@alice:example.org"
    assert message.author.display_name == "Alice"
    assert message.text == "hi"
    assert message.sent_at is not None and message.sent_at.year == 2023


def test_thread_only_when_threads_are_on() -> None:
    content = {"m.relates_to": {"rel_type": "m.thread", "event_id": "$root"}}
    assert thread_ref(ROOM_ID, content, threads=True).thread == "$root"
    assert thread_ref(ROOM_ID, content, threads=False).thread == ""
    assert thread_ref(ROOM_ID, {}, threads=True).thread == ""


def test_edits_notices_and_other_events_start_no_turn() -> None:
    edit = {
        "msgtype": "m.text",
        "body": "* fixed",
        "m.new_content": {"msgtype": "m.text", "body": "fixed"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$old"},
    }
    room = _room()
    assert to_incoming(_event(edit), room, threads=False) is None
    assert to_incoming(_event({"msgtype": "m.notice", "body": "bot"}), room, threads=False) is None
    topic = _event({"topic": "x"}, kind="m.room.topic", state_key="")
    assert to_incoming(topic, room, threads=False) is None


def test_reply_fallback_is_stripped() -> None:
    body = "> <@bob:example.org> earlier words\n> more\n\nmy answer"
    assert strip_reply_fallback(body) == "my answer"
    assert (
        strip_reply_fallback("> a quote without a blank line") == "> a quote without a blank line"
    )
    content = {
        "msgtype": "m.text",
        "body": body,
        "m.relates_to": {"m.in_reply_to": {"event_id": "$x"}},
    }
    message = to_incoming(_event(content), _room(), threads=False)
    assert message is not None and message.text == "my answer"


def test_emote_keeps_its_action_form() -> None:
    message = to_incoming(_event({"msgtype": "m.emote", "body": "waves"}), _room(), threads=False)
    assert message is not None and message.text == "* waves"


def test_plain_file_becomes_attachment_with_caption() -> None:
    content = {
        "msgtype": "m.file",
        "body": "see the log",
        "filename": "build.log",
        "url": "mxc://example.org/abc",
        "info": {"mimetype": "text/plain", "size": 42},
    }
    message = to_incoming(_event(content), _room(), threads=False)
    assert message is not None
    assert message.text == "see the log"
    [ref] = message.attachments
    assert (ref.name, ref.mimetype, ref.size) == ("build.log", "text/plain", 42)
    assert json.loads(ref.source) == {"url": "mxc://example.org/abc"}


def test_encrypted_file_keeps_its_keys_in_the_source() -> None:
    key = {"kty": "oct", "alg": "A256CTR", "k": "secretkey", "key_ops": ["decrypt"], "ext": True}
    content = {
        "msgtype": "m.image",
        "body": "photo.jpg",
        "file": {
            "url": "mxc://example.org/enc",
            "key": key,
            "iv": "iv==",
            "hashes": {"sha256": "hash"},
            "v": "v2",
        },
        "info": {"mimetype": "image/jpeg"},
    }
    ref = attachment_ref(content)
    assert ref is not None and ref.is_image and ref.size is None
    source = json.loads(ref.source)
    assert source["url"] == "mxc://example.org/enc"
    assert source["file"]["key"]["k"] == "secretkey"
    assert source["file"]["hashes"] == {"sha256": "hash"}


def test_media_without_a_matrix_url_is_ignored() -> None:
    assert attachment_ref({"msgtype": "m.file", "body": "x", "url": "https://evil"}) is None


def test_stop_reaction() -> None:
    assert is_stop_key("🛑") and is_stop_key("🛑\ufe0f")
    assert not is_stop_key("👍")
    reaction = _event(
        {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$reply", "key": "🛑"}},
        kind="m.reaction",
    )
    assert stop_target(reaction) == "$reply"
    thumbs = _event(
        {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$reply", "key": "👍"}},
        kind="m.reaction",
    )
    assert stop_target(thumbs) is None
