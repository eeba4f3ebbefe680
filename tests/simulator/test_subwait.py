"""``[[subwait FILE]]``: the subagent's hook call is held until FILE exists."""

from __future__ import annotations

from tests.simulator.driver import SimFactory, result_of
from tests.simulator.test_turn import calls, hook_plugin, start_with


def test_the_subagents_hook_call_waits_for_the_file(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    root = hook_plugin(workspace)
    sim, conversation = start_with(sims, workspace)
    go = workspace / "go"
    sim.send(f"[[subwait {go}]]")
    # The subagent step is out, and its hook call has not run: it waits for the file.
    [*_, subagent] = sim.until("step_update", step_type="subagent", state="ACTIVE")
    assert subagent["step_update"]["step_type"] == "subagent"
    assert calls(root) == []
    go.touch()
    events = sim.turn()
    (sub_id, _), (main_id, _) = calls(root)
    assert sub_id != conversation and main_id == conversation
    assert "Subagent hook: {}" in result_of(events)["response"]
