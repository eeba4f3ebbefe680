"""A thread's actor on the scripted agy: what it does with the process (keep it, drain it,
replace it, close it when idle or evicted, requeue a turn it never read). The transitions
themselves are tested without I/O in ``test_machine``."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from bridge.core.store.rows import MessageState
from bridge.core.thread import commands as c
from tests.core.harness import hold_after_taking
from tests.core.scripted import (
    World,
    delta,
    pre_invocation,
    ref,
    result,
    streaming_turn,
    world,
)

pytestmark = pytest.mark.anyio


async def test_one_process_serves_turn_after_turn(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        agy.say(delta("an"), delta("swer"), result(response="answer"))
        [first] = await w.adapter.wait_finished(1)
        assert first.deltas == ["answer"], "deltas printed together reach the chat as one"
        await w.adapter.changes.until(lambda: first.closed)  # the working status is cleared
        await w.say("two")
        await agy.wait_turns(2)
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)
        assert len(w.agys.started) == 1 and agy.alive


async def test_an_idle_process_is_closed_and_the_next_message_resumes_it(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, idle_timeout=0.05) as w:
        await w.say("one")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        first.say(result(response="ok"))
        await w.agys.wait(lambda: first.closed)
        await w.say("two")
        second = await w.agys.nth(2)
        assert second.conversation == first.conversation, "resumed by id"
        assert "--conversation" in second.spec.argv


async def test_an_idle_holder_is_evicted_for_another_thread(tmp_path: Path) -> None:
    async with world(tmp_path, max_processes=1) as w:
        await w.say("a", thread="A")
        a = await w.agys.nth(1)
        await a.wait_turns(1)
        a.say(result(response="done"))
        await w.adapter.wait_finished(1)
        await w.say("b", thread="B")
        b = await w.agys.nth(2)
        assert a.closed, "A's idle process made room for B"
        await b.wait_turns(1)
        b.say(result(response="done too"))
        await w.adapter.wait_finished(2)


async def test_a_restart_request_replaces_the_idle_process(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        first.say(result(response="ok"))
        await w.adapter.wait_finished(1)
        await w.say("!model other-model")
        second = await w.agys.nth(2)
        assert first.closed
        argv = list(second.spec.argv)
        assert argv[argv.index("--model") + 1] == "other-model"


async def test_stop_interrupts_then_the_next_turn_gets_a_fresh_process(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        first = await streaming_turn(w, "long job")
        await w.say("!stop")
        [stopped] = await w.adapter.wait_finished(1)
        assert first.interrupted == 1
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert stopped.outcome.error is None
        assert stopped.outcome.notes == ["Stopped by Alice (@alice:test)."]
        await w.agys.wait(lambda: first.closed)
        await w.say("again")
        second = await w.agys.nth(2)
        assert second.conversation == first.conversation
        await second.wait_turns(1)


async def test_a_stop_before_the_turn_reaches_agy_keeps_it_from_agy(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        taken, go_on = hold_after_taking(w.bridge.store)
        await w.say("long job")
        agy = await w.agys.nth(1)
        await taken.wait()  # the turn has its messages; agy has not
        await w.say("!stop")
        go_on.set()
        [stopped] = await w.adapter.wait_finished(1)
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert stopped.outcome.notes == ["Stopped by Alice (@alice:test)."]
        # No SIGINT to an agy with no turn (it would exit, and the turn go to a dying process).
        assert agy.turns == [] and agy.interrupted == 0
        await w.say("again")
        assert "again" in (await agy.wait_turns(1))[0], "the same agy carries on"
        assert len(w.agys.started) == 1 and not agy.closed


async def test_after_an_error_result_the_dying_process_is_not_given_the_next_turn(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        await w.say("queued meanwhile")
        first.say(result(status="ERROR", error="Individual quota reached"))
        [failed] = await w.adapter.wait_finished(1)
        assert failed.outcome is not None and failed.outcome.error == "Individual quota reached"
        first.die()
        second = await w.agys.nth(2)
        assert len(first.turns) == 1, "the queued message went to the next process"
        assert "queued meanwhile" in (await second.wait_turns(1))[0]


async def test_a_turn_agy_never_read_is_requeued_once(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("hello")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        first.die(2, "panic: going away")
        second = await w.agys.nth(2)
        assert "hello" in (await second.wait_turns(1))[0]
        assert not w.adapter.replies, "nothing was shown for the turn agy never read"
        second.die(2, "panic: again")
        [failed] = await w.adapter.wait_finished(1)
        assert failed.outcome is not None and "panic: again" in (failed.outcome.error or "")
        rows = await w.bridge.store.running_turns()
        assert rows == []
        assert await w.bridge.store.pending(ref().key) == []


async def test_an_injection_agy_never_read_goes_back_to_the_inbox(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        reply = await pre_invocation(tmp_path, agy.conversation)
        assert "late" in json.dumps(reply)
        agy.die(2, "panic: after the hook")  # before any next step: the reply was never read
        second = await w.agys.nth(2)
        assert "late" in (await second.wait_turns(1))[0]
        states = [m.state for m in await w.bridge.store.pending(ref().key)]
        assert states == []  # taken again by the new turn, not left injected


async def test_a_message_during_a_turn_waits_as_pending_and_becomes_the_next_turn(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        await w.say("two")
        [waiting] = await w.bridge.store.pending(ref().key)
        assert waiting.state is MessageState.PENDING
        agy.say(result(response="first"))
        assert "two" in (await agy.wait_turns(2))[0]
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)
        assert [t.state for t in await w.bridge.store.running_turns()] == []


async def until_idle(w: World, key: str) -> None:
    """Until the thread's worker has decided nothing waits and gone idle with its process."""
    with anyio.fail_after(10):
        while not ((holder := w.bridge.core.slots._holders.get(key)) and holder.idle):
            await anyio.sleep(0.01)


async def test_an_injection_reported_lost_after_its_turn_becomes_the_next_turn(
    tmp_path: Path,
) -> None:
    """The listener may learn only after the turn ended that agy never read a hook answer (it
    came past the deadline); the messages it carried go back to the inbox and are taken
    without waiting for someone to write again."""
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        assert "late" in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        agy.say(result(response="first"))
        await w.adapter.wait_finished(1)
        await until_idle(w, ref().key)
        # What the listener calls then (tests/agy/test_listener.py shows when it does).
        await w.bridge.core.threads[ref().key].work._injection_lost()
        assert "late" in (await agy.wait_turns(2))[0]


async def test_the_hook_flag_is_raised_only_while_a_turn_runs(tmp_path: Path) -> None:
    """Only a turn makes hook calls: a message between turns is the next turn's, with no flag
    for the hook (no file written), while one during a turn raises it for the next call."""
    async with world(tmp_path) as w:
        await w.say("one")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        [flag] = (tmp_path / "data" / "sessions").glob("*/.agents/plugins/*")
        flag = flag / "pending"
        assert not flag.exists()
        await w.say("during")
        assert flag.exists(), "a message during a turn calls the hook in"
        agy.say(result(response="first"))
        assert "during" in (await agy.wait_turns(2))[0]
        assert not flag.exists(), "the turn that took it lowered the flag"
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)
        await until_idle(w, ref().key)
        await w.say("between")
        assert not flag.exists(), "between turns the next turn takes the message"
        assert "between" in (await agy.wait_turns(3))[0]
        agy.say(result(response="third"))
        await w.adapter.wait_finished(3)


async def test_a_shutdown_mid_turn_leaves_what_waits_for_the_next_start(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        first = await streaming_turn(w, "one")
        await w.say("late")  # waits: agy has made no hook call since
    assert first.interrupted == 1
    assert len(w.agys.started) == 1, "no new agy (nor turn) for a message once the bridge stops"
    async with world(tmp_path) as again:
        await again.bridge.core.recover()
        agy = await again.agys.nth(1)
        blocks = await agy.wait_turns(1)
        assert "late" in "\n".join(blocks), "the waiting message runs at the next start"
        agy.say(result(response="done"))
        await again.adapter.wait_finished(1)


async def test_waiting_on_a_thread_follows_its_transitions_without_polling(
    tmp_path: Path,
) -> None:
    """``wait_until`` wakes at the transition that makes its predicate true, ``wait_ended``
    once the actor has gone; the core waits this way (no sleep loops watch an actor)."""
    async with world(tmp_path) as w:
        await w.say("one")
        actor = w.bridge.core.threads[ref().key]
        with anyio.fail_after(5):
            await actor.wait_until(lambda state: state.busy)
        agy = await w.agys.nth(1)
        agy.say(result(response="done"))
        with anyio.fail_after(5):
            await actor.wait_until(lambda state: not state.in_turn)
        await w.adapter.wait_finished(1)
        actor.tell(c.EndLease())
        with anyio.fail_after(5):
            await actor.wait_ended()
        assert ref().key not in w.bridge.core.threads
        await actor.wait_ended()  # at once, once over
    core = Path(__file__).resolve().parents[3] / "bridge" / "core"
    polled = [p for p in core.rglob("*.py") if "ASYNC110" in p.read_text()]
    assert polled == [], "a sleep loop watches state that changes in one place"
