"""``PreToolUse`` hooks as agy runs them: matcher groups, the input, a strict reply, fail closed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.simulator.hooks import BadHookReply, parse_decision
from bridge.simulator.plugins import parse_hook_file
from tests.simulator.driver import Sim, SimFactory, make_plugin, result_of, steps

# Records its input, environment and folder, then prints the reply the test put in reply.txt.
HOOK_SCRIPT = """\
cat > input.json
printf '%s' "$ANTIGRAVITY_CONVERSATION_ID" > conversation.txt
pwd > cwd.txt
cat reply.txt
exit "$(cat code.txt 2>/dev/null || echo 0)"
"""


def _handler(timeout: int | None = None) -> dict[str, Any]:
    handler: dict[str, Any] = {"type": "command", "command": "sh hook.sh"}
    if timeout is not None:
        handler["timeout"] = timeout
    return handler


def _plugin(
    sims: SimFactory, reply: str, *, matcher: str = "run_command", bundle: dict | None = None
) -> Path:
    workspace = sims.root / "session"
    groups = [{"matcher": matcher, "hooks": [_handler()]}]
    root = make_plugin(workspace, hooks={"gate": bundle or {"PreToolUse": groups}})
    (root / "hook.sh").write_text(HOOK_SCRIPT)
    (root / "reply.txt").write_text(reply)
    return root


def _start(sims: SimFactory) -> Sim:
    sim = sims.start("--add-dir", str(sims.root / "session"))
    assert sim.next_event()["event"] == "init"
    return sim


def _tool_steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return steps(events, "tool")


def test_matcher_groups_are_loaded_with_agys_handler_names(tmp_path: Path) -> None:
    raw = json.dumps(
        {
            "gate": {
                "PreInvocation": [_handler()],
                "PreToolUse": [
                    {"matcher": "run_command", "hooks": [_handler(5), _handler()]},
                    {"matcher": "*", "hooks": [_handler()]},
                    {"hooks": [_handler()]},  # no matcher: matches no tool
                ],
            }
        }
    ).encode()
    hooks = parse_hook_file(raw, tmp_path)
    assert [h.name for h in hooks.flat["PreInvocation"]] == ["jsonhook__gate_PreInvocation_0"]
    first, star, none = hooks.tool["PreToolUse"]
    assert [h.name for h in first.handlers] == [
        "jsonhook__gate_PreToolUse_0_0",
        "jsonhook__gate_PreToolUse_0_1",
    ]
    assert [h.timeout for h in first.handlers] == [5, 30]
    assert first.matches("run_command") and not first.matches("write_to_file")
    assert star.matches("write_to_file") and not none.matches("run_command")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"decision":"allow"}', ("allow", "")),
        (b'{"decision":"deny","reason":"no"}', ("deny", "no")),
        (b' {"decision":"ask","reason":"?"}\n', ("ask", "?")),
        (b'{"decision":"force_ask"}', ("force_ask", "")),
    ],
)
def test_valid_decisions(raw: bytes, expected: tuple[str, str]) -> None:
    assert parse_decision(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"{}",
        b"",
        b"allow",
        b'{"decision":"allow","extra":1}',
        b'{"decision":"yes"}',
        b'{"decision":null}',
        b'{"reason":"no decision"}',
        b'{"decision":"allow","decision":"deny"}',
        b'{"decision":"deny","reason":5}',
        b'["allow"]',
    ],
)
def test_replies_that_fail_closed(raw: bytes) -> None:
    with pytest.raises(BadHookReply):
        parse_decision(raw)


def test_allow_runs_the_command_and_the_input_is_agys(sims: SimFactory) -> None:
    root = _plugin(sims, '{"decision":"allow"}')
    sim = _start(sims)
    sim.send("[[tool run_command echo ran > ran.txt]]")
    events = sim.turn()
    active, done = _tool_steps(events)
    assert done["state"] == "DONE"
    assert (sims.cwd / "ran.txt").read_text() == "ran\n"
    assert result_of(events)["status"] == "SUCCESS"

    conversation = result_of(events)["conversation_id"]
    hook_input = json.loads((root / "input.json").read_text())
    assert hook_input["toolCall"] == {
        "name": "run_command",
        "args": {"CommandLine": "echo ran > ran.txt"},
    }
    assert hook_input["stepIdx"] == active["step_index"]
    assert hook_input["conversationId"] == conversation
    assert hook_input["workspacePaths"] == [str(sims.root / "session")]
    for key in ("transcriptPath", "artifactDirectoryPath", "modelName"):
        assert isinstance(hook_input[key], str) and hook_input[key]
    assert "invocationNum" not in hook_input
    assert (root / "conversation.txt").read_text() == conversation
    assert (root / "cwd.txt").read_text().strip() == str(root)


def test_deny_refuses_the_call_and_the_reason_reaches_the_answer(sims: SimFactory) -> None:
    _plugin(sims, '{"decision":"deny","reason":"denied by Bob: use the staging db"}')
    sim = _start(sims)
    sim.send("[[tool run_command touch ran.txt]] [[reply I could not run it.]]")
    events = sim.turn()
    active, refused = _tool_steps(events)
    assert (active["state"], refused["state"]) == ("ACTIVE", "ERROR")
    assert refused["step_index"] == active["step_index"]
    message = refused["tool_info"]["error"]["message"]
    assert message == "Tool call denied by pre-tool hook: denied by Bob: use the staging db"
    assert "output" not in refused["tool_info"]
    assert not (sims.cwd / "ran.txt").exists(), "a denied command must not run"
    result = result_of(events)
    assert result["status"] == "SUCCESS"
    assert "denied by Bob: use the staging db" in result["response"]
    assert result["response"].startswith("I could not run it.\n")


@pytest.mark.parametrize(
    "reply",
    ['{"decision":"ask","reason":"check"}', '{"decision":"force_ask"}'],
)
def test_ask_cannot_prompt_in_print_mode_so_the_call_is_refused(
    sims: SimFactory, reply: str
) -> None:
    _plugin(sims, reply)
    sim = _start(sims)
    sim.send("[[tool run_command touch ran.txt]]")
    events = sim.turn()
    assert _tool_steps(events)[-1]["state"] == "ERROR"
    assert not (sims.cwd / "ran.txt").exists()


@pytest.mark.parametrize(
    ("reply", "code", "why"),
    [
        ("{}", "0", "invalid output"),
        ('{"decision":"allow","note":"x"}', "0", "unknown field"),
        ("yes please", "0", "not JSON"),
        ('{"decision":"allow"}', "1", "exit status 1"),
    ],
)
def test_a_failing_or_malformed_hook_fails_closed(
    sims: SimFactory, reply: str, code: str, why: str
) -> None:
    root = _plugin(sims, reply)
    (root / "code.txt").write_text(code)
    sim = _start(sims)
    sim.send("[[tool run_command touch ran.txt]]")
    events = sim.turn()
    refused = _tool_steps(events)[-1]
    message = refused["tool_info"]["error"]["message"]
    assert refused["state"] == "ERROR" and why in message
    assert message.startswith('JSON hook "jsonhook__gate_PreToolUse_0_0" failed: ')
    assert not (sims.cwd / "ran.txt").exists()
    result = result_of(events)
    # As recorded: the turn is an ERROR with the hook's message, and still has an answer.
    assert result["status"] == "ERROR" and why in result["error"]
    assert "Tool run_command failed: JSON hook" in result["response"]


def test_a_hook_that_times_out_is_no_decision(sims: SimFactory) -> None:
    groups = [{"matcher": "*", "hooks": [{"type": "command", "command": "sleep 30", "timeout": 1}]}]
    _plugin(sims, "", bundle={"PreToolUse": groups})
    sim = _start(sims)
    sim.send("[[tool run_command touch ran.txt]]")
    events = sim.turn()
    refused = _tool_steps(events)[-1]
    assert refused["state"] == "ERROR" and "timed out" in refused["tool_info"]["error"]["message"]
    assert not (sims.cwd / "ran.txt").exists()


def test_a_matcher_for_another_tool_does_not_gate(sims: SimFactory) -> None:
    root = _plugin(sims, '{"decision":"deny","reason":"no writes"}', matcher="write_to_file")
    sim = _start(sims)
    sim.send("[[tool run_command touch ran.txt]] [[write out.txt hello]]")
    events = sim.turn()
    command, write = _tool_steps(events)[1], _tool_steps(events)[3]
    assert command["state"] == "DONE" and (sims.cwd / "ran.txt").exists()
    assert write["state"] == "ERROR" and not (sims.cwd / "out.txt").exists()
    hook_input = json.loads((root / "input.json").read_text())
    assert hook_input["toolCall"]["name"] == "write_to_file"
    assert hook_input["toolCall"]["args"]["TargetFile"] == str(sims.cwd / "out.txt")


def test_star_gates_every_tool_and_allowed_writes_happen(sims: SimFactory) -> None:
    root = _plugin(sims, '{"decision":"allow"}', matcher="*")
    sim = _start(sims)
    sim.send("[[write sub/out.txt hello there]]")
    events = sim.turn()
    assert _tool_steps(events)[-1]["state"] == "DONE"
    assert (sims.cwd / "sub" / "out.txt").read_text() == "hello there"
    args = json.loads((root / "input.json").read_text())["toolCall"]["args"]
    assert args == {"TargetFile": str(sims.cwd / "sub" / "out.txt"), "CodeContent": "hello there"}


def test_a_disabled_bundle_does_not_gate(sims: SimFactory) -> None:
    groups = [{"matcher": "*", "hooks": [_handler()]}]
    _plugin(sims, '{"decision":"deny"}', bundle={"enabled": False, "PreToolUse": groups})
    sim = _start(sims)
    sim.send("[[tool run_command touch ran.txt]]")
    sim.turn()
    assert (sims.cwd / "ran.txt").exists()


def test_without_pre_tool_use_hooks_tools_run_as_before(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[tool run_command touch ran.txt]]")
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert (sims.cwd / "ran.txt").exists()
