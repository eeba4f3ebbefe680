"""Every effect is in the unions the actor's ``match`` statements cover, once: mypy's
``assert_never`` then rejects an effect the actor forgets (an effect class left out of the
unions would escape it, which this test catches)."""

from __future__ import annotations

import inspect
from typing import get_args

from bridge.core.events import Author
from bridge.core.thread import commands as c
from bridge.core.thread import effects as e
from bridge.core.thread.machine import NOTHING_RUNNING, Phase, State, handle


def test_every_effect_is_immediate_or_queued_and_none_is_both() -> None:
    classes = {
        cls for _, cls in inspect.getmembers(e, inspect.isclass) if cls.__module__ == e.__name__
    }
    immediate, queued = set(get_args(e.Immediate)), set(get_args(e.Queued))
    assert not immediate & queued
    assert immediate | queued == classes == set(get_args(e.Effect))


def test_a_stop_whose_request_was_answered_meanwhile_is_decided_by_the_machine() -> None:
    running = State(phase=Phase.RUNNING, asking=True)
    state, effects = handle(running, c.Stop(Author(id="@a:t", display_name="A")))
    assert effects == [e.DenyAndInterrupt("A (@a:t)")]
    # The gate found no request waiting any more: the turn is interrupted as by a Stop.
    state, effects = handle(state, c.NoRequestWaited("A (@a:t)"))
    assert effects == [e.Interrupt("A (@a:t)")] and not state.asking
    # The turn ended meanwhile: the thread is told nothing runs.
    finishing = State(phase=Phase.FINISHING, asking=True)
    assert handle(finishing, c.NoRequestWaited("A"))[1] == [e.Say(NOTHING_RUNNING)]
