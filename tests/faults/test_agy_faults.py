"""agy failing in every way we know of, under the core harness: the thread is told, and goes on.

The simulator scripts crashes and silent hangs; ``fake_agy.py`` adds what it cannot do: a
process that fails or hangs before ``init``, one that ignores SIGINT, one that prints junk and
dies.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.agy import launch
from bridge.agy import turn as agy_turn
from bridge.core.events import Reaction
from tests.core.harness import Harness, running, thread
from tests.faults.console import marked_processes, sim_conversation_messages, sim_conversations
from tests.faults.fake import fake_agy, received

pytestmark = [pytest.mark.faults, pytest.mark.anyio]


async def wait_file(path: Path) -> None:
    with anyio.fail_after(20):
        while not path.exists():
            await anyio.sleep(0.02)


async def conversation(h: Harness) -> str | None:
    return (await h.bridge.store.thread(thread().key)).conversation_id


async def no_agy_left(needle: str) -> None:
    with anyio.fail_after(15):
        while marked_processes(needle):
            await anyio.sleep(0.05)


async def test_a_crash_mid_turn_is_reported_and_the_queued_message_still_runs(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        started = h.flag("started")
        await h.say(f"boom [[touch {started}]] [[sleep 0.5]] [[crash]]")
        await wait_file(started)
        late = await h.say("the message written while it crashed", who="bob")
        crashed, after = await h.adapter.wait_finished(2)
        assert crashed.outcome is not None and crashed.outcome.error is not None
        assert "agy stopped unexpectedly" in crashed.outcome.error
        assert "panic: simulated crash" in crashed.outcome.error, "agy's last words are shown"
        # Nobody had to write again: the waiting message ran on a resumed process.
        assert after.outcome is not None and after.outcome.error is None
        assert "the message written while it crashed" in after.outcome.final_text
        assert after.reply_to == late
        history = sim_conversation_messages(tmp_path / "sim-home", ("user", "injected"))
        assert sum(t.count("the message written while it crashed") for t in history) == 1
        assert len(sim_conversations(tmp_path / "sim-home")) == 1


async def test_a_silent_agy_is_stopped_at_the_turn_deadline_and_the_thread_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # agy's own deadline (--print-timeout) is under the bridge's; at a 1 s turn both were 1 s and
    # a loaded machine let agy's win ("timeout waiting for response"). The bridge's deadline is
    # what is tested: an agy whose own comes later, and a turn long enough for the second answer.
    # That answer must come within the same deadline, counted from its write: 0.7-1.0 s beside
    # three copies of this test and two busy loops on two cores, so 3 s left a slower loaded
    # machine little room; 6 s costs 3 s more of waiting on the hung turn (no CPU).
    monkeypatch.setattr(launch, "print_timeout", lambda turn_timeout: "60s")
    async with running(tmp_path, turn_timeout=6.0) as h:
        await h.say("think hard [[hang]]")
        [hung] = await h.adapter.wait_finished(1)
        assert hung.outcome is not None and hung.outcome.interrupted
        assert "ran longer than" in (hung.outcome.error or "")
        before = await conversation(h)
        await h.say("still there?")
        _, after = await h.adapter.wait_finished(2)
        assert after.outcome is not None and after.outcome.error is None
        assert "still there?" in after.outcome.final_text
        assert await conversation(h) == before


async def test_a_wedged_agy_that_ignores_sigint_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bridge's grace for SIGINT is 15 s; a second is enough to show what happens after it.
    monkeypatch.setattr(agy_turn, "INTERRUPT_GRACE", 1.0)
    async with running(tmp_path, turn_timeout=1.0, **fake_agy(tmp_path)) as h:
        await h.say("WEDGE")
        [wedged] = await h.adapter.wait_finished(1)
        assert wedged.outcome is not None and wedged.outcome.interrupted
        await h.say("are you back?")
        _, after = await h.adapter.wait_finished(2)
        assert after.outcome is not None and after.outcome.error is None, after.outcome
        assert "You said: Alice (@alice:test): are you back?" in after.outcome.final_text


async def test_agy_failing_before_init_is_reported_and_the_thread_recovers(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, **fake_agy(tmp_path)) as h:
        (tmp_path / "fake" / "start").write_text("exit")
        first = await h.say("hello")
        notice = await h.adapter.wait_notice("agy exited before it started")
        assert "exit code 3" in notice and "your login has expired" in notice
        await h.adapter.changes.until(lambda: (first, Reaction.FAILED) in h.adapter.reactions)
        assert not h.adapter.replies, "no turn was opened for a message agy never got"
        await h.worker_gone()

        (tmp_path / "fake" / "start").unlink()  # the operator signed agy in again
        await h.say("hello again")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        assert reply.outcome.final_text == "You said: Alice (@alice:test): hello again\n"
        assert received(tmp_path) == ["Alice (@alice:test): hello again"]


async def test_agy_hanging_before_init_is_ended_and_reported_and_the_thread_recovers(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, init_timeout=1.0, **fake_agy(tmp_path)) as h:
        (tmp_path / "fake" / "start").write_text("hang")
        first = await h.say("hello")
        notice = await h.adapter.wait_notice("did not start within 1 s")
        assert "waiting for the network" in notice, "agy's last words are shown"
        await h.adapter.changes.until(lambda: (first, Reaction.FAILED) in h.adapter.reactions)
        await h.worker_gone()
        await no_agy_left(f"FAKE_AGY_DIR={tmp_path / 'fake'}")

        (tmp_path / "fake" / "start").unlink()
        await h.say("hello again")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert reply.outcome.final_text == "You said: Alice (@alice:test): hello again\n"


async def test_agy_printing_junk_and_dying_is_reported_and_the_thread_resumes(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, **fake_agy(tmp_path)) as h:
        await h.say("first")
        await h.adapter.wait_finished(1)
        before = await conversation(h)
        await h.say("GARBAGE-EXIT")
        _, died = await h.adapter.wait_finished(2)
        assert died.outcome is not None and died.outcome.error is not None
        assert died.outcome.error.startswith("agy stopped unexpectedly (exit code 1")
        assert "panic" not in died.outcome.final_text, "junk on stdout is never shown"
        await h.say("next")
        *_, after = await h.adapter.wait_finished(3)
        assert after.outcome is not None and after.outcome.error is None
        assert after.outcome.final_text == "You said: Alice (@alice:test): next\n"
        assert await conversation(h) == before, "the next process resumed the conversation"


async def test_nothing_is_left_running_after_junk_a_death_and_a_wedge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agy_turn, "INTERRUPT_GRACE", 1.0)
    async with running(tmp_path, turn_timeout=1.0, **fake_agy(tmp_path)) as h:
        await h.say("GARBAGE-EXIT")
        await h.adapter.wait_finished(1)
        await h.say("WEDGE")
        [*_, wedged] = await h.adapter.wait_finished(2)
        assert wedged.outcome is not None and wedged.outcome.interrupted
    await no_agy_left(f"FAKE_AGY_DIR={tmp_path / 'fake'}")


async def test_an_agy_signed_out_before_init_keeps_the_threads_conversation(
    tmp_path: Path,
) -> None:
    """agy exits before init on a resume because its login expired: the conversation id is
    still good, so the thread keeps it (only "unknown conversation" drops it)."""
    async with running(tmp_path, idle_timeout=0.2, **fake_agy(tmp_path)) as h:
        await h.say("first")
        await h.adapter.wait_finished(1)
        before = await conversation(h)
        assert before
        await h.worker_gone()
        (tmp_path / "fake" / "start").write_text("exit")
        await h.say("second")
        notice = await h.adapter.wait_notice("your login has expired")
        assert "sign agy in again" in notice and "could not resume" not in notice
        assert await conversation(h) == before
        await h.worker_gone()
        (tmp_path / "fake" / "start").unlink()
        await h.say("third")
        await h.adapter.wait_finished(2)
        assert await conversation(h) == before
