"""Files: incoming attachments, size-capped downloads with the bot token, uploads."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.chat.slack.files import FileHosts, size_label
from bridge.core.events import AttachmentError, AttachmentRef, ThreadRef
from tests.chat.slack.conftest import CHANNEL, RecordingInbound, message_event, running_adapter
from tests.chat.slack.fake_slack import BOT_USER, FakeSlack
from tests.doubles import fetch_into, outgoing

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40


async def test_image_share_becomes_an_attachment_that_downloads(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    file = fake_slack.add_file(PNG, "screen shot.png", "image/png")
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        event = message_event(
            f"<@{BOT_USER}> what is wrong here?",
            ts=fake_slack.next_ts(),
            subtype="file_share",
            files=[file],
        )
        await fake_slack.wait_ack(await fake_slack.push_event(event))
        [message] = inbound.submitted
        [ref] = message.attachments
        size = await fetch_into(adapter, ref, tmp_path / "saved" / "shot.png", 1_000_000)

    assert message.text == "what is wrong here?"
    assert ref == AttachmentRef(
        name="screen shot.png",
        mimetype="image/png",
        size=len(PNG),
        source=file["url_private_download"],
    )
    assert ref.is_image
    assert size == len(PNG)
    assert (tmp_path / "saved" / "shot.png").read_bytes() == PNG


async def test_too_big_files_are_refused(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    file = fake_slack.add_file(PNG, "big.png", "image/png")
    dest = tmp_path / "big.png"
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        declared = AttachmentRef(name="big.png", size=len(PNG), source=file["url_private_download"])
        with pytest.raises(AttachmentError, match="larger than"):
            await fetch_into(adapter, declared, dest, 1024)
        # A size Slack did not declare (or got wrong): reading stops past the cap.
        undeclared = declared.model_copy(update={"size": None})
        with pytest.raises(AttachmentError, match="larger than"):
            await fetch_into(adapter, undeclared, dest, 1024)

    assert not dest.exists()


async def test_an_html_answer_means_a_missing_scope(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    file = fake_slack.add_file(PNG, "x.png", "image/png", html_instead=True)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        ref = AttachmentRef(name="x.png", source=file["url_private_download"])
        with pytest.raises(AttachmentError, match="files:read"):
            await fetch_into(adapter, ref, tmp_path / "x.png", 1_000_000)


async def test_a_slack_connect_file_is_fetched_through_files_info(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    file = fake_slack.add_file(PNG, "shared.png", "image/png", connect=True)
    assert "url_private" not in file
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        event = message_event(
            f"<@{BOT_USER}> look", ts=fake_slack.next_ts(), subtype="file_share", files=[file]
        )
        await fake_slack.wait_ack(await fake_slack.push_event(event))
        [message] = inbound.submitted
        [ref] = message.attachments
        size = await fetch_into(adapter, ref, tmp_path / "shared.png", 1_000_000)

    assert [c.args.get("file") for c in fake_slack.ok_calls("files.info")] == [file["id"]]
    assert size == len(PNG)
    assert (tmp_path / "shared.png").read_bytes() == PNG


async def test_a_file_slack_does_not_describe_is_a_clear_error(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        ref = AttachmentRef(name="F0GONE", source="files.info:F0GONE")
        with pytest.raises(AttachmentError, match="file_not_found"):
            await fetch_into(adapter, ref, tmp_path / "gone", 1_000_000)


async def test_a_real_html_file_is_not_taken_for_a_sign_in_page(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    page = b"<!DOCTYPE html><html><body>report</body></html>"
    file = fake_slack.add_file(page, "report.html", "text/html")
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        ref = AttachmentRef(
            name="report.html", mimetype="text/html", source=file["url_private_download"]
        )
        size = await fetch_into(adapter, ref, tmp_path / "report.html", 1_000_000)
    assert size == len(page)
    assert (tmp_path / "report.html").read_bytes() == page


async def test_the_token_survives_slacks_own_redirects(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    file = fake_slack.add_file(PNG, "moved.png", "image/png", redirect="slack")
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        ref = AttachmentRef(name="moved.png", source=file["url_private_download"])
        size = await fetch_into(adapter, ref, tmp_path / "moved.png", 1_000_000)
    assert size == len(PNG)
    assert [d.authorized for d in fake_slack.downloads] == [True, True]
    assert fake_slack.downloads[1].host == fake_slack.files_url.removeprefix("http://")


async def test_a_redirect_off_slack_never_carries_the_token(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    file = fake_slack.add_file(PNG, "away.png", "image/png", redirect="elsewhere")
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        ref = AttachmentRef(name="away.png", source=file["url_private_download"])
        with pytest.raises(AttachmentError):
            await fetch_into(adapter, ref, tmp_path / "away.png", 1_000_000)
    assert [(d.host.split(":")[0], d.authorized) for d in fake_slack.downloads] == [
        ("127.0.0.1", True),
        ("localhost", False),
    ]


async def test_the_token_goes_only_to_slack_hosts(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        ref = AttachmentRef(name="x.png", source="https://files.evil.example/x.png")
        with pytest.raises(AttachmentError, match="not a Slack file URL"):
            await fetch_into(adapter, ref, tmp_path / "x.png", 1_000_000)

    hosts = FileHosts("https://slack.com/api/")
    assert hosts.trusts("https://files.slack.com/files-pri/T1-F1/download/a.png")
    assert not hosts.trusts("http://files.slack.com/a.png")
    assert not hosts.trusts("https://slack.com.evil.example/a.png")


async def test_post_file_uploads_into_the_thread(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    path = tmp_path / "report.txt"
    path.write_bytes(b"all tests passed\n")
    root = fake_slack.next_ts()
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        fake_slack.fail("files.completeUploadExternal", status=500, times=1)
        await adapter.post_file(
            ThreadRef(platform="slack", channel=CHANNEL, thread=root), outgoing(path), "Test report"
        )

    [upload] = [u for u in fake_slack.uploads.values() if u.get("title")]
    assert upload["data"] == b"all tests passed\n"
    assert upload["filename"] == "report.txt"
    assert upload["title"] == "Test report"
    assert (upload["channel"], upload["thread_ts"]) == (CHANNEL, root)
    assert fake_slack.ok_calls("files.getUploadURLExternal")
    assert [m.files for m in fake_slack.thread(CHANNEL, root)] == [
        [{"id": f, "title": "Test report"} for f, u in fake_slack.uploads.items() if u is upload]
    ]


def test_size_labels() -> None:
    assert size_label(25 * 1024 * 1024) == "25 MB"
    assert size_label(1536 * 1024) == "1.5 MB"
