"""The turn policy seam: the machine asks before a turn runs and before someone else's messages
join a running turn, and the actor carries the answer out on the scripted agy (messages fail,
wait, or run; the thread is told the policy's reason). The random walks in ``test_machine``
check the transitions against every answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bridge.core.events import Author, Reaction
from bridge.core.store.rows import MessageState, Usage
from bridge.core.thread import commands as c
from bridge.core.thread import effects as e
from bridge.core.thread import turn_policy as tp
from bridge.core.thread.machine import NOTHING_RUNNING, Phase, State, handle
from tests.core.scripted import event, pre_invocation, ref, result, streaming_turn, world

BOB = Author(id="@bob:test", display_name="Bob")
ALICE = Author(id="@alice:test", display_name="Alice")
USAGE = {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}


@dataclass
class Budget:
    """A policy as a budget would be: Bob's messages are refused (or held) while ``spent``."""

    hold: bool = False
    spent: bool = True
    asked: list[tp.Ask] = field(default_factory=list)

    def judge(self, ask: tp.Ask) -> tp.Verdict:
        self.asked.append(ask)
        if self.spent and any(a.id == BOB.id for a in ask.who):
            return tp.Hold("Bob's budget is spent") if self.hold else tp.Refuse("no budget")
        return tp.GO


def _taking(policy: tp.TurnPolicy) -> State:
    state = State()
    for command in (
        c.Begin(),
        c.Prepared(),
        c.InboxChecked(True),
        c.SlotGranted(),
        c.ProcessReady(),
    ):
        state, _ = handle(state, command, policy)
    assert state.phase is Phase.TAKING
    return state


def _ask(*who: Author) -> tp.Ask:
    return tp.Ask("turn", who, ref(), None, who[-1])


def test_a_refused_turn_never_runs_and_a_stop_finds_nothing_running() -> None:
    policy = Budget()
    state, effects = handle(_taking(policy), c.TurnBegan(_ask(BOB)), policy)
    assert effects == [e.Answer(tp.Refuse("no budget"))]
    assert state.phase is Phase.FINISHING and not state.held
    state, effects = handle(state, c.Stop(ALICE), policy)
    assert effects == [e.Say(NOTHING_RUNNING)]
    state, effects = handle(state, c.TurnEnded(True), policy)
    assert state.phase is Phase.IDLE


def test_a_held_turn_waits_for_something_new_and_lets_the_actor_go() -> None:
    policy = Budget(hold=True)
    state, effects = handle(_taking(policy), c.TurnBegan(_ask(BOB)), policy)
    assert effects == [e.Answer(tp.Hold("Bob's budget is spent"))] and state.held
    idle, _ = handle(state, c.TurnEnded(True), policy)
    assert idle.phase is Phase.IDLE, "held messages do not start a turn again at once"
    # A new message asks again; so does a change of what the policy reads.
    for news in (c.MessageStored("m9", 9), c.PolicyChanged()):
        again, effects = handle(idle, news, policy)
        assert again.phase is Phase.TAKING and e.RunTurn() in effects
    # Nothing new: the idle agy is closed, and a look that finds only held messages ends the
    # actor (no agy started again and again for them), with no successor.
    state, _ = handle(idle, c.IdleTimeout(idle.spell), policy)
    state, _ = handle(state, c.ProcessClosed(), policy)
    state, effects = handle(state, c.InboxChecked(True), policy)
    assert state.gone and effects == [e.Exit()] and not state.respawn
    assert handle(state, c.PolicyChanged(), policy)[0].respawn


def test_the_policy_is_asked_about_someone_elses_messages_only_while_a_turn_runs() -> None:
    policy = Budget(hold=True)
    running, _ = handle(_taking(policy), c.TurnBegan(_ask(ALICE)), policy)
    assert running.phase is Phase.RUNNING
    ask = tp.Ask("inject", (BOB,), ref(), None, ALICE)
    state, effects = handle(running, c.InjectAsked(ask), policy)
    assert effects == [e.Answer(tp.Hold("Bob's budget is spent"))]
    assert state.signalled, "held back from this turn: the next one looks at the inbox"
    finishing, _ = handle(running, c.TurnFinishing(), policy)
    _, effects = handle(finishing, c.InjectAsked(ask), policy)
    assert effects == [e.Answer(tp.Hold(""))], "no turn to join: they wait for the next"
    assert policy.asked[-1] == ask


@pytest.mark.anyio
async def test_a_refused_turn_fails_its_messages_and_says_why(tmp_path: Path) -> None:
    policy = Budget()
    async with world(tmp_path, turn_policy=policy) as w:
        mid = await w.say("spend it", author=BOB)
        await w.adapter.changes.until(lambda: (ref().key, "⚠️ no budget") in w.adapter.notices)
        await w.adapter.changes.until(lambda: (mid, Reaction.FAILED) in w.adapter.reactions)
        assert not w.adapter.replies, "agy read nothing of it"
        [ask] = policy.asked
        assert ask.kind == "turn" and ask.who == (BOB,) and ask.where == ref()
        # The thread takes the next message as usual.
        await w.say("mine")
        agy = await w.agys.nth(1)
        [turn] = await agy.wait_turns(1)
        assert "mine" in turn and "spend it" not in turn
        agy.say(result(response="done"))
        await w.adapter.wait_finished(1)
        assert await w.bridge.store.pending(ref().key) == []


@pytest.mark.anyio
async def test_a_held_turn_runs_once_the_policy_changes(tmp_path: Path) -> None:
    policy = Budget(hold=True)
    async with world(tmp_path, turn_policy=policy) as w:
        mid = await w.say("later please", author=BOB)
        notice = (ref().key, "⚠️ Bob's budget is spent")
        await w.adapter.changes.until(lambda: notice in w.adapter.notices)
        await w.adapter.changes.until(lambda: (mid, Reaction.QUEUED) in w.adapter.reactions)
        [waiting] = await w.bridge.store.pending(ref().key)
        assert waiting.state is MessageState.PENDING
        agy = await w.agys.nth(1)
        assert agy.turns == []
        policy.spent = False
        w.bridge.core.threads[ref().key].tell(c.PolicyChanged())
        [turn] = await agy.wait_turns(1)
        assert "later please" in turn
        assert policy.asked[-1].usage is None, "no turn has reported usage yet"
        agy.say(event({"event": "result", "result": {"status": "SUCCESS", "usage": USAGE}}))
        await w.adapter.wait_finished(1)
        # The usage agy reported is what the policy is shown at the next ask.
        await w.say("and now", author=BOB)
        await agy.wait_turns(2)
        assert policy.asked[-1].usage == Usage(**USAGE)


@pytest.mark.anyio
async def test_someone_elses_message_joins_a_running_turn_only_if_the_policy_says_so(
    tmp_path: Path,
) -> None:
    policy = Budget()
    async with world(tmp_path, turn_policy=policy) as w:
        agy = await streaming_turn(w, "one")
        own = await w.say("and also", author=ALICE)
        bobs = await w.say("me too", author=BOB)
        reply = json.dumps(await pre_invocation(tmp_path, agy.conversation))
        assert "and also" in reply and "me too" not in reply
        await w.adapter.changes.until(lambda: (bobs, Reaction.FAILED) in w.adapter.reactions)
        assert (own, Reaction.INJECTED) in w.adapter.reactions
        assert policy.asked[-1].kind == "inject" and policy.asked[-1].who == (BOB,)
        assert policy.asked[-1].turn_by == ALICE
        # A person's own follow-up is not asked about.
        asked = len(policy.asked)
        await w.say("last thing")
        assert "last thing" in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        assert len(policy.asked) == asked
        agy.say(result(response="done"))
        await w.adapter.wait_finished(1)
        assert await w.bridge.store.pending(ref().key) == []
