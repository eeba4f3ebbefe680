"""One agy process per thread kept across turns, against a process per turn, with agy slow to
start (the simulator's ``AGY_SIM_STARTUP_DELAY``).

Four variants take turns, one turn each per round in a rotating order, at each startup delay:

- direct persistent: one simulator on pipes, a user line per turn, read until ``result``;
- direct per turn: as the plugin in seed 001 does it: start the simulator (``--conversation``
  after the first turn), write the line, close stdin, read until ``result``; then it exits;
- bridge persistent: the core with a timing adapter, one thread, its process kept (the bridge's
  default ``idle_timeout``);
- bridge per turn: a second bridge whose ``idle_timeout`` is a few milliseconds, so its thread's
  process is gone before each message and every turn starts (and resumes) one: what a thread
  pays when it comes back after idling out.

Then the sandbox's price: agy (the simulator) started as the bridge starts it (its session
folder loaded as a plugin), plain, inside a thread's bubblewrap sandbox that binds agy's shared
state directories (as before), and inside one with the thread's private agy state and the login
bound read-only (as now), in turns; each start is timed from building its spec (the sandbox's
mounts, the private state made ready), off the event loop as a thread does it, to ``init``
(goals: the sandbox adds under 20 ms per start, the private state under 20 ms more).

A turn is timed from the message (the line written, the spawn, the submit) to its ``result`` or
``finish``. The persistent variants' first turns, which start their process, are reported on
their own. The table gives p50 and p99 per variant, the time a kept process saves per turn
(p50 per turn minus p50 persistent) and the ratio.

    python -m bench.persistent [--delays 0,0.5,2] [--turns 10] [--starts 30]
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

from bench.common import (
    SIMULATOR,
    STREAM_FLAGS,
    DirectAgy,
    bridge_config,
    direct_agy,
    machine,
    ms,
    percentile,
    ratio,
    simulator_env,
    submit,
    table,
    timing_adapter,
)
from bridge.agy.capabilities import probe
from bridge.agy.limits import Enforcement, Limits, enforcement
from bridge.agy.listener import open_listener
from bridge.agy.network import resolve_network, shared
from bridge.agy.process import open_agy
from bridge.agy.runtime import AgyRuntime
from bridge.agy.sandbox import ExtraBinds, Isolation, bwrap_problem, find_bwrap, not_isolated
from bridge.agy_launch import launch_settings
from bridge.app import Bridge, open_bridge, start_adapters
from bridge.isolation import sandbox_for
from tests.doubles import RecordingAdapter

DELAYS = (0.0, 0.5, 2.0)
TURNS = 10
STARTS = 30
SANDBOX_GOAL_MS = 20.0
PRIVATE_STATE_GOAL_MS = 20.0
TURN_TIMEOUT = 120.0
PER_TURN_IDLE = 0.005  # seconds: the per-turn bridge lets its process go at once
TEXT = "turn {number}: [[reply done {number}]] [[chunks 3]]"


@dataclass
class Variant:
    name: str
    run: Callable[[int], Awaitable[float]]  # one turn; its latency in seconds
    first: float | None = None  # the turn that started a kept process
    samples: list[float] = field(default_factory=list)


# --- direct ----------------------------------------------------------------------------------


def direct_persistent(agy: DirectAgy) -> Variant:
    async def run(number: int) -> float:
        return (await agy.turn(TEXT.format(number=number))).result

    return Variant("direct persistent", run)


def direct_per_turn(env: dict[str, str], workdir: Path) -> Variant:
    conversation: list[str] = []

    async def run(number: int) -> float:
        resume = ["--conversation", conversation[0]] if conversation else []
        argv = [*SIMULATOR, *STREAM_FLAGS, *resume]
        started = time.perf_counter()
        agy = await DirectAgy.start(argv, env, workdir)
        try:
            times = await agy.turn(TEXT.format(number=number), started)
        finally:
            await agy.close()  # stdin EOF: it exits; not part of the turn's time
        if not conversation:
            conversation.append(agy.conversation_id)
        return times.result

    return Variant("direct per turn", run)


# --- through the bridge ----------------------------------------------------------------------


def bridge_variant(
    name: str, bridge: Bridge, adapter: RecordingAdapter, *, per_turn: bool
) -> Variant:
    thread = adapter.thread(name.replace(" ", "-"))

    async def run(number: int) -> float:
        if per_turn:
            await process_gone(bridge, thread.key)
        done = len(adapter.finished(thread)) + 1
        started = time.perf_counter()
        await submit(bridge.core, adapter.message(thread, TEXT.format(number=number)))
        reply = (await adapter.wait_finished(done, thread, TURN_TIMEOUT))[-1]
        assert reply.finished is not None
        if reply.outcome is None or reply.outcome.error:
            raise RuntimeError(f"{name}: turn {number} failed: {reply.outcome}")
        return reply.finished - started

    return Variant(name, run)


async def process_gone(bridge: Bridge, key: str) -> None:
    """Until the thread's worker (and with it its agy process) has ended.

    The core offers no event for this, so it is polled; the wait is outside the timed turn.
    """
    with anyio.fail_after(TURN_TIMEOUT):
        while key in bridge.core.threads:
            await anyio.sleep(0.005)


@asynccontextmanager
async def running_bridge(
    root: Path, delay: float, idle_timeout: float
) -> AsyncIterator[tuple[Bridge, RecordingAdapter]]:
    adapter = timing_adapter()
    config = bridge_config(
        root / "data", root / "sim-home", startup_delay=delay, idle_timeout=idle_timeout
    )
    async with open_bridge(config, {adapter.platform: adapter}) as bridge:
        async with anyio.create_task_group() as tg:
            await start_adapters(bridge, tg)
            yield bridge, adapter
            await bridge.core.shutdown()
            tg.cancel_scope.cancel()


# --- one delay -------------------------------------------------------------------------------


async def measure_delay(delay: float, turns: int) -> list[Variant]:
    with tempfile.TemporaryDirectory(prefix="agy-bench-persistent-") as tmp:
        root = Path(tmp)
        for name in ("work-kept", "work-per-turn"):
            (root / name).mkdir()
        env = simulator_env(root / "sim-kept", delay)
        started = time.perf_counter()
        async with direct_agy([*SIMULATOR, *STREAM_FLAGS], env, root / "work-kept") as kept:
            kept_start = time.perf_counter() - started
            async with (
                running_bridge(root / "bridge-kept", delay, 900.0) as (kept_bridge, kept_chat),
                running_bridge(root / "bridge-per-turn", delay, PER_TURN_IDLE) as (
                    per_bridge,
                    per_chat,
                ),
            ):
                per_turn_env = simulator_env(root / "sim-per-turn", delay)
                variants = [
                    direct_persistent(kept),
                    direct_per_turn(per_turn_env, root / "work-per-turn"),
                    bridge_variant("bridge persistent", kept_bridge, kept_chat, per_turn=False),
                    bridge_variant("bridge per turn", per_bridge, per_chat, per_turn=True),
                ]
                await alternate(variants, turns)
                variants[0].first = kept_start
    return variants


async def alternate(variants: list[Variant], turns: int) -> None:
    """Round 0 starts every process (and the conversations the per-turn variants resume);
    then one turn per variant per round, the order rotating each round."""
    for variant in variants:
        latency = await variant.run(0)
        if variant.name == "bridge persistent":
            variant.first = latency
    for number in range(1, turns + 1):
        shift = number % len(variants)
        for variant in [*variants[shift:], *variants[:shift]]:
            variant.samples.append(await variant.run(number))


# --- a process start, plain and sandboxed -----------------------------------------------------


async def measure_starts(count: int) -> dict[str, tuple[list[float], list[float]]] | str:
    """Times from building the process (``spec``: the sandbox's command line, and the thread's
    private agy state made ready) to ``init``, for agy started by the bridge's runtime: plain,
    in a sandbox that binds agy's shared state directories read-write (as before private
    state), and in a sandbox with the thread's private state and the login read-only (as now);
    in turns, the order rotating each round. A string says why the sandbox cannot run."""
    bwrap = find_bwrap()
    problem = await anyio.to_thread.run_sync(bwrap_problem, bwrap)
    if problem is not None or bwrap is None:
        return problem or "no bwrap"
    with tempfile.TemporaryDirectory(prefix="agy-bench-sandbox-") as tmp:
        root = Path(tmp)
        gemini = root / "gemini"
        (gemini / "antigravity-cli").mkdir(parents=True)
        (gemini / "antigravity-cli" / "antigravity-oauth-token").write_text("{}")
        config = bridge_config(root / "data", root / "sim-home")
        config = config.model_copy(
            update={"agy": config.agy.model_copy(update={"state_dirs": [gemini]})}
        )
        settings = launch_settings(config)
        caps = await probe(settings.command, config.agy.probe_timeout)
        workdir, session = root / "data" / "workspaces" / "t", root / "data" / "sessions" / "t"
        workdir.mkdir(parents=True)
        private = sandbox_for(config, settings.command, bwrap)
        # Before private state: the state directories bound read-write as they are (the same
        # binds, made here as the workspace's read-write paths).
        shared = private.model_copy(
            update={
                "state_dirs": (),
                "extras": (ExtraBinds(root=workdir, read_write=private.state_dirs),),
            }
        )
        # Per variant: spec to init of agy; spec plus the sandbox alone (``true`` in agy's
        # place: the mounts without the noise of a Python start).
        samples: dict[str, tuple[list[float], list[float]]] = {
            "plain": ([], []),
            "sandbox, shared state (before)": ([], []),
            "sandbox, private state (now)": ([], []),
        }
        async with open_listener() as listener:

            def runtime(isolation: Isolation) -> AgyRuntime:
                return AgyRuntime(settings, caps, listener, "bench", isolation=isolation)

            variants = [
                (runtime(not_isolated("bench")), samples["plain"]),
                (runtime(Isolation(sandbox=shared)), samples["sandbox, shared state (before)"]),
                (runtime(Isolation(sandbox=private)), samples["sandbox, private state (now)"]),
            ]
            registration = await variants[0][0].prepare(
                session, inject=_nothing, guidance="bench", notes=""
            )
            try:
                for number in range(count + 1):
                    shift = number % len(variants)
                    for agy_runtime, (times, bare) in [*variants[shift:], *variants[:shift]]:
                        # From building the spec (the sandbox's mounts, its read-only folders
                        # made, ``.git`` read) as a thread does it, off the event loop.
                        started = time.perf_counter()
                        spec = await anyio.to_thread.run_sync(
                            functools.partial(
                                agy_runtime.spec, session, workdir, model=None, conversation=None
                            )
                        )
                        agy = await DirectAgy.start(spec.argv, spec.env, spec.cwd)
                        elapsed = time.perf_counter() - started
                        await agy.close()
                        started = time.perf_counter()
                        spec = agy_runtime.spec(session, workdir, model=None, conversation=None)
                        argv = spec.argv
                        if "--" in argv:
                            argv = [*argv[: argv.index("--") + 1], "true"]
                        else:
                            argv = ["true"]
                        await anyio.run_process(argv, env=spec.env, cwd=spec.cwd)
                        alone = time.perf_counter() - started
                        if number:  # round 0 warms the page cache for all
                            times.append(elapsed)
                            bare.append(alone)
            finally:
                await registration.close()
    return samples


async def _nothing(conversation_id: str) -> list[str]:
    return []


def report_starts(starts: dict[str, tuple[list[float], list[float]]] | str) -> None:
    print("\nagy (simulator) start, spec to init, as the bridge starts it:\n")
    if isinstance(starts, str):
        print(f"sandboxed start not measured: {starts}")
        return
    for title, which in (("agy", 0), ("the sandbox alone (`true` in agy's place)", 1)):
        base = percentile(starts["plain"][which], 0.5)
        rows = []
        for name, samples in starts.items():
            times = samples[which]
            p50 = percentile(times, 0.5)
            added = "-" if name == "plain" else f"{(p50 - base) * 1000:.1f}"
            p99 = ms(percentile(times, 0.99))
            rows.append([name, str(len(times)), ms(p50), p99, added, ratio(p50, base)])
        print(f"{title}:\n")
        print(table(["start", "starts", "p50 ms", "p99 ms", "added p50 ms", "ratio"], rows))
        print()
    # The goals are judged on the sandbox alone: agy's own start (a Python process here) is
    # the same in every variant and only adds noise.
    bare = {name: percentile(samples[1], 0.5) for name, samples in starts.items()}
    added = (bare["sandbox, shared state (before)"] - bare["plain"]) * 1000
    state = (bare["sandbox, private state (now)"] - bare["sandbox, shared state (before)"]) * 1000
    verdict = "met" if added < SANDBOX_GOAL_MS else "NOT met"
    print(f"goal: the sandbox adds under {SANDBOX_GOAL_MS:g} ms per start: {verdict}")
    verdict = "met" if state < PRIVATE_STATE_GOAL_MS else "NOT met"
    print(
        f"goal: the private agy state adds under {PRIVATE_STATE_GOAL_MS:g} ms per start "
        f"({state:.1f} ms at p50): {verdict}"
    )


# --- what the caps and the network add to a start (issue 40) ------------------------------------


LIMITS_GOAL_MS = 20.0
STAND_IN = [
    "sh",
    "-c",
    """echo '{"event":"init","conversation_id":"bench"}'; exec cat > /dev/null""",
]


async def measure_limits(count: int) -> dict[str, list[float]] | str:
    """Spec to ``init`` of a stand-in for agy (a shell that prints ``init`` and waits: agy's own
    start, a Python process here, is the same in every variant and only adds noise) started as
    a thread starts agy (``open_agy``): in today's sandbox without caps and with the host's
    network, with the caps (a cgroup per process), and with the caps and a network of its own;
    in turns, the order rotating."""
    bwrap = find_bwrap()
    problem = await anyio.to_thread.run_sync(bwrap_problem, bwrap)
    if problem is not None or bwrap is None:
        return problem or "no bwrap"
    limits = await anyio.to_thread.run_sync(
        enforcement, Limits(max_processes=1024, max_memory=4 << 30)
    )
    network = await resolve_network(None, bwrap)
    with tempfile.TemporaryDirectory(prefix="agy-bench-limits-") as tmp:
        root = Path(tmp)
        config = bridge_config(root / "data", root / "sim-home")
        config = config.model_copy(update={"agy": config.agy.model_copy(update={"state_dirs": []})})
        settings = launch_settings(config)
        caps = await probe(settings.command, config.agy.probe_timeout)
        workdir, session = root / "data" / "workspaces" / "t", root / "data" / "sessions" / "t"
        workdir.mkdir(parents=True)
        sandbox = sandbox_for(config, settings.command, bwrap)
        names = {
            "sandbox (before)": (Enforcement(Limits(), "off"), shared("bench")),
            f"+ caps ({limits.mechanism})": (limits, shared("bench")),
            f"+ caps + own network ({network.mode})": (limits, network),
        }
        samples: dict[str, list[float]] = {name: [] for name in names}
        async with open_listener() as listener:
            runtimes = [
                (
                    AgyRuntime(
                        settings,
                        caps,
                        listener,
                        "bench",
                        isolation=Isolation(sandbox=sandbox, network=net),
                        limits=enforced,
                    ),
                    samples[name],
                )
                for name, (enforced, net) in names.items()
            ]
            registration = await runtimes[0][0].prepare(
                session, inject=_nothing, guidance="bench", notes=""
            )
            try:
                for number in range(count + 1):
                    shift = number % len(runtimes)
                    for agy_runtime, times in [*runtimes[shift:], *runtimes[:shift]]:
                        started = time.perf_counter()
                        spec = await anyio.to_thread.run_sync(
                            functools.partial(
                                agy_runtime.spec, session, workdir, model=None, conversation=None
                            )
                        )
                        argv = [*spec.argv[: spec.argv.index("--") + 1], *STAND_IN]
                        async with open_agy(replace(spec, argv=argv), lambda line: None):
                            elapsed = time.perf_counter() - started
                        if number:
                            times.append(elapsed)
            finally:
                await registration.close()
    return samples


def report_limits(measured: dict[str, list[float]] | str) -> None:
    print("\nwhat the caps and the sandbox's own network add to a start (spec to init):\n")
    if isinstance(measured, str):
        print(f"not measured: {measured}")
        return
    names = list(measured)
    base = percentile(measured[names[0]], 0.5)
    rows = []
    for name, times in measured.items():
        p50 = percentile(times, 0.5)
        added = "-" if name == names[0] else f"{(p50 - base) * 1000:.1f}"
        rows.append(
            [name, str(len(times)), ms(p50), ms(percentile(times, 0.99)), added, ratio(p50, base)]
        )
    print(table(["start", "starts", "p50 ms", "p99 ms", "added p50 ms", "ratio"], rows))
    added = (percentile(measured[names[-1]], 0.5) - base) * 1000
    verdict = "met" if added < LIMITS_GOAL_MS else "NOT met"
    print(f"\ngoal: caps and network add under {LIMITS_GOAL_MS:g} ms per start: {verdict}")


# --- the report ------------------------------------------------------------------------------


def report(results: Sequence[tuple[float, list[Variant]]], seconds: float, where: str) -> None:
    print(where)
    turns = len(results[0][1][0].samples)
    print(f"{turns} measured turns per variant and delay; {seconds:.0f} s in all\n")
    rows = []
    for delay, variants in results:
        by_name = {v.name: v for v in variants}
        for variant in variants:
            p50 = percentile(variant.samples, 0.5)
            kept_name = variant.name.replace("per turn", "persistent")
            kept = by_name[kept_name]
            kept50 = percentile(kept.samples, 0.5)
            saved = "-" if variant is kept else f"{(p50 - kept50) * 1000:.0f}"
            rows.append(
                [
                    f"{delay:g} s",
                    variant.name,
                    ms(p50),
                    ms(percentile(variant.samples, 0.99)),
                    ms(variant.first) if variant.first is not None else "-",
                    saved,
                    ratio(p50, kept50),
                ]
            )
    print(
        table(
            [
                "startup delay",
                "variant",
                "p50 ms",
                "p99 ms",
                "first turn / start ms",
                "saved per turn by a kept process ms",
                "ratio to persistent",
            ],
            rows,
        )
    )
    print(
        "\n'first turn / start': the direct persistent process's start (to init), the bridge "
        "persistent thread's first turn (start included)."
    )


async def drive(delays: Sequence[float], turns: int, starts: int) -> int:
    where = machine()
    started = time.perf_counter()
    results = []
    for delay in delays:
        results.append((delay, await measure_delay(delay, turns)))
        print(f"  measured startup delay {delay:g} s", flush=True)
    measured_starts = await measure_starts(starts)
    measured_limits = await measure_limits(starts)
    report(results, time.perf_counter() - started, where)
    report_starts(measured_starts)
    report_limits(measured_limits)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.persistent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--delays", default=",".join(f"{d:g}" for d in DELAYS), help="seconds")
    parser.add_argument("--turns", type=int, default=TURNS, help="measured turns per variant")
    parser.add_argument(
        "--starts", type=int, default=STARTS, help="measured starts, plain and sandboxed"
    )
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    args = parser.parse_args(argv)
    delays = [float(d) for d in str(args.delays).split(",") if d]
    turns, starts = args.turns, args.starts
    if args.quick:
        delays, turns, starts = [0.0], 2, 3
    return anyio.run(drive, delays, turns, starts, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main())
