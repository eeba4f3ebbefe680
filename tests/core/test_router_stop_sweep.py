"""A Stop sent from the other instance at each moment around a message's store and claim stops
the message's turn. It was lost (the turn ran on, nobody said a word) when it reached the holder
after its actor had gone and before its lease was given back, and told "nothing is running"
(the turn then ran on) when it came between the store and the claim.

Each moment is held by a hook at the instance that runs (or is about to run) the thread: no
sleeps. B sends the Stop; the turn waits on a file the test never creates, so a lost Stop shows
as a turn that never ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.core.events import Author
from bridge.core.thread import commands as c
from bridge.core.thread.machine import NOTHING_RUNNING, Phase
from tests.core.harness import Harness, hold_after_taking, thread
from tests.core.test_instances import two
from tests.core.test_router_stop import leaving_slowly
from tests.pg import Postgres

pytestmark = pytest.mark.anyio

BOB = Author(id="@bob:test", display_name="Bob")


def pause(obj: Any, name: str) -> tuple[anyio.Event, anyio.Event]:
    """``obj.name``'s next call waits before it runs, until the second event is set (the first
    is set once it waits); later calls run at once."""
    original = getattr(obj, name)
    reached, go_on = anyio.Event(), anyio.Event()

    async def paused(*args: Any, **kwargs: Any) -> Any:
        setattr(obj, name, original)
        reached.set()
        await go_on.wait()
        return await original(*args, **kwargs)

    setattr(obj, name, paused)
    return reached, go_on


def pause_after(obj: Any, name: str) -> tuple[anyio.Event, anyio.Event]:
    """As :func:`pause`, the call done first: it waits before returning its result."""
    original = getattr(obj, name)
    reached, go_on = anyio.Event(), anyio.Event()

    async def paused(*args: Any, **kwargs: Any) -> Any:
        setattr(obj, name, original)
        result = await original(*args, **kwargs)
        reached.set()
        await go_on.wait()
        return result

    setattr(obj, name, paused)
    return reached, go_on


def outcome(*hs: Harness) -> str | None:
    """ "stopped" (a turn was interrupted), "told" (nothing runs), or None yet."""
    for h in hs:
        if any(r.outcome is not None and r.outcome.interrupted for r in h.adapter.finished()):
            return "stopped"
    if any(NOTHING_RUNNING in n for h in hs for _, n in h.adapter.notices):
        return "told"
    return None


async def stopped_or_told(a: Harness, b: Harness) -> str:
    # Not a speed check: a lost Stop never answers, and the test must end.
    with anyio.fail_after(30):
        while (seen := outcome(a, b)) is None:
            await anyio.sleep(0.05)
    return seen


async def idle_holder(a: Harness, b: Harness) -> tuple[Harness, Harness]:
    """(the instance that runs the thread, its agy idle after a first turn; the other one).
    Usually A, which stored the message; B, sweeping for waiting work, may claim it first."""
    await a.say("one")
    with anyio.fail_after(30):
        while not (holders := [h for h in (a, b) if h.adapter.finished()]):
            await anyio.sleep(0.05)
    [holder] = holders
    other = b if holder is a else a
    await holder.bridge.core.threads[thread().key].wait_until(lambda s: s.phase is Phase.IDLE)
    return holder, other


async def evicted(a: Harness) -> None:
    """A's actor ends with nothing to do (another thread wanted its slot) and is gone."""
    a.bridge.core.threads[thread().key].tell(c.Evicted())
    await a.worker_gone()


Moment = Callable[[Harness, Harness, str], Awaitable[None]]


async def stop_while_held(
    a: Harness, b: Harness, text: str, held: tuple[anyio.Event, anyio.Event]
) -> None:
    """A says ``text``; B sends its Stop while A is held (``held``: reached, go on)."""
    reached, go_on = held
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.say, text)
        await reached.wait()
        await b.bridge.core.stop(thread(), BOB)
        go_on.set()


async def stored_not_yet_claimed(a: Harness, b: Harness, text: str) -> None:
    """A stored the message; its claim has not reached the database (B sees no holder)."""
    await stop_while_held(a, b, text, pause(a.bridge.core.cluster, "claim"))


async def claimed_actor_not_started(a: Harness, b: Harness, text: str) -> None:
    """A's lease is written; A's actor does not exist yet."""
    await stop_while_held(a, b, text, pause_after(a.bridge.core.cluster, "claim"))


async def taken_not_begun(a: Harness, b: Harness, text: str) -> None:
    """A's turn took the message from the inbox and has not begun."""
    taken, go_on = hold_after_taking(a.bridge.store, b.bridge.store)
    await a.say(text)
    await taken.wait()
    await b.bridge.core.stop(thread(), BOB)
    go_on.set()


async def left_lease_kept(a: Harness, b: Harness, text: str) -> None:
    """A's actor has ended and is gone; A has not given the lease back yet when B stores the
    message (B's claim fails: it tells A) and sends the Stop to A."""
    a, b = await idle_holder(a, b)
    reached, go_on = pause(a.bridge.core.cluster, "release")
    await evicted(a)
    await reached.wait()
    await b.say(text)
    await b.bridge.core.stop(thread(), BOB)
    go_on.set()


async def left_lease_given_back(a: Harness, b: Harness, text: str) -> None:
    """B read the lease as A's and sent the Stop there; it arrives once A has given the lease
    back and the thread has been taken for the message (by B, which heard of it; A heard
    nothing, though its sweep may take it)."""
    a, b = await idle_holder(a, b)
    a.bridge.core.router.stored = lambda key: None  # type: ignore[method-assign]
    released, release = pause(a.bridge.core.cluster, "release")
    await evicted(a)
    await released.wait()
    await b.say(text)  # B's claim fails: A still holds the lease
    sending, send = pause(b.bridge.core.leases, "send_control")
    async with anyio.create_task_group() as tg:
        tg.start_soon(b.bridge.core.stop, thread(), BOB)
        await sending.wait()
        release.set()  # A gives the lease back; B hears of the waiting message and takes it
        with anyio.fail_after(30):
            # Usually B; A's sweep for waiting work may take it first (then the Stop finds it).
            while not any(thread().key in h.bridge.core.threads for h in (a, b)):
                await anyio.sleep(0.05)
        send.set()


async def leaving_not_yet_told(a: Harness, b: Harness, text: str) -> None:
    """A's actor is leaving with nothing to do (its agy still closing) when B stores the
    message; B's word of it has not reached A when B's Stop does (a third instance's Stop comes
    in no order with B's word)."""
    a, b = await idle_holder(a, b)
    a.bridge.core.router.stored = lambda key: None  # type: ignore[method-assign]
    actor = a.bridge.core.threads[thread().key]
    go_on = await leaving_slowly(actor)
    await b.say(text)  # B's claim fails: A still holds the lease
    await b.bridge.core.stop(thread(), BOB)
    with anyio.fail_after(30):
        # A has answered the Stop, or kept it for the actor's successor.
        while actor.state.stop_by is None and outcome(a, b) is None:
            await anyio.sleep(0.05)
    go_on.set()


MOMENTS: dict[str, Moment] = {
    "stored, not yet claimed": stored_not_yet_claimed,
    "claimed, actor not started": claimed_actor_not_started,
    "taken, turn not begun": taken_not_begun,
    "actor gone, lease kept": left_lease_kept,
    "actor gone, lease given back": left_lease_given_back,
    "actor leaving, message not yet heard of": leaving_not_yet_told,
}


@pytest.mark.parametrize("moment", MOMENTS)
async def test_a_stop_from_the_other_instance_is_never_lost(
    tmp_path: Path, postgres: Postgres, moment: str
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        go = a.flag("go")
        try:
            await MOMENTS[moment](a, b, f"long job [[hold {go}]]")
            seen = await stopped_or_told(a, b)
        finally:
            go.touch()  # a turn that ran on ends (the instances drain)
        # The message was accepted before the Stop: its turn is the one stopped, and nobody is
        # told that nothing runs.
        assert seen == "stopped", (a.adapter.notices, b.adapter.notices)
        assert not [n for h in (a, b) for _, n in h.adapter.notices if NOTHING_RUNNING in n]
        [stopped] = [
            r.outcome
            for h in (a, b)
            for r in h.adapter.finished()
            if r.outcome is not None and r.outcome.interrupted
        ]
        assert "Stopped by Bob" in " ".join(stopped.notes)
