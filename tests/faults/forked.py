"""`agy-bridge` processes forked from one that has imported the bridge already.

A start of `python -m bridge run` is mostly imports (about 0.6 s of its 0.8 s of CPU on a
quiet machine, two to three times that on the loaded test machine), and the fault tests start
bridges dozens of times to SIGKILL them. The zygote (`python -m tests.faults.forked`, one per
pytest worker) imports what a Slack `run` on PostgreSQL imports, then forks a child for each
start. The child is a process of its own with its own pid, sockets and store connections,
that runs the command as `python -m bridge` does (``bridge.command.command``: the collector's
setting, ``bridge.cli.main``, the end without teardown); a SIGKILL ends it as it ends a fresh
interpreter. What the tests kill is the bridge at work, not its imports.

The zygote reads requests on stdin, one JSON object a line, and answers each on stdout (its
first line, once it has imported, is ``{"ready": true}``): ``{"argv": [...], "env": {...},
"cwd": ..., "stderr": path}`` forks a child (``{"pid": N}``); ``{"reap": N}`` waits for child
N, which has ended (``{"code": C}``, negative for a signal, as :class:`subprocess.Popen` says
it). The client waits for a child's end on a pidfd, so no task reads for it in the background.
At EOF on stdin the zygote exits.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import anyio

REPO = Path(__file__).resolve().parents[2]


class _Forked:
    """A child of the zygote: its pid, its status once reaped, signals."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None
        # Readable once the process has ended; opened now, while the pid is surely its own
        # (the zygote reaps it only when asked).
        self._pidfd = os.pidfd_open(pid)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        """The exit status if it has ended, without waiting."""
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self._reap()
        return self.returncode

    def _reap(self) -> None:
        if self.returncode is None:  # another waiter may have reaped it meanwhile
            self.returncode = self._zygote.reap(self.pid)
            os.close(self._pidfd)


class ForkedProcess(_Forked):
    """With the parts of :class:`anyio.abc.Process` the tests use."""

    async def wait(self) -> int:
        if self.returncode is None:
            await anyio.wait_readable(self._pidfd)
            self._reap()
        assert self.returncode is not None
        return self.returncode


class ForkedPopen(_Forked):
    """With the parts of :class:`subprocess.Popen` the tests use: ``stdin`` is a pipe to it."""

    def __init__(self, zygote: Zygote, pid: int, stdin: IO[bytes]) -> None:
        super().__init__(zygote, pid)
        self.stdin = stdin

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired([f"forked {self.pid}"], timeout or 0)
            self._reap()
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """The client: one zygote process, asked one request at a time (each answer is at once:
    a fork, or the status of a child that has ended)."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.forked"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        self._lock = threading.Lock()
        # Ready once it has imported: waited for here (a fixture's set-up), not in a test's
        # event loop at its first start.
        self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote ended ({self._process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None
        with self._lock:
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            return self._answer()

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        stderr: Path,
        slack_quicker: float | None = None,
    ) -> ForkedProcess:
        """``python -m bridge *argv`` with ``env`` in ``cwd``, its stderr appended to ``stderr``;
        ``slack_quicker``: its Slack rate budget's windows that many times shorter, as the
        fake's (``tests.chat.slack.fake_slack.quicker_tiers``)."""
        request = {"argv": argv, "env": env, "cwd": str(cwd), "stderr": str(stderr)}
        answer = self._ask({**request, "slack_quicker": slack_quicker})
        return ForkedProcess(self, answer["pid"])

    def popen(
        self, argv: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path
    ) -> ForkedPopen:
        """``python -m bridge *argv`` as ``subprocess.Popen`` with ``stdin=PIPE`` starts it, its
        stdout and stderr appended to files."""
        read, write = os.pipe()
        try:
            # The zygote opens the pipe's reading end through /proc (the same pipe), and the
            # child has it when the answer comes: this process's copy is closed then, as
            # Popen closes it, so that the child's end is the only reader.
            answer = self._ask(
                {
                    "argv": argv,
                    "env": env,
                    "cwd": str(cwd),
                    "stderr": str(stderr),
                    "stdout": str(stdout),
                    "stdin": f"/proc/{os.getpid()}/fd/{read}",
                }
            )
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        return ForkedPopen(self, answer["pid"], os.fdopen(write, "wb"))

    def reap(self, pid: int) -> int:
        code: int = self._ask({"reap": pid})["code"]
        return code

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(30)


def zygote() -> Iterator[Zygote]:
    """A zygote for as long as the generator is open (a session fixture's body)."""
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


# --- the zygote's side ------------------------------------------------------------------------


def _preload() -> None:
    """What `python -m bridge run` with Slack and PostgreSQL imports, and `python -m bridge
    console` on SQLite (a module left out is imported by the child as a fresh process would
    import it: slower, never different)."""
    from bridge.heap import for_the_start

    for_the_start()  # as bridge.command does, before the imports
    import bridge.admin
    import bridge.app
    import bridge.chat.console.adapter
    import bridge.chat.console.screen
    import bridge.chat.console.tour
    import bridge.chat.slack.adapter
    import bridge.cli
    import bridge.command
    import bridge.core.store.postgres
    import bridge.core.store.sqlite
    import bridge.core.tools
    import bridge.ending  # noqa: F401

    # A fork copies only the thread that forks: a thread started by an import would be missing
    # in every child.
    assert threading.active_count() == 1, threading.enumerate()


def _quicker_slack_budget(factor: float) -> None:
    """The bridge's Slack rate budget with every window ``factor`` times shorter: the same
    limits and bursts (what the test's fake enforces, ``quicker_tiers``), refilled sooner. The
    in-process tests give ``RateBudget(tiers=...)`` to the app; a process has only the table
    its budgets are made from."""
    from bridge.chat.slack import budget

    budget.SLACK_TIERS = {
        method: replace(tier, window=tier.window / factor)
        for method, tier in budget.SLACK_TIERS.items()
    }


def _fresh_stdio(unbuffered: bool) -> None:
    """``sys.stdin``, ``stdout`` and ``stderr`` over fds 0-2 as a new interpreter makes them
    (the zygote's were made before the fork, and ``PYTHONUNBUFFERED`` is read at start: a
    console's output must reach its file as it is printed, a SIGKILL leaves no buffer to
    flush)."""
    encoding = sys.stdout.encoding
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=sys.stdin.encoding)
    streams = []
    for fd, errors in ((1, sys.stdout.errors), (2, "backslashreplace")):
        binary: IO[bytes] = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        streams.append(
            io.TextIOWrapper(
                binary,
                encoding=encoding,
                errors=errors,
                line_buffering=fd == 2 and not unbuffered,
                write_through=unbuffered,
            )
        )
    sys.stdout, sys.stderr = streams


def _child(request: dict[str, Any], stdin: int) -> None:
    """In the forked child: become `python -m bridge ARGV` (never returns)."""
    code = 1
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        null = os.open(os.devnull, os.O_RDWR)
        out = os.open(request["stdout"], flags, 0o644) if "stdout" in request else null
        err = os.open(request["stderr"], flags, 0o644)
        os.dup2(stdin if stdin >= 0 else null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _fresh_stdio(bool(os.environ.get("PYTHONUNBUFFERED")))
        # As `python -m bridge` would see them: the package's __main__ and the folder it ran in.
        sys.argv = [str(REPO / "bridge" / "__main__.py"), *request["argv"]]
        sys.path[0] = request["cwd"]
        if request.get("slack_quicker"):
            _quicker_slack_budget(request["slack_quicker"])
        from bridge.command import command

        command()
    except SystemExit as exit:  # as the interpreter ends at one: None is 0, a message 1
        code = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def main() -> None:
    _preload()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "reap" in request:
            _, status = os.waitpid(request["reap"], 0)
            answer = {"code": os.waitstatus_to_exitcode(status)}
        else:
            stdin = os.open(request["stdin"], os.O_RDONLY) if "stdin" in request else -1
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, stdin)
            if stdin >= 0:
                os.close(stdin)
            answer = {"pid": pid}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
