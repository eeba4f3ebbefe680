"""A Stop that comes before the turn it is for runs (the message just stored, the turn before
still posting its answer, agy starting for it) stops that turn once it runs: never lost, and
the thread is told once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.core.events import Author
from bridge.core.thread import commands as c
from bridge.core.thread.actor import ThreadActor
from bridge.core.thread.machine import NOTHING_RUNNING, Phase
from tests.core.harness import Harness, running, thread
from tests.core.test_instances import two
from tests.pg import Postgres

pytestmark = pytest.mark.anyio


def _hold_finish(h: Harness) -> tuple[anyio.Event, anyio.Event]:
    """The next turn's record waits (its answer is posted, the turn not yet over)."""
    store = h.bridge.store
    finish_turn = store.finish_turn
    held, go_on = anyio.Event(), anyio.Event()

    async def slow(*args: Any, **kwargs: Any) -> Any:
        store.finish_turn = finish_turn  # type: ignore[method-assign]
        held.set()
        await go_on.wait()
        return await finish_turn(*args, **kwargs)

    store.finish_turn = slow  # type: ignore[method-assign]
    return held, go_on


async def leaving_slowly(actor: ThreadActor) -> anyio.Event:
    """Evict ``actor`` (another thread wants the slot) and hold its session's close until the
    returned event is set: the actor has left, its agy is not yet closed."""
    close, leaving, go_on = actor.work.close, anyio.Event(), anyio.Event()

    async def slow() -> None:
        leaving.set()
        await go_on.wait()
        await close()

    actor.work.close = slow  # type: ignore[method-assign]
    actor.tell(c.Evicted())
    await leaving.wait()
    return go_on


async def test_a_stop_while_the_turn_before_finishes_stops_the_next_turn(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        held, go_on = _hold_finish(h)
        await h.say("one")
        await held.wait()
        await h.say("long job [[sleep 60]]")
        await h.say("!stop", who="bob")
        go_on.set()
        [first, stopped] = await h.adapter.wait_finished(2, timeout=30)
        assert first.outcome is not None and not first.outcome.interrupted
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert stopped.outcome.notes == ["Stopped by Bob (@bob:test)."]
        assert not [n for _, n in h.adapter.notices if NOTHING_RUNNING in n], "told once"


async def test_a_stop_while_agy_starts_for_the_first_message_stops_its_turn(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        await h.say("long job [[sleep 60]]")
        # agy is starting (no process yet): the Stop waits for the turn.
        assert not h.bridge.core.threads[next(iter(h.bridge.core.threads))].busy
        await h.say("!stop", who="bob")
        [stopped] = await h.adapter.wait_finished(1, timeout=30)
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert not [n for _, n in h.adapter.notices if NOTHING_RUNNING in n], "told once"


async def test_a_stop_as_the_actor_leaves_reaches_its_successors_turn(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("one")
        await h.adapter.wait_finished(1)
        actor = h.bridge.core.threads[thread().key]
        await actor.wait_until(lambda state: state.phase is Phase.IDLE)
        # The actor lets agy go (another thread wants the slot) and closes its session slowly.
        go_on = await leaving_slowly(actor)
        assert actor.state.gone
        # A message lands as it leaves (its successor takes it), and then a Stop.
        await h.say("long job [[sleep 60]]")
        await h.say("!stop", who="bob")
        go_on.set()
        [_, stopped] = await h.adapter.wait_finished(2, timeout=30)
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert stopped.outcome.notes == ["Stopped by Bob (@bob:test)."]
        assert not [n for _, n in h.adapter.notices if NOTHING_RUNNING in n], "told once"


async def test_a_stop_with_nothing_on_its_way_is_told_nothing_runs(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("one")
        await h.adapter.wait_finished(1)
        actor = next(iter(h.bridge.core.threads.values()))
        await actor.wait_until(lambda state: not state.in_turn)
        await h.say("!stop", who="bob")
        await h.adapter.wait_notice(NOTHING_RUNNING)


async def test_a_stop_sent_while_the_other_instance_claims_the_thread_stops_its_turn(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        router = b.bridge.core.router
        claim, control = router.cluster.claim, router.control
        heard = anyio.Event()

        def hearing(payload: str) -> None:
            control(payload)
            heard.set()

        async def claiming(key: str) -> Any:
            # B holds the lease; before its actor exists, A sends it a Stop (A sees the lease).
            granted = await claim(key)
            router.cluster.claim = claim  # type: ignore[method-assign]
            await a.bridge.core.stop(thread(), Author(id="@bob:test", display_name="Bob"))
            await heard.wait()
            return granted

        # A only sends the Stop: it leaves the stored message to B.
        a.bridge.core.router.stored = lambda key: None  # type: ignore[method-assign]
        router.control = hearing  # type: ignore[method-assign]
        router.cluster.claim = claiming  # type: ignore[method-assign]
        await b.say("long job [[sleep 60]]")
        [stopped] = await b.adapter.wait_finished(1, timeout=30)
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert "Stopped by Bob" in " ".join(stopped.outcome.notes)
        assert not a.adapter.notices and not b.adapter.notices, "told once, by the turn"


async def test_a_stop_sent_to_the_holder_whose_actor_leaves_is_answered(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        a.bridge.core.router.stored = lambda key: None  # type: ignore[method-assign]
        await b.say("one")
        await b.adapter.wait_finished(1)
        actor = b.bridge.core.threads[thread().key]
        await actor.wait_until(lambda state: state.phase is Phase.IDLE)
        go_on = await leaving_slowly(actor)
        # B still holds the lease, its actor is leaving with nothing to do: A's Stop goes to B.
        try:
            await a.bridge.core.stop(thread(), Author(id="@bob:test", display_name="Bob"))
            await b.adapter.wait_notice(NOTHING_RUNNING)
        finally:
            go_on.set()
        assert not a.adapter.notices
