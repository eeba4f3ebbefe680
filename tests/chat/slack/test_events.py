"""Which Slack message events count, their thread, and their text for the agent."""

from __future__ import annotations

from typing import Any

from bridge.chat.slack.events import BotIdentity, SlackFile, attachments, parse_event, to_plain_text
from bridge.core.events import ThreadRef

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


def event(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "message",
        "channel": "C1",
        "channel_type": "channel",
        "user": "U1",
        "text": "hi",
        "ts": "10.1",
    }
    base.update(fields)
    return base


def test_top_level_and_threaded_messages() -> None:
    top = parse_event(event(), BOT)
    assert top is not None
    assert top.thread == ThreadRef(platform="slack", channel="C1", thread="10.1")
    assert not top.in_thread and not top.mentioned and not top.is_dm
    reply = parse_event(event(ts="11.1", thread_ts="10.1"), BOT)
    assert reply is not None
    assert reply.thread.thread == "10.1" and reply.in_thread
    assert reply.event_id == "C1:11.1"
    # A thread root carries thread_ts equal to its own ts: still top level.
    root = parse_event(event(thread_ts="10.1"), BOT)
    assert root is not None and not root.in_thread


def test_mentions_and_dms() -> None:
    mention = parse_event(event(type="app_mention", text="<@UBOT> go"), BOT)
    assert mention is not None and mention.mentioned and mention.text == "go"
    in_text = parse_event(event(text="hey <@UBOT|agy>, go"), BOT)
    assert in_text is not None and in_text.mentioned and in_text.text == "hey , go"
    dm = parse_event(event(channel="D1", channel_type="im"), BOT)
    assert dm is not None and dm.is_dm
    # app_mention carries no channel_type: a D channel id still is a DM.
    assert (candidate := parse_event(event(channel="D2", channel_type=None), BOT)) is not None
    assert candidate.is_dm


def test_ignored_events() -> None:
    ignored = [
        event(user="UBOT"),
        event(bot_id="BBOT", user="USOMEONE"),
        event(subtype="bot_message", bot_id="BOTHER"),
        event(subtype="message_changed", user=None),
        event(subtype="message_deleted"),
        event(subtype="channel_join"),
        event(user=None),
        {"type": "message", "channel": "C1"},  # no ts
    ]
    assert [parse_event(e, BOT) for e in ignored] == [None] * len(ignored)
    assert parse_event(event(subtype="file_share"), BOT) is not None
    assert parse_event(event(subtype="thread_broadcast", thread_ts="9.1"), BOT) is not None


def test_plain_text_for_the_agent() -> None:
    text = (
        "<@UBOT> ask <@U2|bob> in <#C9|dev> about <https://example.com/x|the doc>, "
        "<https://example.com> and <mailto:a@b.c|a@b.c>; 1 &lt; 2 &amp;&amp; <!here>"
    )
    assert to_plain_text(text, "UBOT") == (
        "ask @bob in #dev about the doc (https://example.com/x), https://example.com "
        "and a@b.c; 1 < 2 && @here"
    )
    # Escaped markup stays text: "&lt;@UBOT&gt;" is not a mention.
    assert to_plain_text("&lt;@UBOT&gt;", "UBOT") == "<@UBOT>"


def test_attachments_need_a_url() -> None:
    files = [
        SlackFile(id="F1", name="a.png", mimetype="image/png", size=3, url_private_download="u1"),
        SlackFile(id="F2", title="Notes", url_private="u2"),
        SlackFile(id="F3", name="connect.pdf"),  # Slack Connect: no URL for the bot
    ]
    refs = attachments(files)
    assert [(r.name, r.source, r.size) for r in refs] == [("a.png", "u1", 3), ("Notes", "u2", None)]
    assert refs[1].mimetype == "application/octet-stream"
