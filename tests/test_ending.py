"""How a `python -m bridge` process ends (bridge/ending.py): everything the interpreter's own
exit does that anyone can see, without its teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# stdout block-buffered, as a pipe's is by default (this shell may set PYTHONUNBUFFERED).
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}

# A process that leaves, at the moment it ends: output in stdout's buffer (a pipe: block
# buffered), an atexit function, a thread that is not a daemon still working, a job running in
# a ThreadPoolExecutor and one queued behind it, and an object that would be finalized by the
# interpreter's teardown.
LEFT_AT_THE_END = """
import atexit, concurrent.futures, sys, threading
from pathlib import Path
from bridge.ending import end_process

out = Path({out!r})
go = threading.Event()

def late(name):
    go.wait(60)
    with out.open("a") as f:
        f.write(name + "\\n")

class Finalized:
    def __del__(self):
        with out.open("a") as f:
            f.write("finalized\\n")

kept = Finalized()
threading.Thread(target=late, args=("thread",)).start()
pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
pool.submit(late, "job")
pool.submit(late, "queued job")
atexit.register(lambda: print("atexit ran"))
print("buffered", end="")
print(" and more")
go.set()
end_process({code})
"""


def _end(tmp_path: Path, code: int) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    out = tmp_path / "out"
    out.touch()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LEFT_AT_THE_END).format(out=str(out), code=code)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, sorted(out.read_text().split("\n")[:-1])


def test_the_end_waits_for_threads_and_jobs_runs_atexit_and_flushes_then_skips_teardown(
    tmp_path: Path,
) -> None:
    done, written = _end(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "buffered and more\natexit ran\n"
    # The thread and both jobs finished, as at the interpreter's exit; the object alive at
    # the end was not finalized (the teardown that would have done it is what is skipped).
    assert written == ["job", "queued job", "thread"]


def test_the_end_keeps_the_commands_exit_status(tmp_path: Path) -> None:
    done, written = _end(tmp_path, 3)
    assert done.returncode == 3
    assert done.stdout == "buffered and more\natexit ran\n"
    assert written == ["job", "queued job", "thread"]


def test_python_m_bridge_ends_through_it_with_the_commands_status(tmp_path: Path) -> None:
    # A config that cannot be read: the command prints why and returns 2; the process ends
    # with 2 and the message written.
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "doctor", "--config", str(tmp_path / "missing.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "agy-bridge:" in done.stderr and "missing.toml" in done.stderr


def test_a_closed_stdout_is_left_alone_and_one_that_cannot_be_flushed_fails_the_exit(
    tmp_path: Path,
) -> None:
    # As CPython's own exit: stdout closed by the program is no error; stdout whose reader is
    # gone (the output still in its buffer) ends the process with 120.
    closed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom bridge.ending import end_process\n"
            "sys.stdout.close()\nend_process(0)\n",
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        timeout=60,
    )
    assert closed.returncode == 0, closed.stderr
    gone = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys\nfrom bridge.ending import end_process\n"
            "print('lost')\nos.close(1)\nend_process(0)\n",
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        timeout=60,
    )
    assert gone.returncode == 120
    done = subprocess.run(
        [sys.executable, "-c", "import os, sys\nprint('lost')\nos.close(1)\n"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 120  # the interpreter's own exit, for comparison
