"""Slack's edit and deletion events, read into one change each (the real payload shapes)."""

from __future__ import annotations

from bridge.chat.slack.changes import is_change, parse_change
from bridge.chat.slack.events import BotIdentity

BOT = BotIdentity(user_id="UBOT0001", bot_id="BBOT0001", team_id="T1")
CHANNEL = "C0GENERAL"


def changed(text: str, *, user: str = "UALICE01", thread_ts: str | None = "1.0") -> dict:
    message = {"type": "message", "user": user, "text": text, "ts": "2.0",
               "edited": {"user": user, "ts": "3.0"}}  # fmt: skip
    if thread_ts:
        message["thread_ts"] = thread_ts
    return {
        "type": "message",
        "subtype": "message_changed",
        "channel": CHANNEL,
        "hidden": True,
        "ts": "3.0",
        "message": message,
        "previous_message": {**message, "text": "old", "edited": None},
    }


def test_an_edit_and_its_app_mention_are_one_change() -> None:
    edit = parse_change(changed("<@UBOT0001> new words"), BOT)
    assert edit is not None and edit.text == "new words" and edit.ts == "2.0"
    assert edit.thread.thread == "1.0" and edit.user == "UALICE01"
    mention = {"type": "app_mention", "channel": CHANNEL, "user": "UALICE01",
               "text": "<@UBOT0001> new words", "ts": "2.0", "thread_ts": "1.0",
               "edited": {"user": "UALICE01", "ts": "3.0"}}  # fmt: skip
    again = parse_change(mention, BOT)
    assert again is not None and again.change_id == edit.change_id
    assert is_change(mention) and is_change(changed("x"))


def test_a_deletion_names_the_message_and_its_thread() -> None:
    event = {
        "type": "message",
        "subtype": "message_deleted",
        "channel": CHANNEL,
        "hidden": True,
        "ts": "4.0",
        "deleted_ts": "2.0",
        "previous_message": {"type": "message", "user": "UALICE01", "text": "drop it",
                             "ts": "2.0", "thread_ts": "1.0"},
    }  # fmt: skip
    deletion = parse_change(event, BOT)
    assert deletion is not None and deletion.text is None and deletion.ts == "2.0"
    assert deletion.thread.thread == "1.0" and deletion.change_id == f"{CHANNEL}:2.0:deleted"


def test_what_is_no_change_of_a_persons_message_is_none() -> None:
    # An unfurl: Slack says "changed" without an edit.
    unfurl = changed("see https://example.org")
    del unfurl["message"]["edited"]
    assert parse_change(unfurl, BOT) is None
    # The bot's own messages, and a top-level message edited (its own thread).
    assert parse_change(changed("x", user="UBOT0001"), BOT) is None
    top = parse_change(changed("fixed", thread_ts=None), BOT)
    assert top is not None and top.thread.thread == "2.0"
    assert parse_change({"type": "message", "subtype": "message_changed"}, BOT) is None
    assert not is_change({"type": "message", "text": "hello"})
