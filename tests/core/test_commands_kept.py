"""Commands between instances (a Stop, an approval answer) sent while the instance they are for
hears no notification (its listening connection cut, or not yet open as it starts): kept in the
store until that instance listens and takes them, acted on once, dropped once stale."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import ApprovalChoice, Author, DecideOutcome
from bridge.core.leases import SharedLeases
from bridge.core.store.opening import open_store
from bridge.core.thread import wire
from bridge.core.thread.commands import Stop
from bridge.core.thread.machine import NOTHING_RUNNING
from tests.core.harness import thread
from tests.core.test_instances import BOB, instance, until, workdir
from tests.core.test_leases import KEY, Heard
from tests.pg import Postgres

pytestmark = pytest.mark.anyio


async def kept(url: str) -> int:
    async with open_store(url) as store:
        rows = await store.database.fetch("SELECT COUNT(*) AS n FROM commands")
    return int(rows[0]["n"])


async def test_a_stop_sent_while_the_holder_does_not_listen_stops_its_turn(
    tmp_path: Path, postgres: Postgres
) -> None:
    """A runs a long turn and hears nothing (its LISTEN not open yet: it has just started, or
    its connection is being opened again); B's Stop reaches the turn once A listens."""
    url = postgres.new_database()
    listening = anyio.Event()
    async with instance(tmp_path, "a", url, listen_after=listening) as a:
        await a.say("long job [[sleep 60]]")
        await until(lambda: thread().key in a.bridge.core.threads)
        actor = a.bridge.core.threads[thread().key]
        await actor.wait_until(lambda state: state.busy)
        async with instance(tmp_path, "b", url) as b:
            await b.bridge.core.stop(thread(), BOB)  # sent to A, which is deaf
            listening.set()
            [stopped] = await a.adapter.wait_finished(1, timeout=30)
            assert stopped.outcome is not None and stopped.outcome.interrupted
            assert stopped.outcome.notes == ["Stopped by Bob (@bob:test)."]
            assert not [n for h in (a, b) for _, n in h.adapter.notices if NOTHING_RUNNING in n]
            assert await kept(url) == 0, "taken by A"
            # Legitimate work goes on: the thread's next message is answered, not stopped (by
            # A, or by B: A's worker may leave after the stopped turn, and its lease, given
            # back with a message waiting, is taken by whichever instance claims first).
            await a.say("next")
            await until(lambda: len(a.adapter.finished()) + len(b.adapter.finished()) == 2, 30)
            [reply] = [r for r in a.adapter.finished() + b.adapter.finished() if r is not stopped]
            assert reply.outcome is not None and not reply.outcome.interrupted


async def test_an_approval_answer_sent_while_the_holder_does_not_listen_decides_once(
    tmp_path: Path, postgres: Postgres
) -> None:
    url = postgres.new_database()
    listening = anyio.Event()
    approvals = {"approvers": ["@bob:test"]}
    async with instance(tmp_path, "a", url, listen_after=listening, approvals=approvals) as a:
        await a.say("[[tool run_command touch once.txt]]")
        await until(lambda: a.adapter.requests)
        folder = workdir(a)
        async with instance(tmp_path, "b", url, approvals=approvals) as b:
            outcome = await b.bridge.core.decide(thread(), "req-1", ApprovalChoice.APPROVE, BOB)
            assert outcome is DecideOutcome.DECIDED
            listening.set()
            [reply] = await a.adapter.wait_finished(1, timeout=30)
            assert reply.outcome is not None and not reply.outcome.interrupted
            assert (folder / "once.txt").exists()
            [request] = a.adapter.settled.values()
            assert request.state == "approved"
            assert a.adapter.calls["settle_approval"] == 1
            assert await kept(url) == 0


async def test_a_kept_command_is_handed_on_once_and_a_stale_one_dropped(
    postgres: Postgres,
) -> None:
    """The store's side: a command sent to a run is read when that run listens again, taken
    once whichever way it arrived, and dropped once older than a lease."""
    url = postgres.new_database()
    async with open_store(url) as store_a, open_store(url) as store_b:
        a, b = SharedLeases(store_a, "a", 30), SharedLeases(store_b, "b", 30)
        stop = wire.encode(KEY, Stop(Author(id="U0BOB")), to=a.owner, id="c1")
        await b.send_control(KEY, stop, command_id="c1", to=a.owner)
        other = wire.encode(KEY, Stop(Author(id="U0BOB")), to=b.owner, id="c2")
        await a.send_control(KEY, other, command_id="c2", to=b.owner)
        heard = Heard()
        await a._caught_up(heard)
        assert heard.controls == [stop], "only what was sent to this run"
        assert await a.take_command("c1")
        assert not await b.take_command("c1"), "taken once"
        # A command sent without being kept (an older instance's) is only notified.
        await b.send_control(KEY, wire.encode(KEY, Stop(Author(id="U0BOB"))))
        assert await kept(url) == 1
        async with store_a.database.transaction() as tx:
            await tx.execute("UPDATE commands SET sent_at = sent_at - 31")
        await a._forget_old_commands()
        assert await kept(url) == 0
        assert not await b.take_command("c2"), "dropped once stale"
