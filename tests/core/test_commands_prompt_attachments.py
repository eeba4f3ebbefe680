from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from bridge.core.attachments import safe_name, save_attachments
from bridge.core.commands import parse_command
from bridge.core.events import AttachmentError, AttachmentRef, Author
from bridge.core.prompt import injected_text, message_text
from bridge.core.store.rows import StoredMessage


@pytest.mark.parametrize(
    ("text", "name", "arg"),
    [
        ("!stop", "stop", ""),
        ("  !MODEL gemini-x ", "model", "gemini-x"),
        ("!new", "new", ""),
        ("!status", "status", ""),
        ("!help", "help", ""),
        ("!frobnicate now", "unknown", "now"),
    ],
)
def test_commands(text: str, name: str, arg: str) -> None:
    command = parse_command(text)
    assert command is not None and (command.name, command.arg) == (name, arg)


@pytest.mark.parametrize("text", ["hello", "! spaced", "!!!", "!?", "fix it!", ""])
def test_not_commands(text: str) -> None:
    assert parse_command(text) is None


def _stored(text: str, refs: list[AttachmentRef], saved: list[str] | None) -> StoredMessage:
    return StoredMessage(
        id=1,
        thread_key="k",
        message_id="m",
        author=Author(id="@alice:example.org", display_name="Alice"),
        text=text,
        attachments=refs,
        saved=saved,
        state="pending",
        received_at=0.0,
    )


def test_message_names_author_and_attachments() -> None:
    refs = [
        AttachmentRef(name="shot.png", mimetype="image/png", size=10, source="s"),
        AttachmentRef(name="big.zip", source="s"),
    ]
    text = message_text(_stored("look", refs, ["/data/a/shot.png", "it is too large"]))
    assert text.startswith("Alice (@alice:example.org): look")
    assert "[image attached: /data/a/shot.png (image/png, 10 bytes)" in text
    assert "[file 'big.zip' could not be saved: it is too large]" in text
    assert "while you were working" in injected_text(_stored("x", [], None))


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("../../x", "x"),
        ("..", "file"),
        ("/etc/passwd", "passwd"),
        ("a\\b\\c.txt", "c.txt"),
        (".bashrc", "bashrc"),
        ("my photo (1).png", "my_photo_1_.png"),
        ("x" * 300 + ".png", "x" * 76 + ".png"),
    ],
)
def test_safe_names(raw: str, safe: str) -> None:
    assert safe_name(raw) == safe


class _Fetcher:
    def __init__(self, payloads: dict[str, bytes | Exception]):
        self.payloads = payloads

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        data = self.payloads[ref.source]
        if isinstance(data, Exception):
            raise data
        if len(data) > max_bytes:
            raise AttachmentError("too large")
        out.write(data)
        return len(data)


@pytest.mark.anyio
async def test_save_attachments_stays_inside_and_reports_problems(tmp_path: Path) -> None:
    refs = [
        AttachmentRef(name="../../evil.sh", source="ok"),
        AttachmentRef(name="empty.txt", source="empty"),
        AttachmentRef(name="huge.bin", size=10_000, source="ok"),
        AttachmentRef(name="gone.txt", source="err"),
    ]
    fetcher = _Fetcher({"ok": b"data", "empty": b"", "err": AttachmentError("403 from server")})
    folder = tmp_path / "att"
    results = await save_attachments(fetcher, refs, folder, "000001", 1000)  # type: ignore[arg-type]
    saved = Path(results[0])
    assert saved.parent == folder and saved.read_bytes() == b"data"
    assert saved.name == "000001-0-evil.sh"
    assert results[1] == "the file is empty"
    assert "over the 1,000-byte limit" in results[2]
    assert results[3] == "403 from server"
    assert sorted(p.name for p in folder.iterdir()) == ["000001-0-evil.sh"]


@pytest.mark.anyio
async def test_save_attachments_never_writes_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    session = tmp_path / "session"
    session.mkdir()
    (session / "att").symlink_to(outside)
    fetcher = _Fetcher({"ok": b"data"})
    refs = [AttachmentRef(name="a.txt", source="ok")]
    results = await save_attachments(
        fetcher,  # type: ignore[arg-type]
        refs,
        session / "att",
        "000001",
        1000,
        root=session,
    )
    assert "cannot be used safely" in results[0]
    assert list(outside.iterdir()) == []
    # A file planted under the name the bridge is about to write is replaced, not followed.
    (session / "att").unlink()
    (session / "att").mkdir()
    (session / "att" / "000001-0-a.txt").symlink_to(outside / "planted")
    [saved] = await save_attachments(
        fetcher,  # type: ignore[arg-type]
        refs,
        session / "att",
        "000001",
        1000,
        root=session,
    )
    assert Path(saved).read_bytes() == b"data" and not Path(saved).is_symlink()
    assert list(outside.iterdir()) == []
