"""Turns: real PreInvocation hooks, injection, and the script directives."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.simulator.driver import Sim, SimFactory, make_plugin, result_of, steps

# Logs its input and environment, then answers the next line of `replies` (or `{}`).
HOOK_SCRIPT = """\
input=$(cat)
printf '%s\\t%s\\n' "$ANTIGRAVITY_CONVERSATION_ID" "$input" >> calls.log
if [ -s replies ]; then
  head -n 1 replies
  tail -n +2 replies > replies.next && mv replies.next replies
else
  printf '{}'
fi
"""
HANDLER = {"type": "command", "command": "sh hook.sh", "timeout": 10}


def hook_plugin(workspace: Path, hooks: Any = None, replies: Sequence[str] = ()) -> Path:
    root = make_plugin(workspace, "bridge", hooks=hooks or {"bridge": {"PreInvocation": [HANDLER]}})
    (root / "hook.sh").write_text(HOOK_SCRIPT)
    if replies:
        (root / "replies").write_text("".join(r + "\n" for r in replies))
    return root


def calls(root: Path) -> list[tuple[str, dict[str, Any]]]:
    log = root / "calls.log"
    if not log.exists():
        return []
    rows = [line.split("\t", 1) for line in log.read_text().splitlines()]
    return [(env_id, json.loads(payload)) for env_id, payload in rows]


def start_with(sims: SimFactory, workspace: Path, *args: str) -> tuple[Sim, str]:
    sim = sims.start("--add-dir", str(workspace), "--model", "sim-hooks", *args)
    return sim, sim.next_event()["conversation_id"]


def test_pre_invocation_runs_before_every_model_call(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace, replies=['{"injectSteps":[{"userMessage":"late news"}]}'])
    sim, conversation = start_with(sims, workspace)
    sim.send("go [[calls 3]]")
    events = sim.turn()
    made = calls(root)
    assert [payload["invocationNum"] for _, payload in made] == [0, 1, 2]
    for env_id, payload in made:
        assert env_id == payload["conversationId"] == conversation
        assert payload["workspacePaths"] == [str(workspace)]
        assert payload["modelName"] == "sim-hooks"
        assert isinstance(payload["initialNumSteps"], int)
        # The prompt is not in the hook input: no field for it, and in no field's text (all of
        # it: "go" alone could be part of a path the machine's user or temporary directory
        # names).
        assert set(payload) == {
            "conversationId",
            "workspacePaths",
            "transcriptPath",
            "artifactDirectoryPath",
            "modelName",
            "invocationNum",
            "initialNumSteps",
        }
        assert "go [[calls 3]]" not in json.dumps(payload)
    steps_seen = [payload["initialNumSteps"] for _, payload in made]
    assert steps_seen == sorted(steps_seen) and steps_seen[0] < steps_seen[-1]
    user_inputs = steps(events, "user_input")
    assert len(user_inputs) == 2  # the turn's own and the injected one
    result = result_of(events)
    assert result["response"] == "You said: go [[calls 3]]\nInjected: late news\n"
    # The invocation counter starts again at 0 on the next user prompt.
    sim.send("next")
    sim.turn()
    assert calls(root)[-1][1]["invocationNum"] == 0


def test_injection_mid_turn_waits_for_a_file(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace)
    sim, _ = start_with(sims, workspace)
    sim.send("[[calls 2]] [[wait go.flag]]")
    sim.until("step_update", step_type="tool", state="DONE")
    (root / "replies").write_text('{"injectSteps":[{"userMessage":"while you work"}]}\n')
    (sims.cwd / "go.flag").touch()
    result = result_of(sim.turn())
    assert result["response"].endswith("Injected: while you work\n")


def test_injected_message_is_stored_in_the_conversation(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    hook_plugin(workspace, replies=['{"injectSteps":[{"userMessage":"keep me"}]}'])
    sim, conversation = start_with(sims, workspace)
    sim.send("hi")
    sim.turn()
    stored = json.loads((sims.home / "conversations" / f"{conversation}.json").read_text())
    assert {"role": "injected", "text": "keep me"} in stored["messages"]


def test_ephemeral_message_reaches_that_call_only(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    hook_plugin(workspace, replies=['{"injectSteps":[{"ephemeralMessage":"psst"}]}'] * 2)
    sim, _ = start_with(sims, workspace)
    sim.send("one call")
    one = sim.turn()
    assert result_of(one)["response"].endswith("Ephemeral: psst\n")
    assert len(steps(one, "user_input")) == 1  # not part of the conversation
    sim.send("two calls [[calls 2]]")
    assert "psst" not in result_of(sim.turn())["response"]  # seen by call 0, not the last


def test_reply_with_an_unknown_key_is_discarded(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace, replies=['{"injectSteps":[{"userMessage":"x"}],"extra":1}'])
    sim, _ = start_with(sims, workspace)
    sim.send("hi")
    events = sim.turn()
    assert len(calls(root)) == 1
    assert result_of(events)["response"] == "You said: hi\n"
    assert len(steps(events, "user_input")) == 1
    sim.close_stdin()
    sim.wait()
    assert "discarding hook reply" in sim.stderr()


@pytest.mark.parametrize(
    "hooks",
    [
        {"PreInvocation": [HANDLER]},
        {"enabled": True, "bridge": {"PreInvocation": [HANDLER]}},
    ],
    ids=["flat", "enabled"],
)
def test_flat_or_enabled_hooks_never_run(sims: SimFactory, hooks: dict[str, Any]) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace, hooks=hooks)
    sim, _ = start_with(sims, workspace)
    sim.send("hi")
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert calls(root) == []


def test_broken_hooks_file_is_dropped_but_the_turn_runs(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace)
    (root / "hooks.json").write_text('{"bridge": {"PreInvocation": [')
    sim, _ = start_with(sims, workspace)
    sim.send("hi")
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert calls(root) == []
    sim.close_stdin()
    assert sim.wait() == 0
    assert "ignoring hooks file" in sim.stderr()


def test_relative_add_dir_loads_no_hooks(sims: SimFactory) -> None:
    hook_plugin(sims.cwd / "ws")
    sim = sims.start("--add-dir", "ws")
    sim.next_event()
    sim.send("hi")
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert not (sims.cwd / "ws/.agents/plugins/bridge/calls.log").exists()
    sim.close_stdin()
    sim.wait()
    assert "not absolute" in sim.stderr()


def test_hook_timeout_kills_the_handler(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    slow = {"type": "command", "command": "exec sleep 20", "timeout": 1}
    hook_plugin(workspace, hooks={"bridge": {"PreInvocation": [slow]}})
    sim, _ = start_with(sims, workspace)
    started = time.monotonic()
    sim.send("hi")
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert time.monotonic() - started < 15
    sim.close_stdin()
    sim.wait()
    assert "timed out" in sim.stderr()


def test_subagent_hook_call_injects_nothing(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace)
    answer = (
        """printf '{"injectSteps":[{"userMessage":"for %s"}]}' "$ANTIGRAVITY_CONVERSATION_ID"\n"""
    )
    (root / "hook.sh").write_text(HOOK_SCRIPT.replace("printf '{}'\n", answer))
    sim, conversation = start_with(sims, workspace)
    sim.send("[[subagent]]")
    events = sim.turn()
    (sub_id, sub_payload), (main_id, _) = calls(root)
    assert sub_id == sub_payload["conversationId"] != conversation
    assert main_id == conversation
    response = result_of(events)["response"]
    assert f'Subagent hook: {{"injectSteps":[{{"userMessage":"for {sub_id}"}}]}}' in response
    assert f"Injected: for {conversation}" in response
    assert f"Injected: for {sub_id}" not in response
    assert [s["state"] for s in steps(events, "subagent")] == ["ACTIVE", "DONE"]


def test_deny(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[deny]]")
    events = sim.turn()
    active, failed = steps(events, "tool")
    assert (active["state"], failed["state"], failed["tool_name"]) == (
        "ACTIVE",
        "ERROR",
        "write_to_file",
    )
    assert failed["tool_info"]["error"]["type"] == "TOOL_ERROR"
    assert "permission check failed for write_file" in failed["tool_info"]["error"]["message"]
    result = result_of(events)
    assert result["status"] == "SUCCESS"
    assert result["denied_actions"] == [{"action": "write_file", "display_name": "WriteToFile"}]


def test_scripted_error_keeps_the_process(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[error Individual quota reached]]")
    result = result_of(sim.turn())
    assert (result["status"], result["error"], result["response"]) == (
        "ERROR",
        "Individual quota reached",
        "",
    )
    sim.send("hi")
    assert result_of(sim.turn())["status"] == "SUCCESS"


def test_scripted_fatal_exits_1(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[fatal You are not logged in]]")
    assert result_of(sim.turn())["error"] == "You are not logged in"
    assert sim.wait() == 1


def test_crash_exits_2_without_result(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[tool run_command true]] [[crash]]")
    rest = [json.loads(line) for line in sim.rest()]
    assert all(obj["event"] != "result" for obj in rest)
    assert steps(rest, "tool")[-1]["state"] == "DONE"  # it died after the tool
    assert sim.wait() == 2
    assert "panic: simulated crash" in sim.stderr()


def test_garbage_lines_do_not_end_the_turn(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[garbage]]")
    lines = []
    while True:
        line = sim.next_line()
        assert line is not None
        lines.append(line)
        if line.startswith(b'{"event":"result"'):
            break
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            parsed.append(None)
    assert None in parsed
    assert any(isinstance(obj, list) for obj in parsed)
    assert any(isinstance(obj, dict) and obj.get("event") == "sim_future_event" for obj in parsed)
    future = [o for o in parsed if isinstance(o, dict) and o.get("event") == "step_update"]
    assert any(o["step_update"]["step_type"] == "sim_future_step" for o in future)
    assert parsed[-1]["result"]["status"] == "SUCCESS"


def test_bigline(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[bigline 300000]]")
    sim.turn()
    big = max(sim.raw_lines, key=len)
    assert 250_000 < len(big) <= 300_000
    assert json.loads(big)["step_update"]["step_type"] == "sim_blob"


def test_chunks_and_reply(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[reply a longer scripted answer]] [[chunks 5]]")
    events = sim.turn()
    answer = steps(events, "agent_response")
    assert [s["state"] for s in answer] == ["ACTIVE"] * 4 + ["DONE"]
    assert len({s["step_index"] for s in answer}) == 1
    assert "usage" in answer[-1] and "duration_seconds" in answer[-1]
    text = "".join(s["text_delta"] for s in answer)
    assert text == result_of(events)["response"] == "a longer scripted answer\n"


def test_long_answer(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[long 40]] [[chunks 7]]")
    response = result_of(sim.turn())["response"]
    assert response.splitlines() == [f"line {n}" for n in range(1, 41)]


def test_narration_then_tool(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[narrate Let me look.]] [[tool run_command echo oops; exit 3]] [[reply done]]")
    events = sim.turn()
    narration = steps(events, "agent_response")[0]
    assert (narration["state"], narration["text_delta"]) == ("DONE", "Let me look.\n")
    tool = next(s for s in steps(events, "tool") if s["state"] == "DONE")
    assert tool["tool_info"]["parameters"] == {"CommandLine": "echo oops; exit 3"}
    assert tool["tool_info"]["output"] == "oops\n"  # a failing command still ends DONE
    assert narration["step_index"] < tool["step_index"]
    assert result_of(events)["response"] == "Let me look.\ndone\n"


def test_touch_and_waitfirst(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[waitfirst start.flag]] [[touch running.flag]]")
    user_input = sim.next_event()
    assert user_input["step_update"]["step_type"] == "user_input"
    assert not (sims.cwd / "running.flag").exists()
    (sims.cwd / "start.flag").touch()
    sim.turn()
    assert (sims.cwd / "running.flag").exists()


def test_rules_are_noted_and_cut(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    on = b"---\ntrigger: always_on\n---\n"  # 27 bytes
    rules = {"AGENTS.md": on + b"g" * 30_000, "notes.md": on + b"n" * 10, "off.md": b"no"}
    make_plugin(workspace, rules=rules)
    sim = sims.start("--add-dir", str(workspace))
    sim.next_event()
    sim.send("[[rules]]")
    response = result_of(sim.turn())["response"]
    assert "Rule bridge/AGENTS.md: 24000 bytes (cut)" in response
    assert "Rule bridge/notes.md: 37 bytes\n" in response
    assert "off.md" not in response, "a rule without trigger: always_on is not applied"


def test_u2028_is_written_raw_inside_one_line(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[reply a\u2028b]] [[chunks 1]]")
    events = sim.turn()
    assert result_of(events)["response"] == "a\u2028b\n"
    assert any("\u2028".encode() in line for line in sim.raw_lines)


def test_nulls_writes_absent_optional_fields_as_null(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("[[nulls]] [[calls 2]]")
    events = sim.turn()
    planning = next(s for s in steps(events, "agent_response") if s["state"] == "DONE")
    assert "text_delta" in planning and planning["text_delta"] is None
    result = result_of(events)
    assert result["error"] is None and result["denied_actions"] is None
    assert result["status"] == "SUCCESS"
    sim.send("plain")
    assert "denied_actions" not in result_of(sim.turn()), "only the turn that asked"
