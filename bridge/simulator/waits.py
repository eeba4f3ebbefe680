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

A SIGINT ends a wait through the queue the wait blocks on, not through a Python signal
handler. Python runs those on the main thread between two bytecodes only: a signal that came
after the wait's last look at the flag and before it blocked (a loaded host widens that
moment), or that the kernel gave another thread, ran no handler until the wait ended on its
own (a ``run_command`` of ``sleep 60`` answered its SIGINT a minute late). The C-level handler
writes to a wake-up pipe at once, whatever the main thread does (``signal.set_wakeup_fd``); a
daemon thread reads it and puts a mark into the queue being waited on.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from contextlib import contextmanager

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import TypeVar

    T = TypeVar("T")


class Interrupted(BaseException):
    """SIGINT ended a wait. A BaseException, as asyncio's CancelledError was: a tool step's
    ``except OSError`` must not swallow it."""


class Deadline(BaseException):
    """The turn's ``--print-timeout`` passed during a wait."""


# Put into the waited-on queue by a SIGINT. Left in a queue whose wait ended first, it is
# only ever read after the interrupt, when every wait raises Interrupted anyway.
_INTERRUPT = object()


class Waits:
    """The process's one waiting place: SIGINT, the turn's deadline, calls on threads."""

    def __init__(self) -> None:
        self.interrupted = False
        # The queue a wait blocks on now (None: no wait), and the lock that makes "look at the
        # flag, then wait on this queue" one step against "set the flag, then wake that queue".
        self._source: queue.SimpleQueue[object] | None = None
        self._lock = threading.Lock()
        self._deadline: float | None = None

    def install(self) -> None:
        """Handle SIGINT from now on (before this, it is Python's KeyboardInterrupt)."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        # The Python-level handler does nothing: the C-level one, which every handled signal
        # runs, writes the wake-up byte, which is all a wait needs.
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._on_sigints, args=(read,), daemon=True, name="sigint").start()

    def _on_sigints(self, read: int) -> None:
        while True:
            if signal.SIGINT in os.read(read, 64):
                self._interrupt()

    def _interrupt(self) -> None:
        with self._lock:
            if self.interrupted:
                return  # a second SIGINT changes nothing
            self.interrupted = True
            source = self._source
        if source is not None:
            source.put(_INTERRUPT)

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
        with self._lock:
            if self.interrupted:  # a SIGINT that came while no wait was under way
                raise Interrupted
            self._source = source  # type: ignore[assignment]
        try:
            item = source.get(timeout=limit)
        except queue.Empty:
            if by_deadline:
                raise Deadline from None
            raise
        finally:
            with self._lock:
                self._source = None
        if item is _INTERRUPT:
            raise Interrupted
        return item

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
