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


def test_other_apps_are_dropped_unless_listed() -> None:
    # Apps posting with a bot token send a user, a bot_id and an app_id, and no subtype.
    other = event(
        user="UCIBOT",
        bot_id="BCI",
        app_id="ACI",
        bot_profile={"id": "BCI", "app_id": "ACI", "name": "ci"},
        text="<@UBOT> deploy",
    )
    assert parse_event(other, BOT) is None
    assert parse_event(event(app_id="AWORKFLOW"), BOT) is None
    listed = parse_event(other, BOT, allowed_bots=frozenset({"ACI"}))
    assert listed is not None and listed.user == "UCIBOT"
    assert parse_event(other, BOT, allowed_bots=frozenset({"BCI"})) is not None
    # The bot's own posts never count, listed or not.
    mine = event(user="UBOT", bot_id="BBOT", app_id="AME")
    assert parse_event(mine, BOT, allowed_bots=frozenset({"BBOT", "AME"})) is None


def test_dms_of_the_agent_view_and_the_assistant_view() -> None:
    # Agent view (new apps): a person's message sits at the top level of the DM.
    top = parse_event(event(channel="D1", channel_type="im", ts="20.1"), BOT)
    assert top is not None and top.is_dm and top.thread.thread == "20.1" and not top.in_thread
    # Assistant view (older apps): messages hang under the app's assistant_app_thread root,
    # which itself is not a person writing.
    root = event(channel="D1", channel_type="im", ts="19.1", subtype="assistant_app_thread")
    assert parse_event({**root, "user": "UBOT", "bot_id": "BBOT"}, BOT) is None
    under = parse_event(event(channel="D1", channel_type="im", ts="21.1", thread_ts="19.1"), BOT)
    assert under is not None and under.thread.thread == "19.1" and under.in_thread


def test_the_authors_organisation_for_stream_recipients() -> None:
    plain = parse_event(event(team="T1"), BOT)
    assert plain is not None and plain.org == "T1"
    # Slack Connect: the author's own team, not the channel's.
    shared = parse_event(event(team="T1", user_team="T2"), BOT)
    assert shared is not None and shared.org == "T2"
    # Enterprise Grid without a team on the event: the enterprise id.
    grid = parse_event(event(), BOT, enterprise_id="E1")
    assert grid is not None and grid.org == "E1"


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


def test_attachments_without_a_url_are_looked_up_later() -> None:
    files = [
        SlackFile(id="F1", name="a.png", mimetype="image/png", size=3, url_private_download="u1"),
        SlackFile(id="F2", title="Notes", url_private="u2"),
        # Slack Connect: no URL and no name in the event, only a hint to ask files.info.
        SlackFile(id="F3", file_access="check_file_info"),
    ]
    refs = attachments(files)
    assert [(r.name, r.source, r.size) for r in refs] == [
        ("a.png", "u1", 3),
        ("Notes", "u2", None),
        ("F3", "files.info:F3", None),
    ]
    assert refs[1].mimetype == "application/octet-stream"
