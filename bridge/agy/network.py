"""A network of its own per sandbox: the internet yes, the host's own services no.

With the host's network, an agent reaches every service listening on the host's loopback (the
store's PostgreSQL, a homeserver's admin port, metrics) and on the host's other addresses. Here
each sandbox gets a network namespace of its own (``bwrap --unshare-net``), connected to the
outside by ``slirp4netns`` (user-mode networking: the sandbox's connections become ordinary
connections the host makes) started with ``--disable-host-loopback``, so its gateway does not
lead to the host's ``127.0.0.1``; every other address of the host gets an ``unreachable``
route inside the namespace. The sandbox's own loopback is empty except for one listening
socket the bridge makes there, on the port of its listener: agy's hooks and MCP client reach
the bridge at the same ``http://127.0.0.1:<port>`` URL as before, and nothing else.

How one start goes: bubblewrap reports its child's PID on ``--info-fd`` and waits on
``--block-fd`` before it runs agy; meanwhile the bridge starts slirp4netns for that PID, enters
the namespace from a thread of its own (``setns``) to make the listening socket and configure
``tap0`` and the routes (``ip -batch``), then lets bubblewrap go on. When agy ends, slirp4netns
is told to exit (``--exit-fd``) and the socket is closed.

This needs the bridge to be root (entering a namespace needs ``CAP_SYS_ADMIN``); elsewhere,
or without slirp4netns, the sandbox shares the host's network, and the banner, ``!status`` and
doctor say so. Nothing here knows about chat.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import anyio

log = logging.getLogger(__name__)

# Stand-ins in bubblewrap's argv for the pipes made at each start.
INFO_FD = "@agy-bridge-info-fd@"
BLOCK_FD = "@agy-bridge-block-fd@"
BWRAP_ARGS = ("--unshare-net", "--info-fd", INFO_FD, "--block-fd", BLOCK_FD)
# slirp4netns's fixed layout (its defaults, as --configure would set them).
TAP = "tap0"
ADDRESS = "10.0.2.100/24"
GATEWAY = "10.0.2.2"
DNS = "10.0.2.3"
MTU = 65520
# The egress proxy's port on a sandbox's loopback (bridge.agy.egress).
PROXY_PORT = 3128
# How long the set-up of one sandbox's network may take: it is part of agy's start, so it has the
# start's allowance (``[agy] init_timeout``, its default here), not a fixed few seconds of its
# own. A loaded host starts bubblewrap and slirp4netns slowly: a 10 s window passed at the
# bridge's start gave every sandbox the host's network for the bridge's life (the probe below
# fell back to "shared"), and passed at a thread's start failed that thread's turn.
DEFAULT_SETUP_SECONDS = 90.0
_CLONE_NEWNET = 0x40000000
_IP_FREEBIND = 15
_INFO_BYTES = 4096

ServeFunc = Callable[[socket.socket], AbstractAsyncContextManager[None]]


class NetworkError(Exception):
    """The sandbox's own network could not be set up (the start fails, in these words)."""


@dataclass(frozen=True)
class Network:
    """How sandboxes are networked on this host, decided once at start."""

    mode: Literal["private", "shared"]
    # Why sandboxes share the host's network (empty when they do not).
    problem: str = ""
    slirp: str = "slirp4netns"
    ip: str = "ip"
    # With ``[agy] egress``: the proxy's serving function (bridge.agy.egress), and no route out.
    proxy: ServeFunc | None = None
    setup_seconds: float = DEFAULT_SETUP_SECONDS

    @property
    def private(self) -> bool:
        return self.mode == "private"

    def describe(self) -> str:
        if self.private and self.proxy is not None:
            return (
                "each thread has a network of its own with no way out but the bridge's proxy, "
                "which reaches only the hosts in [agy] egress; the host's local services are "
                "out of reach"
            )
        if self.private:
            return (
                "each thread has a network of its own: the internet is reachable, the host's "
                "loopback and other local addresses are not (only its own bridge endpoint)"
            )
        return (
            "threads share the host's network: an agent can reach every service on the "
            f"host's loopback and local addresses ({self.problem})"
        )

    def status_line(self) -> str:
        if self.private and self.proxy is not None:
            return "• 🌐 Network: its own, only the hosts in [agy] egress (through the bridge)"
        if self.private:
            return "• 🌐 Network: its own (internet yes; the host's local services no)"
        return f"• ⚠️ Network: the host's, shared ({self.problem})"

    def setup(self, port: int, serve: ServeFunc | None) -> SandboxNetwork:
        """The network of one sandbox about to start (make its pipes now)."""
        return SandboxNetwork(self, port, serve)


def shared(problem: str) -> Network:
    return Network("shared", problem)


@dataclass
class SandboxNetwork:
    """One sandbox's network: its pipes to bubblewrap, its slirp4netns, its listening socket."""

    network: Network
    port: int
    serve: ServeFunc | None
    _info: tuple[int, int] = field(default_factory=os.pipe)
    _block: tuple[int, int] = field(default_factory=os.pipe)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """bubblewrap's argv with the pipes' numbers in place of the stand-ins."""
        numbers = {INFO_FD: str(self._info[1]), BLOCK_FD: str(self._block[0])}
        return [numbers.get(arg, arg) for arg in argv]

    @property
    def pass_fds(self) -> tuple[int, int]:
        return (self._info[1], self._block[0])

    def started(self) -> None:
        """bubblewrap runs: the parent's copies of its ends are closed."""
        _close(self._info[1], self._block[0])

    @contextlib.asynccontextmanager
    async def attached(self) -> AsyncIterator[None]:
        """Connect the sandbox (bubblewrap waits meanwhile), let it go on; on exit, take the
        connection down. Raises NetworkError when the sandbox cannot be connected."""
        info_r, block_w = self._info[0], self._block[1]
        connected = False
        holder = -1  # the sandbox's first process (a pidfd), which holds its namespaces
        # What the set-up waits for (said when it waits too long).
        step = "bubblewrap did not say which process to connect"
        try:
            async with contextlib.AsyncExitStack() as stack:
                # Only the set-up has a deadline: the sandbox then lives as long as agy. Every
                # wait in it is the event loop's (never a thread's), so the deadline, and a
                # shutdown, end it wherever it is.
                with anyio.fail_after(self.network.setup_seconds):
                    pid = await _child_pid(info_r)
                    holder = _pidfd(pid)
                    proxy = self.network.proxy
                    # With an egress list, no slirp4netns: the proxy is the only way out.
                    if proxy is None:
                        step = "slirp4netns did not report it was ready"
                        await _ready(
                            await stack.enter_async_context(_slirp(self.network.slirp, pid))
                        )
                    ports = [self.port] if proxy is None else [self.port, PROXY_PORT]
                    # Shielded: its work is short and never waits on another process, and a
                    # cancel meanwhile would lose its sockets and ``ip`` (the deadline and a
                    # shutdown reach the waits before and after).
                    with anyio.CancelScope(shield=True):
                        socks, configuring = await anyio.to_thread.run_sync(
                            _in_namespace, pid, ports, proxy is None, self.network.ip
                        )
                    for sock in socks:
                        stack.enter_context(sock)
                    if configuring is not None:
                        step = "ip did not configure it"
                        await _configured(configuring)
                    if self.serve is not None:
                        step = "the bridge's endpoint in it did not start"
                        await stack.enter_async_context(self.serve(socks[0]))
                if proxy is not None:  # its task group must not sit inside the deadline's scope
                    await stack.enter_async_context(proxy(socks[1]))
                os.write(block_w, b"1")
                _close(block_w)
                block_w = -1
                connected = True
                yield
        except BaseException as exc:
            if not connected:
                await _end(holder)
            if connected or not isinstance(exc, TimeoutError):
                raise
            raise NetworkError(
                f"it was not ready within {self.network.setup_seconds:g} s ([agy] init_timeout; "
                f"{step})"
            ) from None
        finally:
            _close(info_r, block_w, holder)


def _pidfd(pid: int) -> int:
    """A pidfd of the sandbox's first process: bubblewrap is its parent and holds it until it
    is let go on, so this PID is that process (a kill through the pidfd reaches no other)."""
    try:
        return os.pidfd_open(pid)
    except OSError as exc:
        raise NetworkError(f"the sandbox ended before its network was set up ({exc})") from None


async def _end(holder: int) -> None:
    """A set-up that failed ends the sandbox it made (whoever started bubblewrap may not have
    ended it yet), and waits for it to be gone (2 s at most: SIGKILL is not refused)."""
    if holder < 0:
        return
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(holder, signal.SIGKILL)
    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
        await anyio.wait_readable(holder)


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


async def _child_pid(info_r: int) -> int:
    """The sandbox's first process, as bubblewrap reports it: ``{"child-pid": N, …``."""
    data = b""
    while b"," not in data and b"}" not in data:
        chunk = await _read(info_r, _INFO_BYTES)
        if not chunk:
            raise NetworkError("bubblewrap ended before it made the sandbox")
        data += chunk
    try:
        return int(data.split(b":", 1)[1].split(b",")[0].split(b"}")[0])
    except (IndexError, ValueError):
        raise NetworkError(f"bubblewrap reported {data[:80]!r}, not a child PID") from None


async def _ready(ready_r: int) -> None:
    """Wait for slirp4netns's ready byte (its ``--ready-fd``)."""
    if not await _read(ready_r, 1):
        raise NetworkError("slirp4netns ended before it was ready")


async def _read(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from a pipe, waited for by the event loop: a blocking read in a
    thread could be neither cancelled nor bounded, and a helper that never wrote nor exited
    hung the start (and the bridge's shutdown) for good."""
    os.set_blocking(fd, False)
    while True:
        await anyio.wait_readable(fd)
        try:
            return os.read(fd, size)
        except BlockingIOError:  # woken for nothing
            continue


@contextlib.asynccontextmanager
async def _slirp(slirp: str, pid: int) -> AsyncIterator[int]:
    """slirp4netns for ``pid``'s namespace; yields the read end of its ready pipe."""
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        process = await anyio.open_process(
            [
                slirp,
                f"--mtu={MTU}",
                "--disable-host-loopback",
                f"--ready-fd={ready_w}",
                f"--exit-fd={exit_r}",
                str(pid),
                TAP,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(ready_w, exit_r),
        )
    except OSError as exc:
        _close(ready_r, ready_w, exit_r, exit_w)
        raise NetworkError(f"cannot start {slirp}: {exc}") from None
    _close(ready_w, exit_r)
    try:
        yield ready_r
    except BaseException:
        # The set-up failed, timed out or was cancelled: slirp4netns may be the one that hangs
        # (deaf to its exit-fd), and is of no use any more.
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise
    finally:
        _close(ready_r, exit_w)  # its exit-fd closed: slirp4netns ends
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(2):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def _in_namespace(
    pid: int, ports: list[int], route: bool, ip: str
) -> tuple[list[socket.socket], _Configuring | None]:
    """From a thread of its own (``setns`` changes only the calling thread's namespace; the
    thread ends afterwards, so nothing else ever runs in the sandbox's network): the listening
    sockets on the sandbox's loopback, and, with ``route`` (slirp4netns is ready), ``ip``
    started there to configure ``tap0`` and the routes (None: no way out). Nothing here waits
    on another process (``_configured`` waits for ``ip``), so the thread always ends soon and
    the caller need not be able to abandon it."""
    result: list[tuple[list[socket.socket], _Configuring | None] | BaseException] = []

    def inside() -> None:
        try:
            result.append(_enter_and_configure(pid, ports, route, ip))
        except BaseException as exc:  # handed to the caller
            result.append(exc)

    thread = threading.Thread(target=inside, name=f"netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    [outcome] = result
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _enter_and_configure(
    pid: int, ports: list[int], route: bool, ip: str
) -> tuple[list[socket.socket], _Configuring | None]:
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NetworkError(f"the sandbox ended before its network was set up ({exc})") from None
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetworkError(f"cannot enter the sandbox's network: {os.strerror(err)}")
    finally:
        os.close(target)
    socks: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            socks.append(sock)
            # bubblewrap brings the sandbox's loopback up only after it is released: bind first.
            sock.setsockopt(socket.SOL_IP, _IP_FREEBIND, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            sock.setblocking(False)
        if not route:
            return socks, None
        commands = [
            f"addr add {ADDRESS} dev {TAP}",
            f"link set {TAP} mtu {MTU} up",
            f"route add default via {GATEWAY} dev {TAP}",
            *(f"route add unreachable {address}/32" for address in host_addresses()),
        ]
        # Its input and its error output are files, not pipes: neither side can block on the
        # other. It runs in the sandbox's network, inherited from this thread.
        errors = tempfile.TemporaryFile()
        try:
            with tempfile.TemporaryFile() as batch:
                batch.write("\n".join(commands).encode())
                batch.seek(0)
                process = subprocess.Popen(
                    [ip, "-batch", "-"], stdin=batch, stdout=subprocess.DEVNULL, stderr=errors
                )
        except BaseException:
            errors.close()
            raise
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks, _Configuring(process, errors)


@dataclass
class _Configuring:
    """``ip`` at work in a sandbox's network, and the file its error output goes to."""

    process: subprocess.Popen[bytes]
    errors: IO[bytes]

    def said(self) -> str:
        """What it wrote to its error output (the file then closed)."""
        with self.errors:
            self.errors.seek(0)
            return self.errors.read(_INFO_BYTES).decode("utf-8", "replace").strip()


async def _configured(configuring: _Configuring) -> None:
    """Wait for ``ip`` to have configured the sandbox's network; killed if the wait is ended
    (the deadline, a shutdown)."""
    process = configuring.process
    try:
        code = await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
    except BaseException:
        process.kill()
        process.wait()  # killed: at once
        raise
    finally:
        said = configuring.said()
    if code != 0:
        raise NetworkError(f"cannot configure the sandbox's network: {said}")


def host_addresses(fib_trie: Path = Path("/proc/net/fib_trie")) -> list[str]:
    """The host's own IPv4 addresses but loopback (its local routing table), sorted."""
    try:
        lines = fib_trie.read_text().splitlines()
    except OSError:
        return []
    found = set()
    for before, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            address = before.strip().removeprefix("|-- ").removeprefix("+-- ")
            try:
                parsed = ipaddress.IPv4Address(address)
            except ValueError:
                continue
            if not parsed.is_loopback:
                found.add(parsed)
    return [str(address) for address in sorted(found)]


def loopback_nameservers(resolv: Path = Path("/etc/resolv.conf")) -> list[str]:
    """The nameservers of ``resolv`` on a loopback address (out of a sandbox's reach)."""
    found: list[str] = []
    try:
        lines = resolv.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                if ipaddress.ip_address(words[1].split("%")[0]).is_loopback:
                    found.append(words[1])
            except ValueError:
                continue
    return found


# --- can it work here? -------------------------------------------------------------------------


def find_slirp() -> str | None:
    return shutil.which("slirp4netns")


async def resolve_network(
    wanted: Literal["private", "shared"] | None,
    bwrap: str,
    *,
    slirp: str | None = None,
    setup_seconds: float = DEFAULT_SETUP_SECONDS,
) -> Network:
    """The network sandboxes get on this host. With ``wanted`` "private", a host where it
    cannot work raises NetworkError; unset, it falls back to the shared network (said).
    ``setup_seconds``: the start's allowance, for each set-up and for the check."""
    if wanted == "shared":
        return shared('[agy] network = "shared"')
    slirp = slirp or find_slirp()
    problem = await network_problem(bwrap, slirp, setup_seconds)
    if problem is None:
        return Network(
            "private", slirp=slirp or "slirp4netns", ip=_ip(), setup_seconds=setup_seconds
        )
    if wanted == "private":
        raise NetworkError(f'[agy] network = "private", but {problem}')
    return shared(problem)


def _ip() -> str:
    return shutil.which("ip") or "ip"


async def network_problem(
    bwrap: str, slirp: str | None, setup_seconds: float = DEFAULT_SETUP_SECONDS
) -> str | None:
    """Why sandboxes cannot have a network of their own here (None: they can; one real
    sandbox is connected and checked)."""
    if slirp is None:
        return "slirp4netns is not installed (Debian/Ubuntu: apt-get install slirp4netns)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "the bridge is not root, and only root may enter a sandbox's network to connect it"
    network = Network("private", slirp=slirp, ip=_ip(), setup_seconds=setup_seconds)
    setup = network.setup(_free_port(), None)
    sandbox = ["--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc"]
    command = ["--dev", "/dev", "--", "ip", "route", "show", "default"]
    argv = setup.argv([bwrap, *BWRAP_ARGS, *sandbox, *command])
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=setup.pass_fds,
        )
    except OSError as exc:
        setup.started()
        return f"cannot run bubblewrap: {exc}"
    setup.started()
    async with process:
        try:
            async with setup.attached():
                with anyio.fail_after(setup_seconds):
                    out = await _read_all(process)
                    await process.wait()
        except (NetworkError, TimeoutError) as exc:
            process.kill()
            return f"a sandbox's own network could not be set up: {exc or 'timeout'}"
        except BaseException:  # cancelled (the bridge stops while it starts): no sandbox left
            process.kill()
            raise
    if GATEWAY not in out:
        return f"a sandbox's own network had no route out ({out.strip() or 'nothing'})"
    return None


async def _read_all(process: anyio.abc.Process) -> str:
    assert process.stdout is not None
    chunks = [chunk async for chunk in process.stdout]
    return b"".join(chunks).decode("utf-8", "replace")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
