"""Two bridge instances in one process on one PostgreSQL: threads leased, wake-ups, Stop, drain.

Each instance has its own data directory and chat adapter (as two hosts would); the agy
simulator's home is shared, as agy's state on shared storage would be. Process-level kills are
in tests/faults/test_instances.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.app import open_bridge, start_adapters
from bridge.config import build_config
from bridge.core.approvals import gate
from bridge.core.events import (
    ApprovalChoice,
    Author,
    ChangeOutcome,
    DecideOutcome,
    IncomingMessage,
    MessageChange,
)
from bridge.core.store.opening import open_store
from bridge.core.store.rows import ApprovalState
from bridge.core.thread import wire
from bridge.core.thread.commands import Decide
from tests.core.harness import (
    SIMULATOR,
    SIMULATOR_ENV,
    Harness,
    RecordingAdapter,
    heard_once_listening,
    hold_after_taking,
    thread,
)
from tests.deadline import Deadline
from tests.doubles import signed_in
from tests.faults.console import sim_conversation_messages
from tests.pg import Postgres

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def instance(
    tmp: Path,
    name: str,
    url: str,
    *,
    max_processes: int = 4,
    sim_home: str = "sim-home",
    approvals: dict[str, Any] | None = None,
    listen_after: anyio.Event | None = None,
    lease_seconds: float | None = None,
) -> AsyncIterator[Harness]:
    """One instance. Its leases last the product's default unless a test waits for a lease to
    lapse or for the sweep of threads nobody holds (its pace is a third of the lease): under
    load a short lease lapses while the instance runs the thread (3 s: a stall of the event
    loop over 2 s), and the other instance takes it over, which is legitimate but not what a
    test that assumes the thread stays where it is checks."""
    (tmp / "flags").mkdir(exist_ok=True)
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    raw: dict[str, Any] = {
        "bridge": {"data_dir": str(tmp / name)},
        "agy": {
            "command": SIMULATOR,
            "pass_env": SIMULATOR_ENV,
            "init_timeout": 20,
            "stop_grace": 2,
            "max_processes": max_processes,
            # The tests hand the agent flag files outside its workspace.
            "isolation": "none",
            # agy's state (unsandboxed: the simulator's home itself); another one stands for
            # an instance on another host.
            "env": {"AGY_SIM_HOME": str(signed_in(tmp / sim_home))},
        },
        "store": {
            "url": url,
            "instance": name,
            "drain_seconds": 20,
            **({} if lease_seconds is None else {"lease_seconds": lease_seconds}),
        },
        "approvals": {"mode": "ask", "timeout": 60, **(approvals or {})},
    }
    adapter = RecordingAdapter()
    async with open_bridge(build_config(raw, environ={}), {"test": adapter}) as bridge:
        if listen_after is not None:
            deaf_until(bridge, listen_after)
        listening = heard_once_listening(bridge)
        await bridge.core.recover()
        if listen_after is None:
            with anyio.fail_after(30):
                await listening.wait()
        yield Harness(bridge, adapter, tmp)


def deaf_until(bridge: Any, event: anyio.Event) -> None:
    """The instance hears no notification until ``event`` is set (its listening connection is
    slow to open, or is opened again after a cut)."""
    db = bridge.store.database
    listen = db.listen

    async def late(*args: Any, **kwargs: Any) -> None:
        await event.wait()
        await listen(*args, **kwargs)

    db.listen = late


@asynccontextmanager
async def two(tmp: Path, url: str, **kw: Any) -> AsyncIterator[tuple[Harness, Harness]]:
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(tmp, "a", url, **kw))
        b = await stack.enter_async_context(instance(tmp, "b", url, **kw))
        yield a, b


BOB = Author(id="@bob:test", display_name="Bob")
EVE = Author(id="@eve:test", display_name="Eve")


async def asked(a: Harness, b: Harness) -> tuple[Harness, Harness, str]:
    """(the instance that asked for an approval, the other one, the request's handle).

    Usually the instance that stored the message runs the thread, but the other one, sweeping
    for waiting work as it starts, may claim it first."""
    await until(lambda: a.adapter.requests or b.adapter.requests)
    holder, other = (a, b) if a.adapter.requests else (b, a)
    return holder, other, "req-1"


def holder_first(a: Harness, b: Harness) -> tuple[Harness, Harness]:
    """(the instance that runs the thread, the other one), once a turn of it has started.

    Usually the instance that stored the message, but the other one, sweeping for waiting work
    (at its start, then every third of the lease time), may claim the thread first."""
    return (a, b) if thread().key in a.bridge.core.threads else (b, a)


def workdir(h: Harness) -> Path:
    [worker] = h.bridge.core.threads.values()
    assert worker.place is not None
    return worker.place.workdir


def answered(*hs: Harness) -> list[str]:
    return [r.thread.thread for h in hs for r in h.adapter.finished()]


async def until(predicate: Any, timeout: float = 60) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.05)


async def test_twenty_threads_spread_over_two_instances_each_answered_once(
    tmp_path: Path, postgres: Postgres, deadline: Deadline
) -> None:
    # A full instance leaves a new thread to the sweep for two of its periods (a third of the
    # lease each): the 3 s lease keeps 20 threads over 6 processes within the test's time.
    url = postgres.new_database()
    async with two(tmp_path, url, max_processes=3, lease_seconds=3) as (a, b):
        for n in range(20):
            # Every message arrives at A: at its limit A leaves new threads to B.
            await a.say(f"hello {n}", where=thread(f"t{n:02d}"))
        # 20 simulator turns beside other tests' work: as long as the test may take (a fixed
        # 60 s ran out beside two other workers).
        await until(lambda: len(answered(a, b)) >= 20, timeout=deadline.seconds_left())
        assert sorted(answered(a, b)) == sorted(f"t{n:02d}" for n in range(20))
        assert a.adapter.finished() and b.adapter.finished(), "both instances served threads"
        # Later messages of a thread reach the instance holding it, wherever they arrive.
        for n in range(4):
            await b.say(f"again {n}", where=thread(f"t{n:02d}"), event_id=f"again-{n}")
        await until(lambda: len(answered(a, b)) >= 24, timeout=deadline.seconds_left())
        assert sorted(answered(a, b)).count("t00") == 2


async def test_each_instances_first_message_is_its_own_not_the_others_duplicate(
    tmp_path: Path, postgres: Postgres
) -> None:
    """The harness's counted event ids stand for the platform's, unique across instances:
    both instances' first messages are answered (a shared "m1" dropped the second as a
    duplicate, and a test that then waited for its turn hung)."""
    async with two(tmp_path, postgres.new_database()) as (a, b):
        first, second = (
            await a.say("one", where=thread("x1")),
            await b.say("two", where=thread("x2")),
        )
        assert first != second
        await until(lambda: sorted(answered(a, b)) == ["x1", "x2"], timeout=30)


async def test_a_stop_click_at_the_other_instance_stops_the_turn(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        started = a.flag("started")
        await a.say(f"long [[touch {started}]] [[sleep 60]]")
        await until(started.exists)
        a, b = holder_first(a, b)
        await b.bridge.core.stop(thread(), Author(id="@bob:test", display_name="Bob"))
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.interrupted
        assert "Stopped by Bob" in " ".join(reply.outcome.notes)
        assert not b.adapter.notices, "B said nothing: the holder handled the click"
        await b.say("!status", event_id="status")
        notice = await b.adapter.wait_notice("Instance")
        holder, asker = a.bridge.core.leases.name, b.bridge.core.leases.name
        assert f"`{holder}` runs this thread (asked `{asker}`)" in notice


async def test_graceful_drain_finishes_turns_and_hands_the_rest_over(
    tmp_path: Path, postgres: Postgres
) -> None:
    url = postgres.new_database()
    async with instance(tmp_path, "a", url) as a:
        flags = [a.flag(f"started-{n}") for n in range(4)]
        for n, flag in enumerate(flags):
            await a.say(f"busy {n} [[touch {flag}]] [[sleep 2]]", where=thread(f"d{n}"))
        await until(lambda: all(f.exists() for f in flags))
        async with instance(tmp_path, "b", url) as b:
            # More work lands on A's threads while their turns run, and A drains: it finishes
            # those turns and leaves the rest to B (the turns' 2 s make it likely that the drain
            # starts before they end; the checks below hold either way).
            for n in range(4):
                await b.say(f"later {n}", where=thread(f"d{n}"), event_id=f"later-{n}")
            await a.bridge.core.shutdown()
            assert not a.bridge.core.threads
            leases = await a.bridge.store.database.fetch("SELECT owner FROM leases")
            assert not [r for r in leases if r["owner"].startswith("a#")], "A let its leases go"
            texts = [f"busy {n}" for n in range(4)] + [f"later {n}" for n in range(4)]

            def delivered() -> list[str]:
                sent = sim_conversation_messages(tmp_path / "sim-home", ("user", "injected"))
                return [t for t in texts for m in sent if t in m]

            # A later message may join a running turn (injected) or make a turn of its own.
            await until(
                lambda: (
                    len(delivered()) >= 8
                    and not any(w.busy for w in b.bridge.core.threads.values())
                )
            )
            assert sorted(delivered()) == sorted(texts), "each message reached agy once"
            finished = [r for h in (a, b) for r in h.adapter.finished()]
            assert all(r.outcome is not None and r.outcome.error is None for r in finished)
            assert all(r.outcome is not None and not r.outcome.interrupted for r in finished)
            assert len(a.adapter.finished()) >= 4, "A finished the turns it was running"


async def test_a_drain_waits_for_a_turn_still_taking_its_messages(
    tmp_path: Path, postgres: Postgres
) -> None:
    """SIGTERM just as a turn has taken its messages from the inbox, before it runs: the drain
    must count that turn as running and let it finish. Ending the lease there would cancel it
    with its messages taken: neither answered nor left for another instance."""
    async with instance(tmp_path, "a", postgres.new_database()) as a:
        store = a.bridge.store
        taken, go_on = hold_after_taking(store)
        await a.say("hello [[reply hi there]]")
        with anyio.fail_after(30):
            await taken.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.bridge.core.shutdown)
            await anyio.sleep(0.5)  # the drain has looked for running turns by now
            go_on.set()
        [reply] = a.adapter.finished()
        assert reply.outcome is not None and reply.outcome.error is None
        assert not reply.outcome.interrupted and "hi there" in reply.outcome.final_text
        assert not await store.running_turns() and not await store.threads_with_pending()


async def test_a_thread_moved_where_its_agy_state_is_out_of_reach_starts_over_with_its_history(
    tmp_path: Path, postgres: Postgres
) -> None:
    url = postgres.new_database()
    async with instance(tmp_path, "a", url) as a:
        await a.say("remember the word [[reply ok, zebra]]")
        await a.adapter.wait_finished(1)
        await a.bridge.core.shutdown()
    async with instance(tmp_path, "b", url, sim_home="sim-home-b") as b:
        await b.say("what was the word?", event_id="question")
        [reply] = await b.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        # B's agy has never held a conversation, so B cannot tell from its files: agy is
        # asked, refuses the id, and the thread is told.
        await b.adapter.wait_notice("given this thread's history as context")
        row = await b.bridge.store.thread(thread().key)
        assert row.conversation_instance == "b"
        # agy got the thread's history ahead of the question, in the new conversation only.
        given = [
            t
            for t in sim_conversation_messages(tmp_path / "sim-home-b", ("user",))
            if "history so far" in t
        ]
        [turn] = given
        assert turn.count("what was the word") == 1
        assert turn.index("zebra") < turn.index("what was the word")


class MatrixLike(RecordingAdapter):
    """Stands in for the Matrix adapter (the one chat whose client state is local files)."""

    platform = "matrix"
    # Declared, as the Matrix adapter declares it (the core names no platform).
    single_instance = True

    def __init__(self) -> None:
        super().__init__()
        self.running = anyio.Event()

    async def run(self, inbound: Any, started: Any) -> None:
        self.running.set()
        started()
        await anyio.sleep_forever()


@asynccontextmanager
async def matrix_instance(tmp: Path, name: str, url: str, data: str) -> AsyncIterator[MatrixLike]:
    raw: dict[str, Any] = {
        "bridge": {"data_dir": str(tmp / data)},
        "agy": {"command": SIMULATOR, "pass_env": SIMULATOR_ENV, "state_dirs": []},
        "store": {"url": url, "instance": name, "lease_seconds": 1.5},
    }
    adapter = MatrixLike()
    async with (
        open_bridge(build_config(raw, environ={}), {"matrix": adapter}) as bridge,
        anyio.create_task_group() as tg,
    ):
        await start_adapters(bridge, tg)
        yield adapter
        tg.cancel_scope.cancel()


async def test_matrix_runs_on_one_instance_and_moves_only_with_its_files(
    tmp_path: Path, postgres: Postgres, caplog: pytest.LogCaptureFixture
) -> None:
    url = postgres.new_database()
    async with matrix_instance(tmp_path, "a", url, "data-a") as a:
        await a.running.wait()
        async with matrix_instance(tmp_path, "b", url, "data-b") as b:
            assert not b.running.is_set(), "one instance at a time syncs Matrix"
    # A is gone; B's data_dir is not A's, so B must not take Matrix over.
    async with matrix_instance(tmp_path, "b", url, "data-b") as b:
        with anyio.fail_after(30):
            while "cannot take over the matrix role from instance a" not in caplog.text:
                await anyio.sleep(0.05)
        assert not b.running.is_set()
    # An instance on A's data directory (shared storage) does take it over.
    async with matrix_instance(tmp_path, "c", url, "data-a") as c:
        with anyio.fail_after(30):
            await c.running.wait()


async def test_a_worker_whose_lease_was_taken_stops(tmp_path: Path, postgres: Postgres) -> None:
    url = postgres.new_database()
    # A finds the lease taken at its next renewal, every third of the lease.
    async with instance(tmp_path, "a", url, lease_seconds=3) as a:
        started = a.flag("started")
        await a.say(f"long [[touch {started}]] [[sleep 60]]")
        await until(started.exists)
        # Another instance holds the thread now (A was cut off from the database too long).
        async with a.bridge.store.database.transaction() as tx:
            await tx.execute("UPDATE leases SET owner = 'elsewhere#1'")
        await a.worker_gone()
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.interrupted


async def test_an_approval_click_at_the_other_instance_reaches_the_holder(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        await a.say("[[tool run_command touch clicked.txt]]")
        a, b, handle = await asked(a, b)
        folder = workdir(a)
        outcome = await b.bridge.core.decide(thread(), handle, ApprovalChoice.APPROVE, BOB)
        assert outcome is DecideOutcome.DECIDED
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        assert (folder / "clicked.txt").exists()
        settled = a.adapter.settled[handle]
        assert settled.state == "approved" and "Approved by Bob" in settled.text
        # Decided: a second answer, at either instance, changes nothing.
        again = await b.bridge.core.decide(thread(), handle, ApprovalChoice.DENY, BOB)
        assert again is DecideOutcome.UNKNOWN
        assert a.adapter.calls["settle_approval"] == 1
        assert not b.adapter.requests and not b.adapter.settled and not b.adapter.notices


async def test_a_typed_deny_at_the_other_instance_reaches_the_holder(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        await a.say("[[tool run_command touch nope.txt]]")
        a, b, handle = await asked(a, b)
        folder = workdir(a)
        await b.say("deny 1: use the staging db", who="bob", event_id="answer")
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert "denied by Bob: use the staging db" in reply.outcome.final_text
        assert a.adapter.settled[handle].state == "denied"
        assert not (folder / "nope.txt").exists()
        sent = sim_conversation_messages(tmp_path / "sim-home", ("user", "injected"))
        assert not [m for m in sent if "staging" in m], "the answer was not a message to agy"
        # With nothing waiting, the same words are a message for the agent again.
        await b.say("deny: that one", who="bob", event_id="later")
        await until(lambda: len(answered(a, b)) >= 2)


async def test_a_bare_answer_sent_before_the_request_decides_nothing_at_the_holder(
    tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through another instance an answer reaches the gate late (a notification, a loaded
    # host): the bridge's clock alone would take it. When its author sent it travels with it,
    # so an `approve` written before the request was shown does not decide it.
    monkeypatch.setattr(gate, "REACTION_SECONDS", 0.0)  # the bridge's clock never refuses
    async with two(tmp_path, postgres.new_database()) as (a, b):
        written = datetime.now(UTC)
        await a.say("[[tool run_command touch stale.txt]]")
        a, b, handle = await asked(a, b)
        folder = workdir(a)
        await b.say("approve", who="bob", event_id="stale", sent_at=written)
        notice = await a.adapter.wait_notice("decided nothing")
        assert "Request 1 waits" in notice and handle not in a.adapter.settled
        # Sent after the request was shown: a bare answer decides it.
        await b.say("approve", who="bob", event_id="fresh", sent_at=datetime.now(UTC))
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        assert a.adapter.settled[handle].state == "approved"
        assert (folder / "stale.txt").exists()


async def test_a_forwarded_decision_is_checked_by_the_holder_and_taken_once(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database(), approvals={"approvers": ["@bob:test"]}) as (
        a,
        b,
    ):
        await a.say("[[tool run_command touch once.txt]]")
        a, b, handle = await asked(a, b)
        folder = workdir(a)
        # Checked where the click arrives, so Eve is told at once (privately, by the adapter).
        outcome = await b.bridge.core.decide(thread(), handle, ApprovalChoice.APPROVE, EVE)
        assert outcome is DecideOutcome.NOT_APPROVER
        # And again by the holder, with the same config: a decision that got past another
        # instance's check changes nothing.
        leases = b.bridge.core.leases
        key = thread().key

        async def send(decision: Decide) -> None:
            await leases.send_control(key, wire.encode(key, decision))

        await send(Decide(handle, ApprovalChoice.APPROVE, EVE))
        await a.adapter.wait_notice("may not answer approval requests")
        assert handle not in a.adapter.settled
        # Two decisions forwarded back to back: the first settles the request, the second
        # flips nothing.
        await send(Decide(handle, ApprovalChoice.DENY, BOB, "not today"))
        await send(Decide(handle, ApprovalChoice.APPROVE, BOB))
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None and "not today" in reply.outcome.final_text
        assert a.adapter.settled[handle].state == "denied"
        assert a.adapter.calls["settle_approval"] == 1
        assert not (folder / "once.txt").exists()


async def test_a_dead_instances_waiting_request_expires_at_takeover_a_live_ones_waits_on(
    tmp_path: Path, postgres: Postgres
) -> None:
    url = postgres.new_database()
    # The product's lease: the dead thread is found by a sweep within 10 s (a third of it),
    # and the live one stays at its instance under load (with a 3 s lease, a stall of over 2 s
    # would let the other instance take it over and expire its request as a dead one's).
    async with two(tmp_path, url) as (a, b):
        await a.say("[[tool run_command touch live.txt]]", where=thread("live"))
        a, b, handle = await asked(a, b)
        folder = workdir(a)
        # What a SIGKILLed instance leaves: its lease lapsed, its turn running, its request
        # waiting with its message posted.
        dead = thread("dead")
        async with open_store(url) as store:
            await store.database.execute(
                "INSERT INTO leases (thread_key, owner, expires_at) VALUES (?, ?, 0)",
                (dead.key, "gone#1"),
            )
            await store.add_approval(
                "old", dead.key, "run_command", {"CommandLine": "rm x"}, "rm x", None
            )
            await store.set_approval_handle("old", "req-old")
            await store.ensure_thread(dead)
            alice = Author(id="@alice:test", display_name="Alice")
            await store.add_message(
                IncomingMessage(
                    thread=dead, event_id="d1", message_id="d1", author=alice, text="rm x"
                )
            )
            await store.take_turn(dead.key, None, owner="gone#1")
        # Whichever instance takes the dead thread over expires its request.
        await until(lambda: "req-old" in a.adapter.settled or "req-old" in b.adapter.settled)
        result = a.adapter.settled.get("req-old") or b.adapter.settled["req-old"]
        assert result.state == "expired"
        assert "instance gone stopped while it waited" in result.text
        # The live instance's request still waits, and runs when approved.
        row = await a.bridge.store.approval_by_handle(thread("live").key, handle)
        assert row is not None and row.state is ApprovalState.WAITING
        assert handle not in a.adapter.settled
        outcome = await b.bridge.core.decide(thread("live"), handle, ApprovalChoice.APPROVE, BOB)
        assert outcome is DecideOutcome.DECIDED
        await a.adapter.wait_finished(1, thread("live"))
        assert (folder / "live.txt").exists()


async def test_a_stop_at_the_other_instance_while_a_request_waits_denies_it(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        await a.say("[[tool run_command touch stopped.txt]]")
        a, b, handle = await asked(a, b)
        folder = workdir(a)
        await b.bridge.core.stop(thread(), BOB)
        [reply] = await a.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.interrupted
        settled = a.adapter.settled[handle]
        assert settled.state == "stopped", "denied as a Stop at the holder would"
        assert not (folder / "stopped.txt").exists()
        assert not b.adapter.notices


async def test_a_task_runs_on_one_instance_at_a_time(tmp_path: Path, postgres: Postgres) -> None:
    """A chat's catch-up after a reconnect: while one instance holds it, another skips it."""
    async with two(tmp_path, postgres.new_database()) as (a, b):
        async with a.bridge.core.exclusive("catch-up|slack") as mine:
            assert mine
            async with b.bridge.core.exclusive("catch-up|slack") as theirs:
                assert not theirs
        async with b.bridge.core.exclusive("catch-up|slack") as theirs:
            assert theirs


async def test_a_change_that_arrives_at_the_other_instance_reaches_the_thread(
    tmp_path: Path, postgres: Postgres
) -> None:
    """Alice edits messages; Slack hands the edits to B while A runs the thread."""
    gate = {"mode": "off"}  # the turn holds on a command that waits for a file
    async with two(tmp_path, postgres.new_database(), approvals=gate) as (a, b):
        started, go = a.flag("started"), a.flag("go")
        hold = f"[[tool run_command until [ -e {go} ]; do sleep 0.05; done]]"
        first = await a.say(f"deploy [[touch {started}]] {hold}")
        with anyio.fail_after(20):
            while not started.exists():
                await anyio.sleep(0.02)
        a, b = holder_first(a, b)
        # Its own id: each harness numbers its messages from m1.
        waiting = await a.say("use the staging db", event_id="staging")
        alice = Author(id="@alice:test", display_name="Alice")

        def edit(mid: str, text: str, event: str) -> MessageChange:
            return MessageChange(
                thread=thread(), event_id=event, message_id=mid, author=alice, text=text
            )

        # Still waiting: revised in the shared store, wherever the change arrives.
        assert await b.bridge.core.change(edit(waiting, "use the production db", "e1")) is (
            ChangeOutcome.REVISED
        )
        go.touch()
        replies = await a.adapter.wait_finished(2, timeout=40)
        assert replies[1].outcome is not None
        assert "use the production db" in replies[1].outcome.final_text
        assert "staging" not in replies[1].outcome.final_text
        # Already the agent's: B tells A, whose next turn hears of it, once.
        assert await b.bridge.core.change(edit(first, "deploy to prod", "e2")) is (
            ChangeOutcome.TOLD
        )
        replies = await a.adapter.wait_finished(3, timeout=40)
        assert replies[2].outcome is not None
        assert "Alice edited their message" in replies[2].outcome.final_text
        assert not b.adapter.finished()


async def test_a_wake_up_sent_while_the_holder_was_not_listening_reaches_its_thread(
    tmp_path: Path, postgres: Postgres
) -> None:
    """A message for A's idle thread arrives at B while A hears no notification (its listening
    connection not yet open, or opened again after a cut): once A listens, it looks for what
    it missed in its own threads too, not only for threads nobody holds."""
    url = postgres.new_database()
    listening = anyio.Event()
    async with instance(tmp_path, "a", url, listen_after=listening) as a:
        await a.say("hello")
        await a.adapter.wait_finished(1)
        async with instance(tmp_path, "b", url) as b:
            await b.say("again", event_id="again")  # B announces it to A, which is deaf
            listening.set()
            await a.adapter.wait_finished(2)
            assert not b.adapter.finished()
