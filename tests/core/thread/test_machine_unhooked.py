"""A thread whose agy ran tools without the gate's hooks starts no turn (``unhooked``)."""

from __future__ import annotations

from bridge.core.thread import commands as c
from bridge.core.thread import effects as e
from bridge.core.thread.machine import HOOKS_HELD, Phase, State, handle


def test_the_turn_whose_agy_was_stopped_ends_and_what_waits_fails_with_the_reason() -> None:
    state = State(phase=Phase.RUNNING)
    state, effects = handle(state, c.HooksBypassed())
    assert state.unhooked and effects == []
    state, effects = handle(state, c.TurnEnded(taken=True, after=c.After.GONE))
    assert state.phase is Phase.CLOSING and effects == [e.CloseProcess()]
    state, effects = handle(state, c.ProcessClosed())
    assert state.phase is Phase.CHECKING
    state, effects = handle(state, c.InboxChecked(pending=True))
    assert state.gone and e.FailPending(HOOKS_HELD) in effects
    assert not [x for x in effects if isinstance(x, e.AcquireSlot | e.StartProcess)]


def test_a_held_thread_starts_no_process_and_an_idle_one_takes_no_turn() -> None:
    state, effects = handle(State(phase=Phase.CHECKING, unhooked=True), c.InboxChecked(True))
    assert state.gone and e.FailPending(HOOKS_HELD) in effects
    idle = State(phase=Phase.IDLE, unhooked=True)
    state, effects = handle(idle, c.MessageStored("m1", 1))
    assert state.phase is Phase.CLOSING and e.RunTurn() not in effects
    ready = State(phase=Phase.STARTING, unhooked=True)
    state, effects = handle(ready, c.ProcessReady())
    assert state.phase is Phase.CLOSING and e.RunTurn() not in effects


def test_a_thread_not_held_runs_as_before() -> None:
    state, effects = handle(State(phase=Phase.CHECKING), c.InboxChecked(True))
    assert state.phase is Phase.QUEUED and effects == [e.AcquireSlot()]
