from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from bridge.agy.plugin import RuleTooLarge, plugin_dir, write_plugin


def _write(tmp_path: Path, guidance: str = "be nice", notes: str = "") -> Path:
    return write_plugin(
        tmp_path / "s",
        guidance=guidance,
        notes=notes,
        hook_commands={"PreInvocation": "curl http://x || printf '{}'"},
        hook_timeout=10,
        mcp_servers={"chat": "http://127.0.0.1:1/t/mcp/chat"},
    )


def test_plugin_layout_and_shapes(tmp_path: Path) -> None:
    folder = _write(tmp_path, notes="remember this")
    assert folder == plugin_dir(tmp_path / "s")
    assert folder.parts[-3:] == (".agents", "plugins", "bridge")
    assert json.loads((folder / "plugin.json").read_text()) == {"name": "bridge"}
    hooks = json.loads((folder / "hooks.json").read_text())
    assert list(hooks) == ["bridge"]
    assert hooks["bridge"]["PreInvocation"][0]["type"] == "command"
    mcp = json.loads((folder / "mcp_config.json").read_text())
    assert mcp["mcpServers"]["chat"] == {"serverUrl": "http://127.0.0.1:1/t/mcp/chat"}
    notes = (folder / "rules" / "notes.md").read_text()
    assert notes.startswith("---\ntrigger: always_on\n---") and "remember this" in notes
    assert "be nice" in (folder / "rules" / "AGENTS.md").read_text()
    # The folder holds listener tokens: private to the bridge's user.
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "hooks.json").stat().st_mode) == 0o600


def test_rules_over_the_limit_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RuleTooLarge, match="24,000"):
        _write(tmp_path, guidance="x" * 24_001)
    with pytest.raises(RuleTooLarge, match="notes"):
        _write(tmp_path, notes="é" * 12_001)


def test_rewrite_removes_notes_that_went_away(tmp_path: Path) -> None:
    folder = _write(tmp_path, notes="old")
    _write(tmp_path, notes="")
    assert not (folder / "rules" / "notes.md").exists()


def test_a_rewrite_replaces_what_changed_and_leaves_the_rest(tmp_path: Path) -> None:
    folder = _write(tmp_path, guidance="be nice")
    rules = folder / "rules" / "AGENTS.md"
    before = {p.name: p.stat().st_ino for p in (folder / "plugin.json", rules)}
    _write(tmp_path, guidance="be kind")
    assert "be kind" in rules.read_text()
    # A change goes through a new file renamed over the old (agy never reads half of it).
    assert rules.stat().st_ino != before["AGENTS.md"]
    assert stat.S_IMODE(rules.stat().st_mode) == 0o600
    # An unchanged file is not written again.
    assert (folder / "plugin.json").stat().st_ino == before["plugin.json"]
    assert not list(folder.rglob(".*.tmp"))


def test_the_gated_hook_answers_at_once_without_the_flag(tmp_path: Path) -> None:
    import subprocess

    from bridge.agy.plugin import gated_hook_command, lower_flag, pending_flag, raise_flag

    session = tmp_path / "s"
    marker = tmp_path / "called"
    command = gated_hook_command(pending_flag(session), f"cat > {marker}; printf '{{\"x\":1}}'")

    def run() -> str:
        done = subprocess.run(
            ["sh", "-c", command], input=b'{"conversationId":"c"}', capture_output=True, timeout=10
        )
        return done.stdout.decode()

    assert run() == "{}" and not marker.exists()
    raise_flag(session)
    assert run() == '{"x":1}' and marker.read_text() == '{"conversationId":"c"}'
    lower_flag(session)
    lower_flag(session)  # idempotent
    assert run() == "{}"


def test_no_pre_tool_use_hook_unless_asked(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    assert list(json.loads((folder / "hooks.json").read_text())["bridge"]) == ["PreInvocation"]


def test_pre_tool_use_matcher_groups_when_asked(tmp_path: Path) -> None:
    from bridge.agy.plugin import tool_hook_groups

    folder = write_plugin(
        tmp_path / "s",
        guidance="",
        notes="",
        hook_commands={"PreInvocation": "printf '{}'"},
        hook_timeout=10,
        mcp_servers={},
        pre_tool_use=tool_hook_groups("curl x", 615, ["run_command", "write_to_file"]),
    )
    hooks = json.loads((folder / "hooks.json").read_text())
    handler = {"type": "command", "command": "curl x", "timeout": 615}
    assert hooks == {
        "bridge": {
            "PreInvocation": [{"type": "command", "command": "printf '{}'", "timeout": 10}],
            "PreToolUse": [
                {"matcher": "run_command", "hooks": [handler]},
                {"matcher": "write_to_file", "hooks": [handler]},
            ],
        }
    }


# --- files many sessions hold alike: hard links to one shared copy --------------------------------


def _session(root: Path, name: str, guidance: str = "be nice", notes: str = "") -> Path:
    return write_plugin(
        root / "sessions" / name,
        guidance=guidance,
        notes=notes,
        hook_commands={"PreInvocation": f"curl http://127.0.0.1:1/{name}-token/hook"},
        hook_timeout=10,
        mcp_servers={"chat": f"http://127.0.0.1:1/{name}-token/mcp/chat"},
        shared=root / "shared",
    )


SHARED = ("plugin.json", "rules/AGENTS.md", "rules/notes.md")
OWN = ("hooks.json", "mcp_config.json")


def test_sessions_with_the_same_guidance_share_one_inode(tmp_path: Path) -> None:
    a = _session(tmp_path, "a", notes="the notes")
    b = _session(tmp_path, "b", notes="the notes")
    for name in SHARED:
        assert (a / name).stat().st_ino == (b / name).stat().st_ino, name
        assert (a / name).read_bytes() == (b / name).read_bytes()
        # Read-only: writing into it in place would change every session's file.
        assert stat.S_IMODE((a / name).stat().st_mode) == 0o400
    for name in OWN:  # the listener tokens stay each session's own
        assert (a / name).stat().st_ino != (b / name).stat().st_ino, name
        assert (a / name).stat().st_nlink == 1
        assert stat.S_IMODE((a / name).stat().st_mode) == 0o600
    shared = tmp_path / "shared"
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700
    # One copy per content, named by its digest, linked by the two sessions and itself.
    copies = {p.name: p.stat().st_nlink for p in shared.iterdir()}
    digest = hashlib.sha256((a / "rules" / "AGENTS.md").read_bytes()).hexdigest()
    assert len(copies) == 3 and copies[digest] == 3


def test_changing_one_sessions_guidance_leaves_the_others_alone(tmp_path: Path) -> None:
    a = _session(tmp_path, "a")
    b = _session(tmp_path, "b")
    before = (b / "rules" / "AGENTS.md").read_bytes()
    _session(tmp_path, "a", guidance="be terse")
    assert "be terse" in (a / "rules" / "AGENTS.md").read_text()
    assert (b / "rules" / "AGENTS.md").read_bytes() == before
    assert (a / "rules" / "AGENTS.md").stat().st_ino != (b / "rules" / "AGENTS.md").stat().st_ino
    # A third session with the new guidance joins the new copy.
    c = _session(tmp_path, "c", guidance="be terse")
    assert (c / "rules" / "AGENTS.md").stat().st_ino == (a / "rules" / "AGENTS.md").stat().st_ino
    assert not list(tmp_path.rglob(".*.tmp"))


def test_a_rewrite_with_the_same_content_makes_no_inode(tmp_path: Path) -> None:
    a = _session(tmp_path, "a", notes="n")
    before = {name: (a / name).stat().st_ino for name in (*SHARED, *OWN)}
    copies = sorted(p.name for p in (tmp_path / "shared").iterdir())
    _session(tmp_path, "a", notes="n")
    assert {name: (a / name).stat().st_ino for name in (*SHARED, *OWN)} == before
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == copies


def test_an_older_private_file_with_the_same_bytes_is_left_alone(tmp_path: Path) -> None:
    # A session written before files were shared (or where linking failed).
    folder = write_plugin(
        tmp_path / "sessions" / "a",
        guidance="be nice",
        notes="",
        hook_commands={},
        hook_timeout=10,
        mcp_servers={},
    )
    rules = folder / "rules" / "AGENTS.md"
    inode = rules.stat().st_ino
    _session(tmp_path, "a")
    assert rules.stat().st_ino == inode and rules.stat().st_nlink == 1


def test_where_no_link_can_be_made_the_session_gets_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    a = _session(tmp_path, "a", notes="the notes")
    b = _session(tmp_path, "b", notes="the notes")
    for name in SHARED:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
        assert (a / name).stat().st_ino != (b / name).stat().st_ino
        assert (a / name).stat().st_nlink == 1
        assert stat.S_IMODE((a / name).stat().st_mode) == 0o600
    assert "be nice" in (a / "rules" / "AGENTS.md").read_text()
    # A change goes through a rename there too.
    _session(tmp_path, "a", guidance="be terse")
    assert "be terse" in (a / "rules" / "AGENTS.md").read_text()
    assert not list(tmp_path.rglob(".*.tmp"))


def test_a_private_rewrite_never_writes_into_a_leftover_link(tmp_path: Path) -> None:
    """A start interrupted between linking the temporary name and renaming it leaves a link to
    the shared copy under that name; a later private write (here: without a shared folder)
    must not write into it."""
    a = _session(tmp_path, "a")
    b = _session(tmp_path, "b")
    rules = a / "rules" / "AGENTS.md"
    shared_before = (b / "rules" / "AGENTS.md").read_bytes()
    os.link(rules, rules.with_name(".AGENTS.md.tmp"))
    write_plugin(
        a.parents[2],
        guidance="be terse",
        notes="",
        hook_commands={},
        hook_timeout=10,
        mcp_servers={},
    )
    assert "be terse" in rules.read_text()
    assert stat.S_IMODE(rules.stat().st_mode) == 0o600 and rules.stat().st_nlink == 1
    assert (b / "rules" / "AGENTS.md").read_bytes() == shared_before
    assert not rules.with_name(".AGENTS.md.tmp").exists()


def test_a_half_written_shared_copy_is_never_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the first session's copy is written: neither that session nor a
    later one may end up with half of the guidance."""
    guidance = "be nice " * 200
    real_write = os.write
    failed: list[int] = []

    def write_half_then_fail(fd: int, data: bytes) -> int:
        if not failed and len(data) > 1000:
            failed.append(real_write(fd, bytes(data[: len(data) // 2])))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write_half_then_fail)
    a = _session(tmp_path, "a", guidance=guidance)
    assert failed
    monkeypatch.setattr(os, "write", real_write)
    b = _session(tmp_path, "b", guidance=guidance)
    for folder in (a, b):
        text = (folder / "rules" / "AGENTS.md").read_text()
        assert text.count("be nice") == 200, len(text)
    for copy in (tmp_path / "shared").iterdir():
        assert copy.name.startswith(".") or (
            hashlib.sha256(copy.read_bytes()).hexdigest() == copy.name
        )


def test_pruning_removes_only_copies_no_session_links(tmp_path: Path) -> None:
    from bridge.agy.plugin import prune_shared

    a = _session(tmp_path, "a")
    b = _session(tmp_path, "b")
    old = a / "rules" / "AGENTS.md"
    old_copy = tmp_path / "shared" / hashlib.sha256(old.read_bytes()).hexdigest()
    _session(tmp_path, "a", guidance="be terse")
    _session(tmp_path, "b", guidance="be terse")  # nobody links the old guidance now
    crashed = tmp_path / "shared" / ".crashed.tmp"  # a write interrupted by a crash
    crashed.write_bytes(b"half")
    assert old_copy.exists() and old_copy.stat().st_nlink == 1
    kept = {p.name for p in (tmp_path / "shared").iterdir()} - {old_copy.name, crashed.name}
    assert prune_shared(tmp_path / "shared") == 2
    assert {p.name for p in (tmp_path / "shared").iterdir()} == kept
    for folder in (a, b):  # what the sessions link is still there, and still shared
        for name in SHARED[:2]:
            assert (folder / name).stat().st_nlink == 3
    assert prune_shared(tmp_path / "shared") == 0
    assert prune_shared(tmp_path / "nothing-yet") == 0
