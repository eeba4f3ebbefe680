"""The `agy-bridge` command as a process runs it (``python -m bridge`` and the installed
``agy-bridge`` script): the collector set before the imports, the command, and an end without
the interpreter's teardown. Tests call :func:`bridge.cli.main` in their own process instead."""

from __future__ import annotations

from typing import NoReturn

from bridge.heap import for_the_start


def command() -> NoReturn:
    # Before the imports, which are most of a start (bridge/heap.py).
    for_the_start()
    from bridge.cli import main
    from bridge.ending import end_process

    # Without the interpreter's teardown, which nothing outside the process sees
    # (bridge/ending.py).
    end_process(main())
