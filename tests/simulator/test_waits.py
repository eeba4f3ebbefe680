"""The simulator's one waiting place (bridge/simulator/waits.py): a SIGINT is never lost."""

from __future__ import annotations

import subprocess
import sys

from tests.simulator.driver import REPO

# A SIGINT that Python's C-level handler took while the main thread was not in its blocking
# wait: between the wait's last look at the flag and the lock it blocks on (a loaded host
# widens that moment), or on another thread. Python runs the Python-level handler only on the
# main thread, between two bytecodes, so a main thread blocked in the lock does not run it
# until something else wakes it: a `run_command` step's SIGINT waited for the command's end
# (`exec sleep 60`: one minute, then "interrupted"; tests/agy/test_process.py's
# test_sigint_mid_tool_then_close_leaves_no_child found its child gone).
#
# Forced here: the main thread blocks SIGINT, so the kernel hands it to another thread, and
# the signal is sent only once the main thread sleeps in a futex wait with no timeout (the
# queue's lock: `/proc/.../syscall` reads 202, futex, with a null timeout).
SCRIPT = r"""
import os, queue, signal, threading
from bridge.simulator.waits import Interrupted, Waits

waits = Waits()
waits.install()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
main = threading.get_native_id()

def blocked_in_the_wait():
    try:
        with open(f"/proc/self/task/{main}/syscall") as f:
            words = f.read().split()
    except OSError:
        return False
    return words[:1] == ["202"] and words[4:5] == ["0x0"]

def interrupt():
    about_to_wait.wait()  # past Thread.start's own untimed wait
    while not blocked_in_the_wait():
        os.sched_yield()
    os.kill(os.getpid(), signal.SIGINT)

about_to_wait = threading.Event()
threading.Thread(target=interrupt, daemon=True).start()
about_to_wait.set()
try:
    waits.get(queue.SimpleQueue())
except Interrupted:
    print("interrupted", flush=True)
    os._exit(0)
"""


# A SIGINT sent before any wait: the next wait ends at once.
BEFORE = r"""
import os, queue, signal
from bridge.simulator.waits import Interrupted, Waits

waits = Waits()
waits.install()
os.kill(os.getpid(), signal.SIGINT)
print("after", flush=True)
try:
    waits.get(queue.SimpleQueue())
except Interrupted:
    print("interrupted", flush=True)
    os._exit(0)
"""


def _output(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,  # a guard against the hang these tests are about, not a speed check
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_sigint_taken_off_the_main_thread_still_ends_the_wait() -> None:
    assert _output(SCRIPT) == "interrupted\n"


def test_a_sigint_before_any_wait_ends_the_next_one() -> None:
    assert _output(BEFORE) == "after\ninterrupted\n"
