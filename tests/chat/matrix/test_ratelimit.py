"""Bounded, per-room handling of M_LIMIT_EXCEEDED."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest
from nio import ErrorResponse, RoomSendResponse

from bridge.chat.matrix.ratelimit import RetryPolicy, RoomSendQueue, retry_after

pytestmark = pytest.mark.anyio


def _limited(ms: int | None) -> ErrorResponse:
    return ErrorResponse("Too Many Requests", "M_LIMIT_EXCEEDED", retry_after_ms=ms)


def _ok(n: int) -> RoomSendResponse:
    return RoomSendResponse(event_id=f"$e{n}", room_id="!r")


class Waits:
    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await anyio.lowlevel.checkpoint()


def test_retry_after_reads_only_rate_limit_errors() -> None:
    assert retry_after(_limited(1500)) == 1.5
    assert retry_after(_limited(None)) == 0
    assert retry_after(ErrorResponse("nope", "M_FORBIDDEN")) is None
    assert retry_after(_ok(1)) is None


async def test_waits_as_told_then_succeeds() -> None:
    waits = Waits()
    answers = [_limited(1500), _limited(None), _ok(1)]
    queue = RoomSendQueue(RetryPolicy(default_wait=0.7), sleep=waits)

    async def call() -> object:
        return answers.pop(0)

    assert await queue.send("!r", call) == _ok(1)
    assert waits.seconds == [1.5, 0.7]


async def test_gives_up_after_the_bound_and_caps_long_waits() -> None:
    waits = Waits()
    queue = RoomSendQueue(RetryPolicy(attempts=3, max_wait=2.0), sleep=waits)
    calls = 0

    async def call() -> object:
        nonlocal calls
        calls += 1
        return _limited(600_000)

    response = await queue.send("!r", call)
    assert retry_after(response) == 600
    assert calls == 3
    assert waits.seconds == [2.0, 2.0]


async def test_a_rate_limited_room_does_not_hold_up_another() -> None:
    release = anyio.Event()
    order: list[str] = []

    async def blocked_sleep(seconds: float) -> None:
        await release.wait()

    queue = RoomSendQueue(sleep=blocked_sleep)
    answers = {"!busy": [_limited(5000), _ok(1)], "!calm": [_ok(2)]}

    def call_for(room: str) -> Callable[[], Awaitable[object]]:
        async def call() -> object:
            order.append(room)
            return answers[room].pop(0)

        return call

    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.send, "!busy", call_for("!busy"))
        await anyio.wait_all_tasks_blocked()
        # !busy is waiting out its 429; !calm goes through meanwhile.
        assert await queue.send("!calm", call_for("!calm")) == _ok(2)
        assert order == ["!busy", "!calm"]
        release.set()
    assert order == ["!busy", "!calm", "!busy"]


async def test_sends_of_one_room_keep_their_order() -> None:
    release = anyio.Event()
    order: list[int] = []
    first_try = True

    async def blocked_sleep(seconds: float) -> None:
        await release.wait()

    queue = RoomSendQueue(sleep=blocked_sleep)

    def call_for(n: int) -> Callable[[], Awaitable[object]]:
        async def call() -> object:
            nonlocal first_try
            order.append(n)
            if n == 1 and first_try:
                first_try = False
                return _limited(100)
            return _ok(n)

        return call

    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.send, "!r", call_for(1))
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(queue.send, "!r", call_for(2))
        await anyio.wait_all_tasks_blocked()
        assert order == [1]
        release.set()
    assert order == [1, 1, 2]
