"""What the turn benchmarks share: the simulator driven directly, a timing chat adapter, bridge
configs, process readings, statistics and tables.

Every benchmark here compares the bridge with a baseline measured in the same run, so these
helpers stay small and predictable: the direct driver does what any client of agy must do
(write one line, read to ``result``) and nothing more.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from bridge.agy import wire
from bridge.agy.listener import hook_command, url_file_name, url_file_text
from bridge.agy.plugin import plugin_dir, write_plugin
from bridge.agy.runtime import HOOK_TIMEOUT_SECONDS
from bridge.app import Bridge
from bridge.config import Config, build_config
from bridge.core.events import (
    Author,
    Inbound,
    IncomingMessage,
    SubmitOutcome,
)
from tests.doubles import RecordingAdapter, signed_in

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = (sys.executable, "-m", "bridge.simulator")
# agy runs headless only in print mode; "--print=" as the bridge passes it.
STREAM_FLAGS = ("--print=", "--input-format", "stream-json", "--output-format", "stream-json")
MAX_LINE = 1 << 24
AUTHOR = Author(id="@alice:bench", display_name="Alice")


# --- statistics and tables -------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: every value reported was measured)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base > 0 else "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table, columns padded so it also reads well in a terminal."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def machine() -> str:
    """One line about where the numbers were taken."""
    cpu = "unknown CPU"
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                cpu = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = _meminfo_kib("MemTotal")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), "
        f"{memory / 1024 / 1024:.0f} GiB RAM, Python {platform.python_version()}, "
        f"load average at start {load}"
    )


def _meminfo_kib(key: str) -> int:
    try:
        for text in Path("/proc/meminfo").read_text().splitlines():
            if text.startswith(key + ":"):
                return int(text.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# --- readings of processes -------------------------------------------------------------------


def cpu_seconds() -> float:
    """CPU time (user + system) of this process, all its threads, none of its children."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def inode_cost(where: Path, count: int = 100) -> float:
    """CPU seconds this process spends creating one empty file or directory in ``where``.

    What the filesystem charges for a new inode: a few microseconds on tmpfs, ten to twenty on
    a quiet ext4, and hundreds on an ext4 without a journal where many files were deleted in
    the last minutes (it skips every recently freed inode of the group, looking each up). A
    thread's first message creates several (its workspace and its plugin), so a round that
    starts threads moves with it: reported beside that round. The files are left in ``where``
    (removing them would make the next files made there cost more): its owner removes them.
    """
    probe = where / ".inode-probe"
    probe.mkdir()
    start = cpu_seconds()
    for index in range(count):
        path = probe / str(index)
        if index % 2:
            path.mkdir()
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return (cpu_seconds() - start) / count


def rss_bytes(pid: int | str = "self", field: str = "VmRSS") -> int:
    """Resident memory of one process from /proc (0 when it is gone); ``field="VmHWM"``: the
    most it has held so far."""
    try:
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            if text.startswith(f"{field}:"):
                return int(text.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (through /proc/<pid>/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


# --- the simulator driven directly -----------------------------------------------------------


def simulator_env(sim_home: Path, startup_delay: float = 0.0) -> dict[str, str]:
    env = {**os.environ, "AGY_SIM_HOME": str(signed_in(sim_home))}
    env.pop("AGY_SIM_STARTUP_DELAY", None)
    if startup_delay:
        env["AGY_SIM_STARTUP_DELAY"] = f"{startup_delay:g}"
    return env


@dataclass(frozen=True)
class TurnTimes:
    """Seconds from the turn's start (the line written, or the process spawned) to its first
    answer text and to its ``result``; and how many text deltas it streamed."""

    first_delta: float
    result: float
    deltas: int


class DirectAgy:
    """One simulator process on pipes: a line in, events out until ``result``."""

    def __init__(self, process: Process, conversation_id: str) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.conversation_id = conversation_id
        self._stdout = BufferedByteReceiveStream(process.stdout)

    @classmethod
    async def start(cls, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> DirectAgy:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=dict(env),
        )
        assert process.stdout is not None
        agy = cls(process, "")
        event = await agy._event()
        if event.get("event") != "init":
            raise RuntimeError(f"the simulator did not start: {event}")
        agy.conversation_id = str(event.get("conversation_id") or "")
        return agy

    async def _event(self) -> dict[str, Any]:
        line = await self._stdout.receive_until(b"\n", MAX_LINE)
        event: dict[str, Any] = json.loads(line)
        return event

    async def turn(self, text: str, started: float | None = None) -> TurnTimes:
        """Write one user line and read until ``result``; times count from ``started`` (by
        default, just before the line is written)."""
        assert self.process.stdin is not None
        if started is None:
            started = time.perf_counter()
        await self.process.stdin.send(wire.user_line([text]))
        first: float | None = None
        deltas = 0
        while True:
            event = await self._event()
            kind = event.get("event")
            if kind == "step_update" and event["step_update"].get("text_delta"):
                deltas += 1
                if first is None:
                    first = time.perf_counter() - started
            elif kind == "result":
                done = time.perf_counter() - started
                if event["result"].get("status") != "SUCCESS":
                    raise RuntimeError(f"the simulator's turn failed: {event['result']}")
                return TurnTimes(first if first is not None else done, done, deltas)

    async def close(self) -> None:
        """stdin EOF (the simulator exits 0 when idle), then wait; kill if it lingers."""
        await close_process(self.process)


async def close_process(process: Process) -> None:
    """stdin EOF, up to 10 s to exit on its own, then kill: a helper process never lingers."""
    assert process.stdin is not None
    await process.stdin.aclose()
    with anyio.move_on_after(10):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    await process.aclose()


@asynccontextmanager
async def direct_agy(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path
) -> AsyncIterator[DirectAgy]:
    agy = await DirectAgy.start(argv, env, cwd)
    try:
        yield agy
    finally:
        with anyio.CancelScope(shield=True):
            await agy.close()


# --- a hook like the bridge's, answered by a minimal server ---------------------------------


@asynccontextmanager
async def minimal_hook_server() -> AsyncIterator[str]:
    """aiohttp's low-level server answering ``{}`` to anything; yields a hook URL on it."""

    async def answer(request: web.BaseRequest) -> web.Response:
        await request.read()
        return web.Response(body=b"{}", content_type="application/json")

    runner = web.ServerRunner(web.Server(answer), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/hook/PreInvocation"
    finally:
        await runner.cleanup()


def hook_plugin(session_dir: Path, url: str) -> Path:
    """A session folder whose plugin runs the bridge's own hook command (curl) against ``url``,
    so a simulator driven directly does the same work per model call as under the bridge."""
    session_dir.mkdir(parents=True, exist_ok=True)
    write_plugin(
        session_dir,
        guidance="",
        notes="",
        hook_commands={
            "PreInvocation": hook_command(
                plugin_dir(session_dir) / url_file_name("PreInvocation"), HOOK_TIMEOUT_SECONDS
            )
        },
        hook_timeout=HOOK_TIMEOUT_SECONDS,
        mcp_servers={},
        url_files={url_file_name("PreInvocation"): url_file_text(url)},
    )
    return session_dir


def url_file(folder: Path, url: str) -> Path:
    """A curl config file holding ``url``, as the bridge writes one for each hook (the token
    never goes on a command line)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{len(list(folder.iterdir()))}.curl"
    path.write_text(url_file_text(url))
    return path


# --- the chat adapter: the tests' recording double, keeping counts and times only -----------


def timing_adapter() -> RecordingAdapter:
    """The tests' recording adapter without the text: what it measures is the core and agy."""
    return RecordingAdapter(platform="bench", record_text=False)


async def submit(inbound: Inbound, message: IncomingMessage) -> None:
    outcome = await inbound.submit(message)
    if outcome is not SubmitOutcome.ACCEPTED:
        raise RuntimeError(f"the core did not accept a benchmark message: {outcome}")


# --- the bridge's configuration --------------------------------------------------------------


def bridge_config(
    data_dir: Path,
    sim_home: Path,
    *,
    startup_delay: float = 0.0,
    max_processes: int = 4,
    idle_timeout: float = 900.0,
    init_timeout: float = 60.0,
    isolation: str = "none",
    extra: Mapping[str, Any] | None = None,
) -> Config:
    """A bridge on the simulator; the simulator's settings travel in ``[agy] env``.

    Unsandboxed unless asked (``isolation="bwrap"``): the sandbox's cost is measured on its own.
    """
    env = {"AGY_SIM_HOME": str(signed_in(sim_home))}
    if startup_delay:
        env["AGY_SIM_STARTUP_DELAY"] = f"{startup_delay:g}"
    raw: dict[str, Any] = {
        "bridge": {"data_dir": str(data_dir)},
        "agy": {
            "command": list(SIMULATOR),
            "env": env,
            "max_processes": max_processes,
            "idle_timeout": idle_timeout,
            "init_timeout": init_timeout,
            "stop_grace": 5,
            "isolation": isolation,
        },
        **(extra or {}),
    }
    return build_config(raw, environ={})


async def sync_normal(bridge: Bridge) -> None:
    """What-if only: the bridge's store connection with ``synchronous=NORMAL`` (in WAL mode no
    fsync per commit: a power cut may lose the last commits, a crash of the bridge loses none).
    The bridge itself opens its store with FULL."""
    await bridge.store._db.execute("PRAGMA synchronous=NORMAL")
