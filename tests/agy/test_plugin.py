from __future__ import annotations

import json
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
