"""Exactly once across instances: two schedulers, each with its own connection pool and its own
clock, on one PostgreSQL store tick at random moments of every minute (concurrently, clocks a
few seconds apart); a schedule that runs every minute runs once per minute, by one of them, in
every trial. The claim itself holds on both databases."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from bridge.config import build_config
from bridge.core.capabilities import Opened
from bridge.core.events import Author, ChannelRef, ThreadRef
from bridge.core.schedules.scheduler import Scheduler
from bridge.core.schedules.store import RunState, ScheduleStore
from bridge.core.store import Store
from bridge.core.store.opening import open_store
from tests.core.schedules.fake_clock import utc
from tests.pg import Postgres

pytestmark = pytest.mark.anyio

TRIALS = 12
MINUTES = 12


@dataclass
class SetClock:
    at: datetime

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("these schedulers are ticked by the test")


@dataclass
class Instance:
    """What the scheduler uses of a core, recording the turns it starts."""

    name: str
    store: Store
    config: Any
    started: list[tuple[str, str, str]] = field(default_factory=list)  # instance, place, event

    def __post_init__(self) -> None:
        self.adapters = {"test": SimpleNamespace()}
        self.cluster = SimpleNamespace(serves=lambda platform: True)
        self.team = None

    async def start_thread(
        self,
        place: ChannelRef,
        text: str,
        author: Author,
        *,
        model: Any,
        event_id: str,
        workspace: str | None,
    ) -> ThreadRef:
        await anyio.sleep(random.random() * 0.005)  # opening a thread takes a while
        self.started.append((self.name, place.channel, event_id))
        return ThreadRef(platform="test", channel=place.channel, thread=event_id)

    async def open_thread(self, channel: str, text: str) -> Opened:  # pragma: no cover
        raise AssertionError("nothing is skipped in this test")


def every_minute(names: list[str]) -> Any:
    schedules = [
        {"name": name, "cron": "* * * * *", "chat": "test", "channel": name, "prompt": "tick"}
        for name in names
    ]
    return build_config({"schedules": schedules}, environ={})


async def test_two_instances_make_each_minutes_run_once(postgres: Postgres) -> None:
    url = postgres.new_database()
    rng = random.Random(44)
    names = [f"trial-{n}" for n in range(TRIALS)]
    config = every_minute(names)
    async with open_store(url) as one, open_store(url) as two:
        a, b = Instance("a", one, config), Instance("b", two, config)
        clocks = {"a": SetClock(utc("2027-03-01 00:00")), "b": SetClock(utc("2027-03-01 00:00"))}
        schedulers = [
            Scheduler(a, clocks["a"], "a"),  # type: ignore[arg-type]
            Scheduler(b, clocks["b"], "b"),  # type: ignore[arg-type]
        ]
        start = utc("2027-03-01 09:00")
        for minute in range(MINUTES + 1):
            base = start + timedelta(minutes=minute)
            # One to three ticks per instance in the minute, at random seconds, clocks apart
            # by up to 3 s; both instances' ticks of a moment run concurrently.
            moments = sorted(rng.uniform(5, 55) for _ in range(rng.randint(1, 3)))
            for second in moments:
                for name in clocks:
                    skew = rng.uniform(-3, 3)
                    clocks[name].at = base + timedelta(seconds=second + skew)
                async with anyio.create_task_group() as tg:
                    for scheduler in rng.sample(schedulers, 2):
                        tg.start_soon(scheduler.tick)
        started = a.started + b.started
        for name in names:
            runs = [event for _, channel, event in started if channel == name]
            # Minute 0 is when the schedule was first seen: runs from minute 1 on, once each.
            expected = [
                f"schedule-config:{name}-{int((start + timedelta(minutes=m)).timestamp())}"
                for m in range(1, MINUTES + 1)
            ]
            assert sorted(runs) == expected, name
        assert a.started and b.started, "both instances made runs"
        rows = await ScheduleStore(one.database).runs(f"config:{names[0]}", limit=100)
        assert len(rows) == MINUTES and all(r.state is RunState.STARTED for r in rows)


async def test_a_run_is_claimed_once(store_where: str) -> None:
    async with open_store(store_where) as store:
        runs = ScheduleStore(store.database)
        results: list[bool] = []

        async def claim(instance: str) -> None:
            results.append(await runs.claim("config:x", 1_800_000_000, instance, RunState.CLAIMED))

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(claim, f"i{n}")
        assert sorted(results) == [False] * 7 + [True]
        assert await runs.last_due("config:x") == 1_800_000_000


async def test_an_instance_that_does_not_serve_the_chat_claims_nothing(postgres: Postgres) -> None:
    url = postgres.new_database()
    config = every_minute(["elsewhere"])
    async with open_store(url) as one, open_store(url) as two:
        serving, other = Instance("a", one, config), Instance("b", two, config)
        other.adapters = {}  # no chat of that platform here
        clocks = [SetClock(utc("2027-03-01 09:00:30")), SetClock(utc("2027-03-01 09:00:30"))]
        bystander = Scheduler(other, clocks[1], "b")  # type: ignore[arg-type]
        for minute in range(3):
            clocks[1].at = utc("2027-03-01 09:00:30") + timedelta(minutes=minute)
            await bystander.tick()
        assert await ScheduleStore(two.database).created_at("config:elsewhere") is None
        worker = Scheduler(serving, clocks[0], "a")  # type: ignore[arg-type]
        for minute in range(3):
            clocks[0].at = utc("2027-03-01 09:00:30") + timedelta(minutes=minute)
            await worker.tick()
            await bystander.tick()
        assert len(serving.started) == 2 and other.started == []
