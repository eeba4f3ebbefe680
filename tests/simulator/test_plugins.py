from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.simulator.plugins import RULE_LIMIT, FatalConfigError, load_plugins
from tests.simulator.driver import make_plugin

HANDLER = {"type": "command", "command": "true", "timeout": 5}


def load(workspace: Path, *, accept_url: bool = False) -> tuple[list, list[str]]:
    warnings: list[str] = []
    return load_plugins([str(workspace)], warnings.append, accept_url=accept_url), warnings


def test_named_bundle_handlers_are_loaded_with_their_folder(tmp_path: Path) -> None:
    root = make_plugin(tmp_path, hooks={"bridge": {"PreInvocation": [HANDLER]}})
    (plugin,), warnings = load(tmp_path)
    assert warnings == []
    (handler,) = plugin.hooks["PreInvocation"]
    assert (handler.command, handler.timeout, handler.cwd) == ("true", 5, root)


def test_default_timeout_is_30_seconds(tmp_path: Path) -> None:
    make_plugin(tmp_path, hooks={"b": {"PreInvocation": [{"type": "command", "command": "x"}]}})
    (plugin,), _ = load(tmp_path)
    assert plugin.hooks["PreInvocation"][0].timeout == 30


def test_handlers_without_the_command_type_do_not_run(tmp_path: Path) -> None:
    untyped = {"command": "x"}
    other = {"type": "http", "command": "x"}
    make_plugin(tmp_path, hooks={"b": {"PreInvocation": [untyped, other, HANDLER]}})
    (plugin,), _ = load(tmp_path)
    assert [h.command for h in plugin.hooks["PreInvocation"]] == ["true"]


@pytest.mark.parametrize(
    "hooks",
    [
        {"PreInvocation": [HANDLER]},  # flat: an event name read as a bundle name
        {"enabled": True, "bridge": {"PreInvocation": [HANDLER]}},
        {"enabled": False, "bridge": {"PreInvocation": [HANDLER]}},
    ],
)
def test_inert_or_disabled_hooks_files(tmp_path: Path, hooks: dict) -> None:
    make_plugin(tmp_path, hooks=hooks)
    (plugin,), warnings = load(tmp_path)
    assert plugin.hooks.get("PreInvocation", []) == []
    assert warnings == []  # silently, as agy does


@pytest.mark.parametrize(
    "raw",
    [
        '{"bridge": {"PreInvocation": [',
        json.dumps({"bridge": {"PreInvocation": [{"command": "x", "timeout": "10"}]}}),
        json.dumps({"bridge": {"PreInvocation": [{"command": "x", "timeout": 1.5}]}}),
        json.dumps({"bridge": {"PreInvocation": {"command": "x"}}}),
    ],
)
def test_a_broken_hooks_file_is_dropped_whole_with_a_warning(tmp_path: Path, raw: str) -> None:
    make_plugin(tmp_path, hooks_raw=raw)
    (plugin,), warnings = load(tmp_path)
    assert plugin.hooks == {}
    assert len(warnings) == 1 and "hooks" in warnings[0]


def test_mcp_servers_are_renamed_and_bad_entries_dropped(tmp_path: Path) -> None:
    config = {
        "mcpServers": {
            "chat": {"serverUrl": "http://127.0.0.1:1/a"},
            "legacy": {"url": "http://127.0.0.1:1/b"},
            "wrong": "http://127.0.0.1:1/c",
            "nourl": {"httpUrl": "http://127.0.0.1:1/d"},
            "numeric": {"serverUrl": 5},
        }
    }
    make_plugin(tmp_path, "bridge", mcp_raw=json.dumps(config))
    (plugin,), _ = load(tmp_path)
    # "url" is not the documented key: the builds the docs describe drop such an entry.
    assert [(s.name, s.url) for s in plugin.mcp_servers] == [
        ("bridge_chat", "http://127.0.0.1:1/a")
    ]


def test_a_later_build_also_reads_url(tmp_path: Path) -> None:
    config = {
        "mcpServers": {
            "chat": {"serverUrl": "http://127.0.0.1:1/a"},
            "legacy": {"url": "http://127.0.0.1:1/b"},
        }
    }
    make_plugin(tmp_path, "bridge", mcp_raw=json.dumps(config))
    (plugin,), _ = load(tmp_path, accept_url=True)
    assert [(s.name, s.url) for s in plugin.mcp_servers] == [
        ("bridge_chat", "http://127.0.0.1:1/a"),
        ("bridge_legacy", "http://127.0.0.1:1/b"),
    ]


def test_mcp_config_syntax_error_is_fatal(tmp_path: Path) -> None:
    make_plugin(tmp_path, mcp_raw='{"mcpServers": {')
    with pytest.raises(FatalConfigError, match=r"mcp_config\.json"):
        load(tmp_path)


def test_plugin_without_a_name_is_skipped(tmp_path: Path) -> None:
    root = make_plugin(tmp_path, "bad")
    (root / "plugin.json").write_text('{"title": "no name"}')
    plugins, warnings = load(tmp_path)
    assert plugins == [] and "name" in warnings[0]


def test_relative_workspaces_load_no_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_plugin(tmp_path / "ws", hooks={"b": {"PreInvocation": [HANDLER]}})
    monkeypatch.chdir(tmp_path)
    warnings: list[str] = []
    assert load_plugins(["ws"], warnings.append) == []
    assert "not absolute" in warnings[0]


ALWAYS_ON = b"---\ntrigger: always_on\n---\n\n"


def test_long_rule_files_are_cut(tmp_path: Path) -> None:
    long_rule = ALWAYS_ON + b"a" * RULE_LIMIT
    make_plugin(tmp_path, rules={"AGENTS.md": long_rule, "notes.md": ALWAYS_ON + b"short"})
    (plugin,), warnings = load(tmp_path)
    cut, short = plugin.rules
    assert (len(cut.text), cut.truncated) == (RULE_LIMIT, True)
    assert (short.text, short.truncated) == (ALWAYS_ON.decode() + "short", False)
    assert len(warnings) == 1 and str(RULE_LIMIT) in warnings[0]


def test_only_always_on_rules_apply(tmp_path: Path) -> None:
    make_plugin(
        tmp_path,
        rules={
            "a_plain.md": b"no front matter at all",
            "b_manual.md": b"---\ntrigger: manual\n---\nonly when asked",
            "c_late.md": b"intro\n---\ntrigger: always_on\n---\n",  # not at the start
            "d_on.md": ALWAYS_ON + b"always",
            "e_quoted.md": b'---\ndescription: x\ntrigger: "always_on"\n---\nquoted',
            "f_open.md": b"---\ntrigger: always_on\nnever closed",
        },
    )
    (plugin,), warnings = load(tmp_path)
    assert [rule.path.name for rule in plugin.rules] == ["d_on.md", "e_quoted.md"]
    assert warnings == []  # silently, as agy does


def test_mixed_flat_key_is_inert_and_named_bundles_still_load(tmp_path: Path) -> None:
    flat = {"type": "command", "command": "flat", "timeout": 5}
    make_plugin(tmp_path, hooks={"PreInvocation": [flat], "bridge": {"PreInvocation": [HANDLER]}})
    (plugin,), warnings = load(tmp_path)
    assert [h.command for h in plugin.hooks["PreInvocation"]] == ["true"]
    assert warnings == []


def test_a_bundle_can_be_switched_off(tmp_path: Path) -> None:
    off = {"type": "command", "command": "off", "timeout": 5}
    make_plugin(
        tmp_path,
        hooks={
            "quiet": {"enabled": False, "PreInvocation": [off]},
            "loud": {"enabled": True, "PreInvocation": [HANDLER]},
        },
    )
    (plugin,), _ = load(tmp_path)
    assert [h.command for h in plugin.hooks["PreInvocation"]] == ["true"]


def test_a_non_boolean_enabled_drops_the_file(tmp_path: Path) -> None:
    make_plugin(tmp_path, hooks={"b": {"enabled": "no", "PreInvocation": [HANDLER]}})
    (plugin,), warnings = load(tmp_path)
    assert plugin.hooks == {} and "enabled" in warnings[0]


@pytest.mark.parametrize("name", ["my plugin", "br.idge", "bridge/x", "ünï", "a:b"])
def test_plugin_names_outside_the_allowed_set_are_refused(tmp_path: Path, name: str) -> None:
    root = make_plugin(tmp_path, "folder", hooks={"b": {"PreInvocation": [HANDLER]}})
    (root / "plugin.json").write_text(json.dumps({"name": name}))
    plugins, warnings = load(tmp_path)
    assert plugins == [] and "invalid plugin name" in warnings[0]


@pytest.mark.parametrize("name", ["bridge", "Bridge_2", "a-b"])
def test_plugin_names_in_the_allowed_set_load(tmp_path: Path, name: str) -> None:
    make_plugin(tmp_path, name)
    (plugin,), _ = load(tmp_path)
    assert plugin.name == name
