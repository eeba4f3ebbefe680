"""How a `python -m bridge` process ends once its command has returned: what the interpreter
does at exit that anyone can observe, then an immediate end without the interpreter's teardown.

After the command returns, CPython's own exit joins the threads that are not daemons (and tells
``concurrent.futures``' workers to finish), runs the ``atexit`` functions (logging's flush among
them), flushes stdout and stderr, and then tears the interpreter down: it clears every module
(about 1,000 after a Slack start), runs full collections over the whole heap and frees each
object one by one. That teardown changes nothing outside the process, yet it cost 0.2 s of CPU
at the end of every `agy-bridge run` measured here (0.11-0.16 s after a console), as much as
a fifth of a short process's CPU (``python -m bench.startup``; docs/testing.md).
:func:`end_process` does the observable part in the interpreter's order, then ``os._exit``.

What it skips: ``__del__`` of objects still alive at exit and the closing of files nobody
closed. The bridge closes what it opens (the store, agy's processes, the listener, the chat
connections) before its command returns, and logging's handlers are flushed and closed by
``logging.shutdown``, an ``atexit`` function.

Two of those steps have no public API, because only the interpreter's exit takes them:
``threading._shutdown`` (what ``Py_FinalizeEx`` calls first) and ``atexit._run_exitfuncs``
(what it calls next). Both have been in CPython for as long as Python 3; without the first,
this falls back to the interpreter's own exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

# The exit status CPython gives a process whose stdout cannot be flushed at exit.
FLUSH_FAILED = 120


def end_process(code: int) -> NoReturn:
    """End this process with ``code`` as the interpreter would, without its teardown."""
    # The interpreter's first step at exit (Py_FinalizeEx): ``concurrent.futures``' workers are
    # told to finish their work and every thread that is not a daemon is joined.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:  # another Python: its own exit, teardown and all
        raise SystemExit(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # As CPython's exit: a closed stream is left alone; a stdout that cannot be flushed (its
        # reader gone) fails the exit, a stderr that cannot is ignored.
        if stream is None or stream.closed:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout and code == 0:
                code = FLUSH_FAILED
    os._exit(code)
