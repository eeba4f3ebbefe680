"""Where the main thread waits, and how SIGINT and ``--print-timeout`` end a wait.

A simulated agy runs one turn at a time on its main thread, without asyncio: importing asyncio
was about half of a turn process's start (the suite starts hundreds), and a turn is a
sequence of steps with nothing to run beside it. Blocking work (a hook handler, a
``run_command`` child, a fetch, an MCP call) runs on a daemon thread, and the main thread
waits for it here, as it waits here for the next stdin line and for a scripted sleep.

SIGINT and a turn's deadline end the wait they find, or the next one if none is under way,
as asyncio delivered a cancellation at the next ``await``: never in the middle of an event
line or a conversation file. A call abandoned that way runs on, on its daemon thread, and
never delays the exit (real agy leaves its ``run_command`` children running on SIGINT).
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from contextlib import contextmanager

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType
    from typing import TypeVar

    T = TypeVar("T")


class Interrupted(BaseException):
    """SIGINT ended a wait. A BaseException, as asyncio's CancelledError was: a tool step's
    ``except OSError`` must not swallow it."""


class Deadline(BaseException):
    """The turn's ``--print-timeout`` passed during a wait."""


class Waits:
    """The process's one waiting place: SIGINT, the turn's deadline, calls on threads."""

    def __init__(self) -> None:
        self.interrupted = False
        self._waiting = False
        self._deadline: float | None = None

    def install(self) -> None:
        """Handle SIGINT from now on (before this, it is Python's KeyboardInterrupt)."""
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        # Runs on the main thread between two bytecodes: raise only inside a wait.
        if self.interrupted:
            return  # a second SIGINT changes nothing
        self.interrupted = True
        if self._waiting:
            raise Interrupted

    @contextmanager
    def deadline(self, seconds: float | None) -> Iterator[None]:
        """Waits inside this block end in :class:`Deadline` after ``seconds`` (None or 0: never)."""
        self._deadline = time.monotonic() + seconds if seconds and seconds > 0 else None
        try:
            yield
        finally:
            self._deadline = None

    def get(self, source: queue.SimpleQueue[T], timeout: float | None = None) -> T:
        """The next item of ``source``; :class:`queue.Empty` after ``timeout`` seconds."""
        limit, by_deadline = timeout, False
        if self._deadline is not None:
            left = max(0.0, self._deadline - time.monotonic())
            if limit is None or left <= limit:
                limit, by_deadline = left, True
        self._waiting = True
        try:
            if self.interrupted:  # a SIGINT that came while no wait was under way
                raise Interrupted
            return source.get(timeout=limit)
        except queue.Empty:
            if by_deadline:
                raise Deadline from None
            raise
        finally:
            self._waiting = False

    def sleep(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (None: until SIGINT or the deadline ends it)."""
        try:
            self.get(queue.SimpleQueue(), seconds)
        except queue.Empty:
            pass

    def call(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on a daemon thread; its result or its exception, here."""
        results: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()

        def work() -> None:
            try:
                results.put((True, fn(*args)))
            except BaseException as exc:
                results.put((False, exc))

        threading.Thread(target=work, daemon=True, name=getattr(fn, "__name__", "sim")).start()
        ok, value = self.get(results)
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]
