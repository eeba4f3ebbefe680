"""Many threads at once: N chat threads, each streaming a long answer, through one bridge, beside
a minimal reader of the same N simulators.

At each level N (default 200; ``--threads 50,100,200`` for several), two variants run one after
the other, each in a process of its own so that its CPU time (``getrusage(RUSAGE_SELF)``,
simulators excluded) and its resident memory are its alone:

- bridge: the core with a chat adapter that only counts and takes the time (no chat service),
  ``max_processes`` = N. All N messages are submitted at once; every thread's answer is
  ``[[long L]]`` in ``[[chunks C]]`` text deltas;
- direct: N simulator processes on pipes, read by the least a client can do (split lines, parse
  JSON, count the deltas): the baseline for CPU per delta and memory per session. Their plugin
  runs the bridge's own ``PreInvocation`` hook command against a minimal server answering
  ``{}``, so the simulators do the same work under both variants. Like the bridge, it makes a
  thread's files (its workspace, its plugin) when the thread's first message comes, in the cold
  round; the summary also shows the cold ratio without them.

The bridge variant runs as ``agy-bridge run`` does, with its garbage collector set for a server
once it is ready (``bridge.heap``). ``--what-if`` adds two more: the bridge with its store
connection switched to ``synchronous=NORMAL`` (no fsync per commit), to show what the store's
fsyncs cost a burst, and the bridge with Python's default collector settings, to show what
those save.

Each variant runs two rounds: *cold* (the message starts the thread's agy process: N processes
start at once) and *warm* (a second message per thread, processes already running: pure
streaming). A bridge round ends when every turn's end is recorded in the store (that comes after
the answer is posted, and is part of the turn's cost). Reported per level and round: wall time,
the variant's own CPU time per 1,000 deltas and as a share of the wall time (one event loop
cannot use more than one core), the
longest wait of any thread from the burst to its message being stored (when a platform may be
acknowledged), to its first delta and to its final answer, chat calls per reply, the CPU time
of the event loop's thread alone, and memory: the bridge's RSS in all (after the cold round,
and the most it held in both rounds) and per session, and the simulators'. What one delta
costs the event loop: the warm round's loop CPU with ``--chunks 100`` less that with
``--chunks 1``, over the deltas between them.

The cold round creates each thread's files (workspace, plugin, store rows): what a new inode
costs the kernel there is measured in the bridge's scratch folder before its rounds and shown
beside the ratios, since it varies far more than the bridge's own work (see bench/README.md).
The scratch folders are made in the temporary directory (``TMPDIR``); point ``TMPDIR`` at the
disk the bridge's ``data_dir`` will be on to measure that disk.

``--profile`` runs the bridge's cold and warm rounds under cProfile and prints each on stderr
(the event loop's thread only, by its CPU time: the store's aiosqlite thread is not in it).

``--repeat N`` runs every variant N times, alternating, and reports each round from the run
that cost the least CPU: on a machine shared with other jobs, they only ever add to a round's
cost, so the least is the closest to the variant's own (the cold round of one build moved by
half between single runs).

    python -m bench.scale [--threads 200] [--lines 400] [--chunks 100] [--repeat N] [--what-if]
        [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import anyio

from bench.common import (
    ROOT,
    SIMULATOR,
    STREAM_FLAGS,
    DirectAgy,
    bridge_config,
    children_of,
    cpu_seconds,
    hook_plugin,
    inode_cost,
    machine,
    minimal_hook_server,
    percentile,
    rss_bytes,
    simulator_env,
    submit,
    sync_normal,
    table,
    timing_adapter,
)
from bridge.app import Bridge, open_bridge, start_adapters
from bridge.core.events import ThreadRef
from bridge.core.store.rows import TurnState
from bridge.heap import server_collector
from tests.doubles import RecordedReply, RecordingAdapter

RUNNING_COUNT = "SELECT COUNT(*) AS n FROM turns WHERE state = ?"
LEVELS = (200,)
LINES = 400
CHUNKS = 100
ROUND_TIMEOUT = 600.0
NORMAL_VARIANT = "bridge, sync=NORMAL"
DEFAULT_GC_VARIANT = "bridge, default gc"
VARIANT_NAMES = {"bridge-normal": NORMAL_VARIANT, "bridge-default-gc": DEFAULT_GC_VARIANT}
MIB = 1024 * 1024


@dataclass
class RoundResult:
    """One round of one variant: every thread got one message and answered it."""

    label: str
    wall: float = 0.0
    cpu: float = 0.0
    deltas: int = 0
    # Per thread, seconds from the burst: its message stored (the platform may be acknowledged
    # then; the bridge only), its first answer text, its final answer.
    stored: list[float] = field(default_factory=list)
    first_delta: list[float] = field(default_factory=list)
    final: list[float] = field(default_factory=list)
    calls_per_reply: list[int] = field(default_factory=list)
    errors: int = 0
    # The event loop's thread alone (``cpu`` also holds the store's thread and asyncio's child
    # watchers): what a delta costs the loop is the difference between answers of many deltas
    # and of one (``--chunks``).
    loop_cpu: float = 0.0
    # Part of ``cpu``: making the threads' files (the direct variant's cold round only; the
    # bridge's is inside its start path and not told apart).
    setup_cpu: float = 0.0


@dataclass
class LevelResult:
    variant: str
    threads: int
    rounds: list[RoundResult] = field(default_factory=list)
    rss_start: int = 0
    rss_sessions: int = 0  # after the cold round, with N sessions alive
    rss_peak: int = 0  # the most the variant's process held, by the end of its rounds
    simulators_rss: int = 0
    simulators: int = 0
    # CPU microseconds to create one file or directory where this variant kept its files.
    inode_us: float = 0.0


def answer_text(lines: int, chunks: int, number: int) -> str:
    return f"round {number}: [[long {lines}]] [[chunks {chunks}]]"


# --- the bridge variant ----------------------------------------------------------------------


async def bridge_round(
    label: str,
    number: int,
    adapter: RecordingAdapter,
    bridge: Bridge,
    threads: int,
    text: str,
    chunks: int,
) -> RoundResult:
    """All N messages arrive at once (each submitted in its own task, as an adapter handles
    events); every wait is measured from that moment."""
    refs = [adapter.thread(f"t{i:04d}") for i in range(threads)]
    result = RoundResult(label)
    cpu0, loop0, started = cpu_seconds(), time.thread_time(), time.perf_counter()

    async def deliver(ref: ThreadRef) -> None:
        await submit(bridge.core, adapter.message(ref, text))
        result.stored.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for ref in refs:
            tg.start_soon(deliver, ref)
    # The check runs in this process after every chat call, so its CPU is counted as the
    # bridge's: it must cost what changed, not all N threads each time (threads finish in
    # any order; the finished ones are dropped from the end, once).
    unfinished = list(refs)

    def all_finished() -> bool:
        while unfinished and len(adapter.finished(unfinished[-1])) >= number:
            unfinished.pop()
        return not unfinished

    await adapter.changes.until(all_finished, ROUND_TIMEOUT)
    # A turn is the bridge's work until its end is recorded, which comes after the answer is
    # posted: counted in this round, not in the next one's (or, for the last round, in none).
    await turns_recorded(bridge)
    result.wall = time.perf_counter() - started
    result.cpu = cpu_seconds() - cpu0
    result.loop_cpu = time.thread_time() - loop0
    for ref in refs:
        reply: RecordedReply = adapter.finished(ref)[number - 1]
        assert reply.finished is not None
        # agy printed ``chunks`` deltas for this answer; the bridge may hand them to the chat
        # in fewer appends (it coalesces what arrives together), which calls_per_reply shows.
        result.deltas += chunks
        result.final.append(reply.finished - started)
        result.first_delta.append((reply.first_delta or reply.finished) - started)
        result.calls_per_reply.append(reply.calls)
        if reply.outcome is None or reply.outcome.error:
            result.errors += 1
    return result


async def turns_recorded(bridge: Bridge) -> None:
    """Until no turn is left running in the store (a count: cheap enough to poll)."""
    with anyio.fail_after(ROUND_TIMEOUT):
        while (await bridge.store.database.fetch(RUNNING_COUNT, (TurnState.RUNNING,)))[0]["n"]:
            await anyio.sleep(0.002)


def report_profile(profiler: cProfile.Profile, label: str) -> None:
    """A round's costliest functions (own time; and the bridge's by cumulative time), on stderr
    (the report is stdout)."""
    out = io.StringIO()
    out.write(f"=== profile of the bridge's {label} round ===\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumtime").print_stats(r"bridge/", 40)
    print(out.getvalue(), file=sys.stderr, flush=True)


async def run_bridge(
    threads: int,
    lines: int,
    chunks: int,
    root: Path,
    *,
    variant: str = "bridge",
    profile: bool = False,
) -> LevelResult:
    adapter = timing_adapter()
    # Every thread keeps its process: the limit is the level, and nobody idles out.
    config = bridge_config(
        root / "data", root / "sim-home", max_processes=threads, init_timeout=ROUND_TIMEOUT
    )
    level = LevelResult(VARIANT_NAMES.get(variant, "bridge"), threads)
    async with (
        open_bridge(config, {adapter.platform: adapter}) as bridge,
        AsyncExitStack() as stack,
    ):
        async with anyio.create_task_group() as tg:
            if variant != "bridge-default-gc":
                stack.enter_context(server_collector())  # as `agy-bridge run` does
            await start_adapters(bridge, tg)
            if variant == "bridge-normal":
                await sync_normal(bridge)
            level.rss_start = rss_bytes()
            for number, label in ((1, "cold"), (2, "warm")):
                text = answer_text(lines, chunks, number)
                profiler = cProfile.Profile(time.thread_time) if profile else None
                if profiler is not None:
                    profiler.enable()
                level.rounds.append(
                    await bridge_round(label, number, adapter, bridge, threads, text, chunks)
                )
                if profiler is not None:
                    profiler.disable()
                    report_profile(profiler, label)
                if number == 1:
                    level.rss_sessions = rss_bytes()
                    sims = children_of(os.getpid())
                    level.simulators = len(sims)
                    level.simulators_rss = sum(rss_bytes(pid) for pid in sims)
            level.rounds[-1].errors += len(adapter.notices)  # "slots busy" and the like
            level.rss_peak = rss_bytes(field="VmHWM")
            await bridge.core.shutdown()
            tg.cancel_scope.cancel()
    return level


# --- the direct variant ----------------------------------------------------------------------


async def run_direct(threads: int, lines: int, chunks: int, root: Path) -> LevelResult:
    async with minimal_hook_server() as hook_url:
        return await drive_direct(threads, lines, chunks, root, hook_url)


async def drive_direct(
    threads: int, lines: int, chunks: int, root: Path, hook_url: str
) -> LevelResult:
    level = LevelResult("direct", threads)
    level.rss_start = rss_bytes()
    env = simulator_env(root / "sim-home")
    workdirs = [root / "work" / f"t{i:04d}" for i in range(threads)]
    sessions = [root / "sessions" / f"t{i:04d}" for i in range(threads)]
    argvs = [[*SIMULATOR, *STREAM_FLAGS, "--add-dir", str(session)] for session in sessions]
    agents: list[DirectAgy | None] = [None] * threads
    try:
        for number, label in ((1, "cold"), (2, "warm")):
            text = answer_text(lines, chunks, number)
            result = RoundResult(label)
            cpu0, loop0, started = cpu_seconds(), time.thread_time(), time.perf_counter()

            async def one(
                index: int, text: str = text, result: RoundResult = result, began: float = started
            ) -> None:
                agent = agents[index]
                if agent is None:
                    # A thread's first message makes its files, as the bridge does: a
                    # workspace and a plugin with the hook (the simulator reads it at start).
                    began_setup = time.thread_time()
                    workdirs[index].mkdir(parents=True)
                    hook_plugin(sessions[index], hook_url)
                    result.setup_cpu += time.thread_time() - began_setup
                    agent = agents[index] = await DirectAgy.start(
                        argvs[index], env, workdirs[index]
                    )
                times = await agent.turn(text, began)
                result.first_delta.append(times.first_delta)
                result.final.append(times.result)
                result.deltas += times.deltas

            with anyio.fail_after(ROUND_TIMEOUT):
                async with anyio.create_task_group() as tg:
                    for index in range(threads):
                        tg.start_soon(one, index)
            result.wall = time.perf_counter() - started
            result.cpu = cpu_seconds() - cpu0
            result.loop_cpu = time.thread_time() - loop0
            level.rounds.append(result)
            if number == 1:
                level.rss_sessions = rss_bytes()
                sims = children_of(os.getpid())
                level.simulators = len(sims)
                level.simulators_rss = sum(rss_bytes(pid) for pid in sims)
        level.rss_peak = rss_bytes(field="VmHWM")
    finally:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for agent in agents:
                    if agent is not None:
                        tg.start_soon(agent.close)
    return level


async def run_one(
    variant: str, threads: int, lines: int, chunks: int, root: Path, profile: bool = False
) -> LevelResult:
    inode_us = inode_cost(root) * 1e6
    if variant == "direct":
        level = await run_direct(threads, lines, chunks, root)
    else:
        level = await run_bridge(threads, lines, chunks, root, variant=variant, profile=profile)
    level.inode_us = inode_us
    return level


# --- the parent: levels, variants, the report ------------------------------------------------


def run_variant(
    variant: str, threads: int, lines: int, chunks: int, scratch: Path, profile: bool = False
) -> LevelResult:
    """One variant at one level, in a process of its own; its result comes back as JSON."""
    command = [
        sys.executable,
        "-m",
        "bench.scale",
        "--variant",
        variant,
        "--threads",
        str(threads),
        "--lines",
        str(lines),
        "--chunks",
        str(chunks),
        "--scratch",
        str(scratch),
        *(["--profile"] if profile and variant != "direct" else []),
    ]
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, check=True)
    data = json.loads(done.stdout.decode().strip().splitlines()[-1])
    rounds = [RoundResult(**r) for r in data.pop("rounds")]
    return LevelResult(**data, rounds=rounds)


def run_levels(
    args: argparse.Namespace, levels: Sequence[int], lines: int, chunks: int, scratch: Path
) -> list[LevelResult]:
    """Every variant at every level, ``args.repeat`` times, alternating; the best of each."""
    variants = [
        "direct",
        "bridge",
        *(["bridge-normal", "bridge-default-gc"] if args.what_if else []),
    ]
    results = []
    for position, threads in enumerate(levels):
        runs: dict[str, list[LevelResult]] = {variant: [] for variant in variants}
        for repeat in range(args.repeat):
            # The order rotates between levels and repeats, so no variant always runs first.
            shift = (position + repeat) % len(variants)
            for variant in [*variants[shift:], *variants[:shift]]:
                runs[variant].append(
                    run_variant(variant, threads, lines, chunks, scratch, args.profile)
                )
                print(f"  measured {variant} with {threads} threads", flush=True)
        results += [best_of(runs[variant]) for variant in variants]
    return results


def best_of(runs: Sequence[LevelResult]) -> LevelResult:
    """Several runs of one variant at one level as one: each round from the run where it cost
    the least CPU. Other jobs on a shared machine only ever add to a round's CPU time (taking
    caches, contending for the kernel's locks), so the least is the closest to the variant's
    own cost; the errors of every run count."""
    first = runs[0]
    rounds = []
    for index in range(len(first.rounds)):
        candidates = [run.rounds[index] for run in runs]
        best = min(candidates, key=lambda r: r.cpu)
        rounds.append(replace(best, errors=sum(r.errors for r in candidates)))
    return replace(
        first,
        rounds=rounds,
        rss_sessions=max(run.rss_sessions for run in runs),
        rss_peak=max(run.rss_peak for run in runs),
        inode_us=min(run.inode_us for run in runs),
    )


def spread(values: Sequence[float]) -> tuple[float, float]:
    return (percentile(values, 0.5), max(values)) if values else (float("nan"), float("nan"))


def without_setup(result: RoundResult) -> RoundResult:
    return replace(result, cpu=result.cpu - result.setup_cpu)


def per_thousand(result: RoundResult) -> float:
    return result.cpu / result.deltas * 1000 * 1000 if result.deltas else float("nan")


def report(
    results: Sequence[LevelResult], lines: int, chunks: int, seconds: float, where: str
) -> None:
    print(where)
    print(
        f"every thread: one answer of [[long {lines}]] in [[chunks {chunks}]] per round; "
        f"{seconds:.0f} s in all\n"
    )
    rows = []
    for level in results:
        for r in level.rounds:
            rows.append(
                [
                    str(level.threads),
                    level.variant,
                    r.label,
                    f"{r.wall:.2f}",
                    f"{r.cpu:.2f}",
                    f"{per_thousand(r):.0f}",
                    f"{r.cpu / r.wall * 100:.0f}%" if r.wall else "-",
                    "{:.2f} / {:.2f}".format(*spread(r.stored)) if r.stored else "-",
                    "{:.2f} / {:.2f}".format(*spread(r.first_delta)),
                    "{:.2f} / {:.2f}".format(*spread(r.final)),
                    str(r.deltas),
                    str(r.errors),
                    f"{r.loop_cpu:.3f}",
                ]
            )
    print(
        table(
            [
                "threads",
                "variant",
                "round",
                "wall s",
                "CPU s",
                "CPU ms / 1000 deltas",
                "CPU / wall",
                "stored p50 / max s",
                "first delta p50 / max s",
                "final p50 / max s",
                "deltas",
                "errors",
                "event loop CPU s",
            ],
            rows,
        )
    )
    print()
    by_key = {(r.variant, r.threads): r for r in results}
    rows = []
    for threads in sorted({r.threads for r in results}):
        bridge, direct = by_key.get(("bridge", threads)), by_key.get(("direct", threads))
        if bridge is None or direct is None:
            continue
        cells = [str(threads)]
        for index in (0, 1):
            b, d = per_thousand(bridge.rounds[index]), per_thousand(direct.rounds[index])
            cells.append(f"{b / d:.2f}x")
        # The ratio as it was measured before the direct variant made its files in the round.
        cold = direct.rounds[0]
        cells.append(f"{per_thousand(bridge.rounds[0]) / per_thousand(without_setup(cold)):.2f}x")
        added = bridge.rss_sessions - bridge.rss_start
        direct_added = direct.rss_sessions - direct.rss_start
        cells += [
            f"{bridge.rss_start / MIB:.0f}",
            f"{bridge.rss_sessions / MIB:.0f}",
            f"{bridge.rss_peak / MIB:.0f}",
            f"{added / threads / 1024:.0f}",
            f"{direct_added / threads / 1024:.0f}",
            f"{bridge.simulators_rss / MIB:.0f} ({bridge.simulators})",
        ]
        calls = bridge.rounds[1].calls_per_reply
        cells.append(f"{percentile(calls, 0.5):.0f} / {max(calls)}")
        cells.append(f"{bridge.inode_us:.0f}")
        rows.append(cells)
    print(
        table(
            [
                "threads",
                "CPU/delta bridge/direct cold",
                "warm",
                "cold, direct's files not counted",
                "bridge RSS start MiB",
                "with N sessions MiB",
                "peak MiB",
                "per session KiB",
                "direct per process KiB",
                "simulators RSS MiB (procs)",
                "chat calls / reply p50 / max",
                "bridge's disk: µs CPU / new inode",
            ],
            rows,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--threads", default=",".join(map(str, LEVELS)), help="levels, e.g. 50,200")
    parser.add_argument("--lines", type=int, default=LINES, help="lines in each answer")
    parser.add_argument("--chunks", type=int, default=CHUNKS, help="text deltas per answer")
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="also run the bridge with its store at synchronous=NORMAL, and with the default gc",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every variant this many times (alternating) and keep each round's least CPU",
    )
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the bridge's rounds (cProfile, top 30 by own time on stderr)",
    )
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--variant",
        choices=("bridge", "bridge-normal", "bridge-default-gc", "direct"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in str(args.threads).split(",") if x]
    lines, chunks = (20, 5) if args.quick else (args.lines, args.chunks)
    if args.quick:
        levels = [2]
    if args.variant is not None:
        with ExitStack() as stack:
            if args.scratch is None:
                tmp = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix=f"agy-bench-scale-{args.variant}-")
                )
            else:  # the parent removes it, after every run
                tmp = tempfile.mkdtemp(prefix=f"{args.variant}-", dir=args.scratch)
            level = anyio.run(
                run_one,
                args.variant,
                levels[0],
                lines,
                chunks,
                Path(tmp),
                args.profile,
                backend="asyncio",
            )
        print(json.dumps(asdict(level)), flush=True)
        return 0
    where = machine()
    started = time.perf_counter()
    # Every run's files stay until the end: removing one run's thousands of files just before
    # the next made the next one's new files cost more (see ``inode_cost``): the bench
    # measuring itself.
    with tempfile.TemporaryDirectory(prefix="agy-bench-scale-") as scratch:
        results = run_levels(args, levels, lines, chunks, Path(scratch))
    if args.repeat > 1:
        where += f"; each round the least CPU of {args.repeat} runs"
    report(results, lines, chunks, time.perf_counter() - started, where)
    failed = sum(r.errors for level in results for r in level.rounds)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
