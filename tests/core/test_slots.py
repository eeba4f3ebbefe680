from __future__ import annotations

import anyio
import pytest

from bridge.core.slots import ProcessSlots

pytestmark = pytest.mark.anyio


async def test_waits_in_line_and_is_told_its_place() -> None:
    slots = ProcessSlots(1)
    told: list[int] = []
    got = anyio.Event()

    async def second() -> None:
        async def on_queued(position: int) -> None:
            told.append(position)

        async with slots.hold("b", on_queued):
            got.set()

    async def nothing(_: int) -> None:
        raise AssertionError("the first holder never waits")

    async with anyio.create_task_group() as tg:
        async with slots.hold("a", nothing):
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            assert told == [1] and slots.queued == 1 and not got.is_set()
        with anyio.fail_after(2):
            await got.wait()


async def test_an_idle_holder_is_asked_to_let_go() -> None:
    slots = ProcessSlots(1)

    async def never(_: int) -> None:
        return None

    async with anyio.create_task_group() as tg:
        async with slots.hold("a", never) as holder:
            slots.set_idle("a", True)
            tg.start_soon(_take, slots, "b")
            with anyio.fail_after(2):
                await holder.evict.wait()


async def _take(slots: ProcessSlots, key: str) -> None:
    async def never(_: int) -> None:
        return None

    async with slots.hold(key, never):
        pass


async def test_a_cancelled_waiter_leaves_the_line() -> None:
    slots = ProcessSlots(1)

    async def never(_: int) -> None:
        return None

    async with slots.hold("a", never):
        with anyio.move_on_after(0.05):
            async with slots.hold("b", never):
                raise AssertionError("should not get a slot")
        assert slots.queued == 0
    assert slots.live == 0
