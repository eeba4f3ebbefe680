"""The throttled flush pump: coalesces pokes, honours the interval, stops after a flush."""

from __future__ import annotations

import anyio
import pytest

from bridge.chat.common.pump import FlushPump

pytestmark = pytest.mark.anyio


async def test_pokes_during_a_flush_coalesce_into_one_more_flush() -> None:
    release = anyio.Event()
    started = anyio.Event()
    calls: list[int] = []
    second = anyio.Event()

    async def flush() -> float | None:
        calls.append(len(calls))
        started.set()
        if len(calls) == 1:
            await release.wait()
        else:
            second.set()
        return None

    pump = FlushPump(flush, lambda: 0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump.run)
        pump.poke()
        await started.wait()
        for _ in range(5):
            pump.poke()
        release.set()
        await second.wait()
        await pump.stop()
    assert calls == [0, 1]


async def test_stop_waits_for_the_flush_in_flight() -> None:
    release = anyio.Event()
    started = anyio.Event()
    order: list[str] = []

    async def flush() -> float | None:
        started.set()
        await release.wait()
        order.append("flushed")
        return None

    async def stopper(pump: FlushPump) -> None:
        await pump.stop()
        order.append("stopped")

    pump = FlushPump(flush, lambda: 0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump.run)
        pump.poke()
        await started.wait()
        tg.start_soon(stopper, pump)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert order == ["flushed", "stopped"]


async def test_stop_cuts_a_long_rest_short_and_no_flush_follows() -> None:
    flushed = anyio.Event()
    calls = 0

    async def flush() -> float | None:
        nonlocal calls
        calls += 1
        flushed.set()
        return None

    pump = FlushPump(flush, lambda: 3600.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump.run)
        pump.poke()
        await flushed.wait()
        pump.poke()  # due only after the hour's rest
        await pump.stop()
    assert calls == 1
    assert pump.stopping


async def test_a_flush_asks_to_run_again_without_a_poke() -> None:
    calls = 0
    again = anyio.Event()

    async def flush() -> float | None:
        nonlocal calls
        calls += 1
        if calls == 2:
            again.set()
            return None
        return 0.0

    pump = FlushPump(flush, lambda: 3600.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump.run)
        pump.poke()
        await again.wait()
        await pump.stop()
    assert calls == 2


async def test_a_failing_flush_does_not_end_the_pump() -> None:
    calls = 0
    done = anyio.Event()

    async def flush() -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        done.set()
        return None

    pump = FlushPump(flush, lambda: 0.0, name="test")
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump.run)
        pump.poke()
        await anyio.wait_all_tasks_blocked()
        pump.poke()
        await done.wait()
        await pump.stop()
    assert calls == 2


async def test_stop_before_run_starts_returns_and_run_ends_at_once() -> None:
    async def flush() -> float | None:
        raise AssertionError("no flush after stop")

    pump = FlushPump(flush, lambda: 0.0)
    pump.poke()
    await pump.stop()
    await pump.run()
