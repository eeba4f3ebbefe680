"""One running agy process: start, wait for ``init``, turns on stdin, events from stdout, stop.

agy runs in its own process group (``start_new_session``), because ``run_command`` children can
outlive agy: stopping a process always ends the whole group. The process is an async context
manager, so the task that opened it owns it and nothing is left running when it exits, however
it exits (cancellation included).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from bridge.agy import private_state, wire
from bridge.agy.launch import RUN_MARKER_ENV
from bridge.agy.limits import Confinement, end_strays
from bridge.agy.lines import LineTooLong, read_line_batches
from bridge.agy.network import NetworkError, SandboxNetwork

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 4096
# How many reads of agy's stdout (each up to a pipe's 64 KiB, parsed) may wait for the turn to
# take them. Past that the reader stops reading and agy waits on its full pipe: an agy printing
# faster than the bridge hands its text on (a slow chat) must not fill the bridge's memory.
READ_AHEAD = 4
# How often a start waiting for an earlier agy's state lock tries again.
LOCK_POLL = 0.1
# How often, while it waits for that lock, the start ends what dead bridges left in their
# sandboxes' cgroups (one of which may be what holds it).
SWEEP_EVERY = 1.0
# Where no pidfd can be had: how often the end of a killed group's orphans is looked for.
ORPHAN_POLL = 0.02


@dataclass(frozen=True)
class ProcessExit:
    """agy's process ended (after its stdout closed)."""

    code: int | None
    stderr_tail: str

    def describe(self) -> str:
        tail = self.stderr_tail.strip()
        how = f"exit code {self.code}" if self.code is not None else "no exit code"
        if self.code is not None and self.code < 0:
            how = f"killed by signal {-self.code}"
        return f"{how}: {tail}" if tail else how


class AgyStartError(Exception):
    """agy did not get as far as ``init``. ``message`` is for the user, in agy's words."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        exit: ProcessExit | None = None,
        result: wire.ResultInfo | None = None,
    ):
        super().__init__(message)
        # missing (not installed), exited (before init), timeout (no init in time),
        # error_result (a result before init, e.g. an unknown model), busy (an earlier agy
        # still holds the thread's state).
        self.kind = kind
        self.message = message
        self.exit = exit
        self.result = result


BadLineCallback = Callable[[str], None]

AgyOutput = wire.AgyEvent | ProcessExit


@dataclass(frozen=True)
class ProcessSpec:
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    init_timeout: float = 90.0
    stop_grace: float = 5.0
    max_line_bytes: int = 8 * 1024 * 1024
    # When argv starts agy through a wrapper (a sandbox) that does not forward signals: maps
    # the started process's PID to agy's, which gets SIGINT.
    signal_pid: Callable[[int], int | None] | None = None
    # Makes the cgroup (or rlimits) agy and everything it starts run in (bridge.agy.limits).
    confine: Callable[[], Confinement] | None = None
    # Makes the sandbox's own network at each start (bridge.agy.network); None: the host's.
    network: Callable[[], SandboxNetwork] | None = None
    # Files locked while agy runs (its thread's private state: one agy per conversation). agy
    # inherits the locks, so they outlive the bridge until agy and what it started are gone.
    locks: tuple[Path, ...] = ()
    # Ends what dead bridges left in their sandboxes' cgroups (bridge.agy.limits): run while
    # ``locks`` are held elsewhere, since a sandbox that outlived its bridge would hold them
    # for good. Blocking.
    sweep: Callable[[], int] | None = None


class AgyHandle(Protocol):
    """What the core uses of a running agy (an :class:`AgyProcess`, or a test's double)."""

    @property
    def pid(self) -> int: ...

    @property
    def conversation_id(self) -> str: ...

    @property
    def alive(self) -> bool: ...

    async def send_turn(self, blocks: list[str]) -> None: ...

    async def next(self) -> AgyOutput: ...

    async def next_batch(self) -> list[AgyOutput]: ...

    async def drain(self) -> None: ...

    def interrupt(self) -> None: ...

    async def after_turn(self, *, interrupted: bool) -> list[str]: ...


ProcessOpener = Callable[[ProcessSpec, BadLineCallback], AbstractAsyncContextManager[AgyHandle]]
"""Starts agy and waits for ``init`` on entering; stops it and its process group on leaving."""


@dataclass
class AgyProcess:
    process: Process
    spec: ProcessSpec
    on_bad_line: BadLineCallback
    init: wire.InitEvent | None = None
    # One item per read from stdout: every event that read completed (see next_batch).
    _send: MemoryObjectSendStream[list[AgyOutput]] | None = None
    _receive: MemoryObjectReceiveStream[list[AgyOutput]] | None = None
    _unread: deque[AgyOutput] = field(default_factory=deque)
    # The last STDERR_TAIL_BYTES of agy's stderr: its last words, however much it logs.
    _stderr: bytearray = field(default_factory=bytearray)
    exit: ProcessExit | None = None
    _stderr_done: anyio.Event = field(default_factory=anyio.Event)
    # Stopping: nobody will take agy's output any more, and the reader throws it away.
    _discarding: bool = False
    # The cgroup (or rlimits) agy runs in; None: no caps.
    confinement: Confinement | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def conversation_id(self) -> str:
        assert self.init is not None and self.init.conversation
        return self.init.conversation

    @property
    def alive(self) -> bool:
        return self.process.returncode is None and self.exit is None

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    async def send_turn(self, blocks: list[str]) -> None:
        """Write one user turn. Raises BrokenResourceError when agy is gone."""
        assert self.process.stdin is not None
        await self.process.stdin.send(wire.user_line(blocks))

    async def next(self) -> AgyOutput:
        """The next event, or the ProcessExit once agy is gone (then again on every call)."""
        if not self._unread:
            self._unread.extend(await self._receive_batch())
        return self._unread.popleft()

    async def next_batch(self) -> list[AgyOutput]:
        """The next event and every one after it that agy has already printed, up to the first
        that is not a step (a result, an init, the exit): a turn's stream may end there.

        Handling what is at hand together costs one wake-up, one scrub and one chat update per
        batch instead of one per text delta.
        """
        batch = [await self.next()]
        while isinstance(batch[-1], wire.StepUpdateEvent):
            if not self._unread:
                more = self._receive_nowait()
                if not more:
                    break
                self._unread.extend(more)
            batch.append(self._unread.popleft())
        return batch

    async def _receive_batch(self) -> list[AgyOutput]:
        assert self._receive is not None
        if self.exit is not None and not self._unread:
            try:
                return self._receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return [self.exit]
        try:
            # What the reader has already sent is taken without a trip through the event loop
            # (the turn's handling awaits the chat, and the reader task yields at every read).
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return [self.exit or ProcessExit(self.process.returncode, self.stderr_tail())]
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            # The reader always sends the exit before closing, so this is a late caller.
            return [self.exit or ProcessExit(self.process.returncode, self.stderr_tail())]

    def _receive_nowait(self) -> list[AgyOutput]:
        assert self._receive is not None
        try:
            return self._receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return []

    async def drain(self) -> None:
        """Discard output until agy exits (it is on its way out after an error or a SIGINT)."""
        while not isinstance(await self.next(), ProcessExit):
            pass

    def interrupt(self) -> None:
        """SIGINT, as a user's Ctrl-C: agy ends the turn with an ``interrupted`` result."""
        if self.process.returncode is None:
            pid = self.process.pid
            if self.spec.signal_pid is not None:
                pid = self.spec.signal_pid(pid) or pid
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    async def after_turn(self, *, interrupted: bool) -> list[str]:
        """After a turn: a stopped turn's leftovers ended (what its commands left running in
        the sandbox, outside agy's own process tree), and the caps the sandbox hit since the
        last turn, in words for the thread."""
        if interrupted and self.spec.signal_pid is not None and self.process.returncode is None:
            keep = self.spec.signal_pid(self.process.pid)
            if keep is not None:
                await anyio.to_thread.run_sync(end_strays, self.process.pid, keep)
        return self.confinement.hits() if self.confinement is not None else []

    # --- its life, for open_agy -------------------------------------------------------------

    @asynccontextmanager
    async def started(self) -> AsyncIterator[None]:
        """Read agy's output, wait for ``init``, and enter; on exit stop agy and its process
        group. Raises :class:`AgyStartError` (not wrapped in a group) when init never came."""
        start_error: AgyStartError | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_stdout)
                tg.start_soon(self._read_stderr)
                try:
                    try:
                        await self._wait_init()
                    except AgyStartError as exc:
                        # Raised below, outside the task group, so callers see it unwrapped.
                        start_error = exc
                    else:
                        yield
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._shutdown()
                        if self._receive is not None:
                            self._receive.close()
        finally:
            with anyio.CancelScope(shield=True):
                await self.process.aclose()
        if start_error is not None:
            raise start_error

    # --- internals ---------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None and self._send is not None
        async with self._send:
            try:
                async for lines in read_line_batches(self.process.stdout, self.spec.max_line_bytes):
                    events = self._parsed(lines)
                    # Not kept while this waits for the next read: an idle session would hold
                    # its last read's lines and events for as long as it idles.
                    del lines
                    if events and not self._discarding:
                        # The pipe's read was this loop's checkpoint: a send with room in
                        # the buffer need not be another trip through the event loop.
                        try:
                            self._send.send_nowait(events)
                        except anyio.WouldBlock:
                            await self._send.send(events)
                    del events
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            code = await self.process.wait()
            # Let stderr finish draining so the tail holds agy's last words.
            with anyio.move_on_after(1):
                await self._stderr_done.wait()
            self.exit = ProcessExit(code, self.stderr_tail())
            try:
                await self._send.send([self.exit])
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    def _parsed(self, lines: list[bytes | LineTooLong]) -> list[AgyOutput]:
        """The events of one read's lines; what is not an event goes to ``on_bad_line``."""
        events: list[AgyOutput] = []
        for line in lines:
            if isinstance(line, LineTooLong):
                self.on_bad_line(str(line))
                continue
            try:
                events.append(wire.parse_event(line))
            except wire.BadLine as exc:
                self.on_bad_line(str(exc))
        return events

    async def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        try:
            async for chunk in self.process.stderr:
                self._stderr += chunk
                del self._stderr[:-STDERR_TAIL_BYTES]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self._stderr_done.set()

    async def _wait_init(self) -> None:
        try:
            with anyio.fail_after(self.spec.init_timeout):
                while True:
                    out = await self.next()
                    if isinstance(out, wire.InitEvent):
                        if not out.conversation:
                            raise AgyStartError("exited", "agy sent init without a conversation id")
                        self.init = out
                        return
                    if isinstance(out, wire.ResultEvent):
                        # An unknown model (and other startup errors) answer a result, no init.
                        text = out.result.error or out.result.response or "agy reported an error"
                        raise AgyStartError("error_result", text, result=out.result)
                    if isinstance(out, ProcessExit):
                        raise AgyStartError(
                            "exited", f"agy exited before it started ({out.describe()})", exit=out
                        )
        except TimeoutError:
            raise AgyStartError(
                "timeout",
                f"agy did not start within {self.spec.init_timeout:g} s"
                + (f" ({tail})" if (tail := self.stderr_tail().strip()) else ""),
            ) from None

    async def _shutdown(self) -> None:
        """stdin EOF, a grace period, then SIGTERM and SIGKILL to the whole process group."""
        process = self.process
        # What agy still prints is read and dropped: stuck on a full pipe (the reader waiting
        # for a turn that is gone), it could not see its stdin close and would be killed.
        self._discarding = True
        while self._receive_nowait():
            pass
        if process.returncode is None and process.stdin is not None:
            try:
                await process.stdin.aclose()
            except (anyio.BrokenResourceError, OSError):
                pass
            with anyio.move_on_after(self.spec.stop_grace):
                await process.wait()
        await end_process_group(process.pid, wait_for=process)


async def end_process_group(pgid: int, *, wait_for: Process | None = None) -> None:
    """SIGTERM then SIGKILL every process in group ``pgid``, including orphaned children."""
    for sig, patience in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        if not _group_alive(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        with anyio.move_on_after(patience):
            if wait_for is not None and wait_for.returncode is None:
                await wait_for.wait()
            await _group_gone(pgid)
    if wait_for is not None and wait_for.returncode is None:
        with anyio.move_on_after(1):
            await wait_for.wait()


async def _group_gone(pgid: int) -> None:
    """Until no live process is left in group ``pgid`` (zombies need no killing).

    Orphaned children are not ours to ``wait()`` for; a pidfd (``pidfd_open``, Linux 5.3)
    becomes readable when its process ends, child of ours or not, so each member is waited for
    as an event. The members are listed again after each has ended: one may have forked
    meanwhile (its child is in the group, and was sent the same signal)."""
    while members := [pid for pid in group_members(pgid) if pid_state(pid) not in (None, "Z")]:
        for pid in members:
            await _ended(pid, pgid)


async def _ended(pid: int, pgid: int) -> None:
    """Until process ``pid`` of group ``pgid`` has ended (at once when it is no member now)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # ended already
    except OSError:
        # No pidfd here (a kernel before 5.3, or a seccomp filter that refuses the call):
        # nothing else tells a process that is not the parent that another one ended. Look
        # again after a short pause; the caller's patience (a few seconds) bounds how long.
        await anyio.sleep(ORPHAN_POLL)
        return
    try:
        # The id may have been reused between the listing and the pidfd (which now holds one
        # process): wait only for a live member of the group.
        stat = _read_stat(pid)
        if stat is None or stat[1] != pgid or stat[0] == "Z":
            return
        await anyio.wait_readable(fd)
    finally:
        os.close(fd)


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is in the group (zombies need no killing)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(pid_state(pid) not in (None, "Z") for pid in group_members(pgid))


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir() if Path("/proc").exists() else []:
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is not None and stat[1] == pgid:
            members.append(int(entry.name))
    return members


def pid_state(pid: int) -> str | None:
    stat = _read_stat(pid)
    return stat[0] if stat else None


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) from /proc/<pid>/stat, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ")".
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[2])
    except (IndexError, ValueError):
        return None


@asynccontextmanager
async def open_agy(spec: ProcessSpec, on_bad_line: BadLineCallback) -> AsyncIterator[AgyProcess]:
    """Start agy and wait for ``init``; on exit, stop it and its whole process group (and
    whatever is left in its cgroup).

    With ``spec.locks``, agy starts only once it can hold them: an earlier agy of the thread
    (one a lost instance left) is waited for, up to the init deadline."""
    held = await _hold_locks(spec) if spec.locks else []
    try:
        try:
            confinement = spec.confine() if spec.confine is not None else None
        except OSError as exc:
            raise AgyStartError(
                "exited", f"could not create the thread's resource limits (cgroup): {exc}"
            ) from None
        try:
            async with _opened(spec, on_bad_line, confinement, held) as agy:
                yield agy
        finally:
            if confinement is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(confinement.close)
    finally:
        for fd in held:
            os.close(fd)


async def _hold_locks(spec: ProcessSpec) -> list[int]:
    deadline = anyio.current_time() + spec.init_timeout
    next_sweep = anyio.current_time()
    while True:
        try:
            return await anyio.to_thread.run_sync(private_state.try_lock, list(spec.locks))
        except private_state.StateBusy:
            if spec.sweep is not None and anyio.current_time() >= next_sweep:
                next_sweep = anyio.current_time() + SWEEP_EVERY
                if ended := await anyio.to_thread.run_sync(spec.sweep):
                    log.info("ended %d sandbox cgroups left by stopped bridges", ended)
                continue  # what held the lock may be gone now
            if anyio.current_time() >= deadline:
                raise AgyStartError(
                    "busy",
                    "an earlier agy process of this thread (perhaps of a bridge instance that "
                    "stopped) still uses its conversation; it did not end within "
                    f"{spec.init_timeout:g} s",
                ) from None
            await anyio.sleep(LOCK_POLL)
        except OSError as exc:
            raise AgyStartError("missing", f"cannot lock the thread's agy state: {exc}") from None


@asynccontextmanager
async def _opened(
    spec: ProcessSpec,
    on_bad_line: BadLineCallback,
    confinement: Confinement | None,
    lock_fds: list[int],
) -> AsyncIterator[AgyProcess]:
    argv = list(spec.argv)
    network = spec.network() if spec.network is not None else None
    if confinement is not None:
        # Joined by a wrapper that writes its own PID first, so bubblewrap and its child are
        # inside from their start: a bridge killed while the sandbox still sets up (its child
        # not yet bound to die with it) leaves them where the next sweep finds them.
        if shutil.which(argv[0]) is None:  # as it would be reported without the wrapper
            raise AgyStartError(
                "missing", f"agy is not installed or not on PATH ({argv[0]} not found)"
            )
        argv = confinement.wrap(argv)
    if network is not None:
        argv = network.argv(argv)
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=dict(spec.env),
            start_new_session=True,
            pass_fds=[*(network.pass_fds if network is not None else ()), *lock_fds],
        )
    except FileNotFoundError:
        raise AgyStartError(
            "missing", f"agy is not installed or not on PATH ({spec.argv[0]} not found)"
        ) from None
    except OSError as exc:
        raise AgyStartError("missing", f"cannot start {spec.argv[0]}: {exc}") from None
    finally:
        if network is not None:
            network.started()
    if network is None:
        async with _running(process, spec, on_bad_line, confinement) as agy:
            yield agy
        return
    connected = False
    try:
        async with network.attached():
            connected = True
            async with _running(process, spec, on_bad_line, confinement) as agy:
                yield agy
    except BaseException as exc:
        if not connected:
            # The set-up failed, timed out or was cancelled (a shutdown): bubblewrap and the
            # sandbox it made, waiting to be let go on, are ended here (agy, once it runs, is
            # ended by its own exit).
            with anyio.CancelScope(shield=True):
                await end_process_group(process.pid, wait_for=process)
                await process.aclose()
        if isinstance(exc, NetworkError):
            raise AgyStartError(
                "exited", f"the sandbox's network could not be set up: {exc}"
            ) from None
        raise


@asynccontextmanager
async def _running(
    process: Process,
    spec: ProcessSpec,
    on_bad_line: BadLineCallback,
    confinement: Confinement | None,
) -> AsyncIterator[AgyProcess]:
    send, receive = anyio.create_memory_object_stream[list[AgyOutput]](READ_AHEAD)
    agy = AgyProcess(
        process, spec, on_bad_line, _send=send, _receive=receive, confinement=confinement
    )
    async with agy.started():
        yield agy


def _carries_marker(pid: int, marker: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{RUN_MARKER_ENV}={marker}".encode() in environ.split(b"\0")


async def reap_group(pgid: int, marker: str) -> bool:
    """End a process group left by an earlier bridge run, if it still carries our marker.

    The marker check keeps a recycled PID from getting an unrelated process killed.
    """
    members = [pid for pid in group_members(pgid) if pid_state(pid) not in (None, "Z")]
    if not any(_carries_marker(pid, marker) for pid in members):
        return False
    await end_process_group(pgid)
    return True
