"""Promises of the turn loop, each pinned so that breaking it fails here (see docs/testing.md).

3. A hook call from another conversation (a subagent's) takes nothing while a message waits.
4. Several messages taken by one hook call all reach agy, each marked injected.
5. A message stored before a restart runs at the next start with no new message arriving.

Uses the core harness (``running``, ``Harness.say``/``flag``, the recording adapter) only.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import Reaction
from tests.core.harness import Harness, running
from tests.faults.console import sim_conversation_messages

pytestmark = pytest.mark.anyio


async def wait_file(path: Path) -> None:
    with anyio.fail_after(20):
        while not path.exists():
            await anyio.sleep(0.02)


def reached_agy(h: Harness, text: str, role: str) -> int:
    """How often ``text`` is in the simulator's stored conversations under ``role``."""
    return sum(t.count(text) for t in sim_conversation_messages(h.tmp / "sim-home", [role]))


async def test_a_subagents_hook_call_leaves_the_waiting_message_for_the_thread(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        go = h.flag("go")
        # The subagent's hook call is held until a message waits for the thread.
        await h.say(f"delegate this [[subwait {go}]]")
        await h.adapter.changes.until(lambda: h.adapter.replies)  # the turn is under way
        late = await h.say("a note for the main agent", who="bob")
        await h.adapter.changes.until(lambda: (late, Reaction.QUEUED) in h.adapter.reactions)
        go.touch()
        [reply] = await h.adapter.wait_finished(1)
        final = reply.outcome.final_text  # type: ignore[union-attr]
        # The subagent's call got an empty reply; the thread's own next call took the message.
        assert "Subagent hook: {}" in final
        assert "Injected: (Message written in the chat while you were working)" in final
        assert "Bob (@bob:test): a note for the main agent" in final
        assert reached_agy(h, "a note for the main agent", "injected") == 1
        assert (late, Reaction.INJECTED) in h.adapter.reactions
        assert len(h.adapter.finished()) == 1


async def test_every_message_one_hook_call_takes_reaches_agy(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"long job [[calls 2]] [[touch {started}]] [[wait {go}]]")
        await wait_file(started)
        # Three messages wait when the second model call's hook runs: one call takes them all.
        late = [
            await h.say("first note", who="bob"),
            await h.say("second note", who="carol"),
            await h.say("third note", who="dave"),
        ]
        go.touch()
        [reply] = await h.adapter.wait_finished(1)
        final = reply.outcome.final_text  # type: ignore[union-attr]
        injected = [line for line in final.splitlines() if line.startswith("Injected:")]
        assert len(injected) == 3, final
        lines = ["Bob (@bob:test): first note", "Carol (@carol:test): second note"]
        lines.append("Dave (@dave:test): third note")
        positions = [final.index(line) for line in lines]
        assert positions == sorted(positions), "in the order they were written"
        for text in ("first note", "second note", "third note"):
            assert reached_agy(h, text, "injected") == 1, text
        for mid in late:
            assert (mid, Reaction.INJECTED) in h.adapter.reactions
        assert len(h.adapter.finished()) == 1, "an injected message must not become a turn"


async def test_a_message_stored_before_a_restart_runs_at_the_next_start(tmp_path: Path) -> None:
    # First run: agy never gets to init, so the stored message is still waiting at shutdown.
    async with running(tmp_path, env={"AGY_SIM_STARTUP_DELAY": "60"}) as h:
        await h.say("stored before the restart")
    assert reached_agy(h, "stored before the restart", "user") == 0
    # Second run: nothing new arrives; the start alone must pick the message up.
    async with running(tmp_path) as h:
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert "Alice (@alice:test): stored before the restart" in reply.outcome.final_text
        assert reached_agy(h, "stored before the restart", "user") == 1
