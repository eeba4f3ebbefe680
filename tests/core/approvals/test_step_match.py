"""Matching the stream's tool steps to the gate's PreToolUse calls (step_match).

The fixtures are written here in the shapes the recorded streams show (never copied from
them): a turn with a planning step, tools out of index order, a subagent step, a view_file
refused by agy's own check, a tool of another conversation, and a resumed process whose
indices carry on. An agy that runs its hooks makes one PreToolUse call per gated tool step;
one that does not makes none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.agy import wire
from bridge.core.approvals.hook_health import HookHealth, agy_files, identity_of
from bridge.core.approvals.step_match import GATED_TOOLS, Seen, StepLedger, gated_step

CONV = "c-1"


def step(index: int, state: str, kind: str = "tool", name: str | None = None, **more: Any):
    data: dict[str, Any] = {
        "conversation_id": more.pop("conversation_id", CONV),
        "step_index": index,
        "step_type": kind,
        "state": state,
    }
    if name is not None:
        data["tool_name"] = name
        if kind == "tool":
            data["tool_info"] = {"name": name, "parameters": more.pop("parameters", {})}
    data.update(more)
    return wire.StepUpdate.model_validate(data)


# (step, whether a hooks-running agy makes a PreToolUse call for it)
ORDINARY = [
    (step(0, "DONE", "user_input"), False),
    (step(1, "DONE", "unknown"), False),
    (step(2, "DONE", "agent_response"), False),
    # Out of index order, as one recorded build printed them.
    (step(4, "ACTIVE", name="list_dir", parameters={"DirectoryPath": "/w"}), True),
    (step(4, "DONE", name="list_dir"), False),
    (step(3, "ACTIVE", name="run_command", parameters={"CommandLine": "ls"}), True),
    (step(3, "DONE", name="run_command"), False),
    (step(5, "ERROR", name="view_file", tool_info={"name": "view_file", "error": {}}), False),
    (step(6, "ACTIVE", "subagent", name="invoke_subagent"), False),
    (step(6, "DONE", "subagent", name="invoke_subagent"), False),
    # A subagent's own tool, under its conversation (its hook call comes under that id).
    (step(0, "DONE", name="run_command", conversation_id="sub-9"), False),
    (step(7, "ACTIVE", name="find_by_name"), True),
    (step(7, "DONE", name="find_by_name"), False),
    (step(8, "ACTIVE", name="call_mcp_tool"), True),
    (step(8, "DONE", name="call_mcp_tool"), False),
    (step(9, "DONE", "checkpoint"), False),
    (step(10, "ACTIVE", name="write_to_file"), True),
    (step(10, "DONE", name="write_to_file"), False),
    (step(11, "ACTIVE", name="view_file"), False),
    (step(11, "DONE", name="view_file"), False),
    (step(12, "DONE", "system_message"), False),
]


def replay(
    steps: list[tuple[wire.StepUpdate, bool]], hooks: bool, *, index_shift: int = 0
) -> list[Seen]:
    ledger, seen = StepLedger(), []
    for update, called in steps:
        gated = gated_step(update, CONV)
        if called and hooks:
            # The hook's call reaches the gate before the step's end (agy waits for it).
            ledger.decided(update.tool_name or "", update.step_index + index_shift)
        if gated is not None:
            seen.append(ledger.seen(gated))
    return seen


def test_an_agy_that_runs_its_hooks_is_never_taken_for_one_that_does_not() -> None:
    assert Seen.BYPASSED not in replay(ORDINARY, hooks=True)
    # A build that numbered stepIdx differently still matches (by tool).
    assert Seen.BYPASSED not in replay(ORDINARY, hooks=True, index_shift=1)


def test_an_agy_that_skips_pretooluse_is_caught_at_its_first_tool_that_ran() -> None:
    seen = replay(ORDINARY, hooks=False)
    assert seen[0] is Seen.WAIT  # list_dir announced: its hook may still come
    assert seen[1] is Seen.BYPASSED  # ... and it ended DONE without one


def test_a_hook_call_that_comes_after_the_step_was_announced_still_counts() -> None:
    ledger = StepLedger()
    active = gated_step(step(3, "ACTIVE", name="run_command"), CONV)
    assert active is not None and ledger.seen(active) is Seen.WAIT
    ledger.decided("run_command", 3)
    assert not ledger.undecided(active)
    done = gated_step(step(3, "DONE", name="run_command"), CONV)
    assert done is not None and ledger.seen(done) is Seen.FINE


def test_only_the_tools_the_evidence_shows_passing_pretooluse_are_judged() -> None:
    assert GATED_TOOLS == {
        "run_command",
        "list_dir",
        "find_by_name",
        "call_mcp_tool",
        "write_to_file",
    }
    for kind, name in [("subagent", "invoke_subagent"), ("tool", "view_file")]:
        assert gated_step(step(1, "DONE", kind, name=name), CONV) is None
    other = step(1, "DONE", name="run_command", conversation_id="sub")
    assert gated_step(other, CONV) is None


def test_a_step_refused_before_any_hook_proves_nothing() -> None:
    ledger = StepLedger()
    active = gated_step(step(2, "ACTIVE", name="list_dir"), CONV)
    refused = gated_step(step(2, "ERROR", name="list_dir"), CONV)
    assert active is not None and refused is not None
    assert ledger.seen(active) is Seen.WAIT
    assert ledger.seen(refused) is Seen.FINE
    # Its wait for a hook call ends with it: agy is not stopped later for it.
    assert not ledger.undecided(active)


def test_a_held_thread_is_let_go_when_agy_or_its_login_changes(tmp_path: Path) -> None:
    program, login = tmp_path / "agy", tmp_path / "oauth_creds.json"
    program.write_text("#!/bin/sh\n")
    login.write_text("{}")
    files = agy_files([str(program)], [login])
    assert files == [program, login]
    health = HookHealth(lambda: identity_of(files))
    health.hold("t1")
    assert health.held("t1") and health.held("t1") and not health.held("t2")
    login.write_text('{"refresh_token": "other"}')  # a new login
    assert not health.held("t1")
    health.hold("t1")
    program.write_text("#!/bin/sh\n# 1.3.0\n")  # a new version
    assert not health.held("t1")
