"""Slack event edges found by mutation testing (docs/testing.md): which channels are DMs, files
without a download URL, and message times."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.chat.slack.events import (
    BotIdentity,
    SlackFile,
    attachments,
    is_dm_channel,
    parse_event,
    ts_to_datetime,
)

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


def test_only_im_channels_or_d_channels_without_a_type_are_dms() -> None:
    assert is_dm_channel("D123", "im") and is_dm_channel("D123", None)
    assert not is_dm_channel("C123", None) and not is_dm_channel("D123", "channel")
    event = {"type": "message", "channel": "C123", "user": "U1", "text": "chat", "ts": "1.0"}
    candidate = parse_event(event, BOT)
    assert candidate is not None and not candidate.is_dm and not candidate.mentioned


def test_a_file_without_a_url_is_looked_up_by_id_and_one_without_either_skipped() -> None:
    files = [
        SlackFile(id="F1", name="connect.pdf"),  # Slack Connect: fetched with files.info
        SlackFile(id="", name="lost.txt"),  # nothing to fetch it by
        SlackFile(id="", url_private="https://files.example/2", mimetype=""),
        SlackFile(id="F3", title="Report", url_private_download="https://files.example/3"),
    ]
    refs = attachments(files)
    assert [(r.name, r.mimetype, r.source) for r in refs] == [
        ("connect.pdf", "application/octet-stream", "files.info:F1"),
        ("file", "application/octet-stream", "https://files.example/2"),
        ("Report", "application/octet-stream", "https://files.example/3"),
    ]


def test_a_message_time_is_in_utc() -> None:
    when = ts_to_datetime("1700000000.000100")
    assert when == datetime(2023, 11, 14, 22, 13, 20, 100, tzinfo=UTC)
    assert when is not None and when.utcoffset() is not None
    assert ts_to_datetime("not a time") is None
