"""What the bridge writes (``bridge.agy.wire``) must pass the simulator's strict readers.

The simulator never imports the bridge's models; this test is where the two meet.
"""

from __future__ import annotations

import json
from pathlib import Path

from bridge.agy import wire
from bridge.simulator.hooks import parse_reply
from bridge.simulator.plugins import parse_hooks, parse_mcp_config
from bridge.simulator.stream_input import UserTurn, parse_line


def test_hooks_file_runs(tmp_path: Path) -> None:
    handler = wire.HookHandler(command="curl -s http://127.0.0.1:1/t/hook/PreInvocation")
    raw = json.dumps(wire.hooks_file("bridge", {"PreInvocation": handler})).encode()
    (loaded,) = parse_hooks(raw, tmp_path)["PreInvocation"]
    assert (loaded.command, loaded.timeout) == (handler.command, handler.timeout)


def test_mcp_config_file_names_the_server(tmp_path: Path) -> None:
    path = tmp_path / "mcp_config.json"
    path.write_text(json.dumps(wire.mcp_config_file({"chat": "http://127.0.0.1:1/t/mcp/chat"})))
    (server,) = parse_mcp_config(path, "bridge")
    assert (server.name, server.url) == ("bridge_chat", "http://127.0.0.1:1/t/mcp/chat")


def test_hook_replies_are_accepted() -> None:
    assert parse_reply(wire.EMPTY_HOOK_REPLY.to_json()) == ([], [])
    reply = wire.HookReply.model_validate({"injectSteps": [{"userMessage": "late"}]})
    assert parse_reply(reply.to_json()) == (["late"], [])


def test_user_line_is_a_turn() -> None:
    assert parse_line(wire.user_line(["a", "b\u2028c"])) == UserTurn("a\nb\u2028c")


def test_the_bridge_plugin_loads_whole_in_the_simulator(tmp_path: Path) -> None:
    """Name, rules (always on), hooks and the MCP server of the plugin the bridge writes."""
    from bridge.agy.plugin import write_plugin
    from bridge.simulator.plugins import load_plugins

    write_plugin(
        tmp_path,
        guidance="be kind",
        notes="remember",
        hook_commands={"PreInvocation": "printf '{}'"},
        hook_timeout=10,
        mcp_servers={"chat": "http://127.0.0.1:1/t/mcp/chat"},
    )
    warnings: list[str] = []
    (plugin,) = load_plugins([str(tmp_path)], warnings.append)
    assert warnings == []
    assert [rule.path.name for rule in plugin.rules] == ["AGENTS.md", "notes.md"]
    assert [h.command for h in plugin.hooks["PreInvocation"]] == ["printf '{}'"]
    assert [server.name for server in plugin.mcp_servers] == ["bridge_chat"]


def test_tool_decisions_are_read_by_the_simulator_and_its_input_by_the_bridge() -> None:
    from bridge.agy.listener.hook_command import UNREACHABLE_DENIAL
    from bridge.simulator.hooks import parse_decision, tool_hook_input

    for decision in ("allow", "deny", "ask", "force_ask"):
        answer = wire.ToolDecision(decision=decision, reason="why")  # type: ignore[arg-type]
        assert parse_decision(answer.to_json()) == (decision, "why")
    assert parse_decision(wire.ToolDecision(decision="allow").to_json()) == ("allow", "")
    assert parse_decision(UNREACHABLE_DENIAL.encode())[0] == "deny"
    fallback = wire.fallback_answer(wire.PRE_TOOL_USE, "gone")
    assert parse_decision(fallback.to_json()) == ("deny", "gone")

    common = {"conversationId": "c", "workspacePaths": ["/s"], "modelName": "m"}
    raw = json.dumps(tool_hook_input(common, "run_command", {"CommandLine": "ls"}, 7))
    parsed = wire.parse_hook_input(wire.PRE_TOOL_USE, raw)
    assert isinstance(parsed, wire.PreToolUseInput)
    assert (parsed.tool_call.name, parsed.tool_call.args, parsed.step_idx) == (
        "run_command",
        {"CommandLine": "ls"},
        7,
    )


def test_the_bridge_pre_tool_use_groups_load_in_the_simulator(tmp_path: Path) -> None:
    from bridge.agy.plugin import tool_hook_groups
    from bridge.simulator.plugins import parse_hook_file

    handler = wire.HookHandler(command="printf '{}'")
    groups = tool_hook_groups("sh gate.sh", 615, ["run_command", "*"])
    raw = json.dumps(
        wire.hooks_file("bridge", {"PreInvocation": handler}, {wire.PRE_TOOL_USE: groups})
    )
    loaded = parse_hook_file(raw.encode(), tmp_path)
    run_command, star = loaded.tool["PreToolUse"]
    assert (run_command.matcher, star.matcher) == ("run_command", "*")
    assert [(h.command, h.timeout) for h in run_command.handlers] == [("sh gate.sh", 615)]
    assert [h.command for h in loaded.flat["PreInvocation"]] == ["printf '{}'"]
