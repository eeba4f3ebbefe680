"""Blocking calls off the event loop, on daemon threads that never delay the exit.

asyncio's default executor is joined when the loop shuts down, so a blocking call that a
SIGINT abandoned (a ``run_command`` child agy leaves running) would hold the process open.
A daemon thread per call does not; cancelling the awaiting task abandons the call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], *args: object) -> T:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle_result(value: T) -> None:
        if not future.done():
            future.set_result(value)

    def settle_error(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)

    def work() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:
            _call_soon(loop, settle_error, exc)
        else:
            _call_soon(loop, settle_result, value)

    threading.Thread(target=work, daemon=True, name=getattr(fn, "__name__", "sim")).start()
    return await future


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[T], None], arg: T) -> None:
    try:
        loop.call_soon_threadsafe(fn, arg)
    except RuntimeError:
        pass  # the loop is gone: nobody waits for this result any more
