"""What the bridge adds to one turn: a turn through the bridge against the same simulator driven
directly, side by side in one run.

Every variant keeps one persistent simulator process (the bridge's own, for the bridge rows) and
asks for a tiny answer, which the simulator gives at once. The variants take turns, one turn
each per round in a rotating order, so machine noise lands on all of them:

- direct: the simulator on pipes, no plugin: write a user line, read until ``result``;
- direct+hook: the same, with a plugin whose ``PreInvocation`` hook is the bridge's own curl
  command pointed at a minimal aiohttp server answering ``{}``. agy runs that hook before every
  model call, so this row is the price of injection paid inside agy, whatever the bridge does;
- core: a message submitted to the bridge's core (store, thread worker, listener, hook) with a
  chat adapter that only takes the time, until the core calls ``finish`` on the reply;
- slack: a thread reply pushed over Socket Mode by the local Slack fake (running in its own
  process, as Slack would be), until the answer is visible in the fake; "settled" is when the
  thread's status line is down again as well (Slack takes it down when the answer is posted)
  and its agent session no longer processing (the fake's app is declared as an agent).
  Slack turns start at most one per ``SLACK_PACE`` seconds (Slack's rate for posts in one
  channel; the pause is not measured). ``--slack-rtt`` delays every Web API answer of the
  fake, to show what a real round trip does to the turn.

``--what-if`` adds a second bridge, identical but for its store connection switched to
``PRAGMA synchronous=NORMAL`` after it opens (the bridge uses FULL: an fsync per commit), to
measure what the fsyncs on the turn's path cost.

The table gives p50 and p99 per variant, what each adds to ``direct`` at p50, and the ratio. A
second table splits the turns into phases. ``--trace`` then runs more core turns with timers
around the store's calls, ``send_turn`` and the hook call (no bridge code changed) and prints
where the core's time goes; ``--profile`` runs core turns under cProfile.

    python -m bench.overhead [--turns 200] [--warmup 5] [--no-slack] [--slack-rtt 0]
                             [--what-if] [--trace 50] [--profile 100]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import inspect
import io
import json
import logging
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from bench import budget_check
from bench.common import (
    ROOT,
    SIMULATOR,
    STREAM_FLAGS,
    DirectAgy,
    bridge_config,
    close_process,
    direct_agy,
    hook_plugin,
    machine,
    minimal_hook_server,
    ms,
    percentile,
    ratio,
    simulator_env,
    submit,
    sync_normal,
    table,
    timing_adapter,
)
from bridge.app import Bridge, open_bridge, start_adapters
from bridge.core.events import ChatAdapter
from tests.doubles import RecordedReply, RecordingAdapter

TURNS = 200
WARMUP = 5
GOAL_MS = 10.0
TURN_TIMEOUT = 60.0
# A tiny answer in two chunks: the simulator answers at once, so what is left is overhead.
TINY = "[[reply {token}]] [[chunks 2]]"

SLACK_CHANNEL = "C0BENCH01"
# Seconds between the starts of two Slack turns (Slack: about a post a second per channel).
SLACK_PACE = 1.3
SLACK_USER = "UBENCH001"


def token(number: int) -> str:
    return f"answer-{number:06d}-done"


# --- the Slack fake, in its own process ------------------------------------------------------


def _slack_event(text: str, ts: str, thread_ts: str | None) -> dict[str, Any]:
    """A mention that starts the thread, then plain replies in it (no mention needed)."""
    event: dict[str, Any] = {
        "type": "message",
        "channel": SLACK_CHANNEL,
        "channel_type": "channel",
        "user": SLACK_USER,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "team": "T0FAKE01",
    }
    if thread_ts is None:
        from tests.chat.slack.fake_slack import BOT_USER

        event.update(type="app_mention", text=f"<@{BOT_USER}> {text}")
        event.pop("channel_type")
    else:
        event["thread_ts"] = thread_ts
    return event


async def serve_slack(rtt: float) -> None:
    """The fake Slack: print its API URL as one JSON line, then run one turn per stdin line
    (``{"text": ..., "token": ...}``) and answer each with its latencies as one JSON line."""
    from tests.chat.slack.fake_slack import FakeSlack

    class SlowFakeSlack(FakeSlack):
        async def _api(self, request: web.Request) -> web.Response:
            if rtt > 0:
                await anyio.sleep(rtt)
            return await super()._api(request)

    # A call still waiting out its round trip when the bridge stops is cut off: not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    fake = SlowFakeSlack()
    # The app is declared as an agent (the manifest's agent_view): each turn is a session.
    fake.agent_app = True
    await fake.start()
    try:
        fake.add_user(SLACK_USER, "alice", "alice@example.org")
        print(json.dumps({"api_url": fake.api_url}), flush=True)
        root: str | None = None
        while line := await anyio.to_thread.run_sync(sys.stdin.buffer.readline):
            command = json.loads(line)
            ts = fake.next_ts()
            event = _slack_event(command["text"], ts, root)
            root = root or ts
            wanted = command["token"]

            def visible(wanted: str = wanted) -> bool:
                # The newest few messages hold this turn's answer; the thread only grows.
                recent = list(fake.messages.values())[-6:]
                return any(wanted in m.visible for m in recent if not m.deleted)

            def settled(ts: str = ts, root: str = root) -> bool:
                # The answer is there, the status line is down (the final post took it) and
                # the session no longer processing.
                return (
                    visible()
                    and fake.status_of(SLACK_CHANNEL, root) == ""
                    and fake.sessions.status_of(SLACK_CHANNEL, root) != "processing"
                )

            first = len(fake.calls)
            started = time.perf_counter()
            await fake.push_event(event)
            await fake.wait_for(visible, TURN_TIMEOUT)
            shown = time.perf_counter() - started
            before_visible = len(fake.calls) - first
            await fake.wait_for(settled, TURN_TIMEOUT)
            done = time.perf_counter() - started
            # The turn's Web API calls in order ("!" marks one Slack refused).
            calls = [c.method + ("!" if c.error else "") for c in fake.calls[first:]]
            answer = {"visible": shown, "settled": done, "before_visible": before_visible}
            print(json.dumps({**answer, "calls": calls}), flush=True)
    finally:
        await fake.close()


class SlackProcess:
    """The benchmark's handle on the fake Slack process."""

    def __init__(self, process: Process, api_url: str) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.api_url = api_url
        self._stdout = BufferedByteReceiveStream(process.stdout)

    @classmethod
    async def start(cls, rtt: float) -> SlackProcess:
        process = await anyio.open_process(
            [sys.executable, "-m", "bench.overhead", "--serve-slack", f"{rtt:g}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        handle = cls(process, "")
        handle.api_url = json.loads(await handle._line())["api_url"]
        return handle

    async def _line(self) -> bytes:
        return await self._stdout.receive_until(b"\n", 1 << 20)

    async def turn(self, text: str, wanted: str) -> dict[str, Any]:
        """The fake's report of one turn: ``visible`` and ``settled`` in seconds, the Web API
        ``calls`` in order, and how many came ``before_visible``."""
        assert self.process.stdin is not None
        command = json.dumps({"text": text, "token": wanted}).encode() + b"\n"
        await self.process.stdin.send(command)
        with anyio.fail_after(TURN_TIMEOUT * 2 + 10):
            answer: dict[str, Any] = json.loads(await self._line())
        return answer

    async def stop(self) -> None:
        await close_process(self.process)


@asynccontextmanager
async def slack_process(rtt: float) -> AsyncIterator[SlackProcess]:
    handle = await SlackProcess.start(rtt)
    try:
        yield handle
    finally:
        with anyio.CancelScope(shield=True):
            await handle.stop()


def slack_section(api_url: str) -> dict[str, Any]:
    from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN

    return {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "api_url": api_url,
        "allowed_users": [SLACK_USER],
    }


# --- the variants ----------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    run: Callable[[int], Awaitable[None]]
    total: list[float] = field(default_factory=list)
    # Named phases (seconds from the turn's start), for the breakdown table.
    phases: dict[str, list[float]] = field(default_factory=dict)
    # Slack only: per turn, the calls before the answer was visible and all the calls in order.
    api_calls: list[tuple[int, list[str]]] = field(default_factory=list)

    def record(self, total: float, **phases: float) -> None:
        self.total.append(total)
        for name, value in phases.items():
            self.phases.setdefault(name, []).append(value)

    def drop(self, count: int) -> None:
        del self.total[:count]
        del self.api_calls[:count]
        for values in self.phases.values():
            del values[:count]


def direct_variant(name: str, agy: DirectAgy) -> Variant:
    async def run(number: int) -> None:
        times = await agy.turn(TINY.format(token=token(number)))
        variant.record(times.result, first_delta=times.first_delta)

    variant = Variant(name, run)
    return variant


def core_variant(name: str, bridge: Bridge, adapter: RecordingAdapter) -> Variant:
    thread = adapter.thread("overhead")

    async def run(number: int) -> None:
        message = adapter.message(thread, TINY.format(token=token(number)))
        done = len(adapter.finished(thread)) + 1
        started = time.perf_counter()
        await submit(bridge.core, message)
        submitted = time.perf_counter()
        reply = (await adapter.wait_finished(done, thread, TURN_TIMEOUT))[-1]
        check_reply(reply, number)
        assert reply.finished is not None and reply.first_delta is not None
        variant.record(
            reply.finished - started,
            submitted=submitted - started,
            opened=reply.opened - started,
            first_delta=reply.first_delta - started,
        )

    variant = Variant(name, run)
    return variant


def check_reply(reply: RecordedReply, number: int) -> None:
    outcome = reply.outcome
    if outcome is None or outcome.error or token(number) not in outcome.final_text:
        raise RuntimeError(f"turn {number} did not get its answer: {outcome}")


def slack_variant(slack: SlackProcess) -> Variant:
    last = -SLACK_PACE

    async def run(number: int) -> None:
        nonlocal last
        # Slack takes about one post a second per channel, and the bridge's rate budget keeps
        # to that: turns in the one thread come no faster, so no turn waits for the budget.
        # The pause is not measured (the fake times the turn from the event it sends).
        await anyio.sleep(max(0.0, last + SLACK_PACE - time.perf_counter()))
        last = time.perf_counter()
        answer = await slack.turn(TINY.format(token=token(number)), token(number))
        variant.record(answer["visible"], settled=answer["settled"])
        variant.api_calls.append((answer["before_visible"], answer["calls"]))

    variant = Variant("slack", run)
    return variant


async def alternate(variants: Sequence[Variant], rounds: int, warmup: int) -> None:
    """One turn per variant per round, the order rotating each round; warm-up rounds dropped."""
    for number in range(warmup + rounds):
        shift = number % len(variants)
        for variant in [*variants[shift:], *variants[:shift]]:
            await variant.run(number)
        if number + 1 == warmup:
            for variant in variants:
                variant.drop(warmup)


# --- the report ------------------------------------------------------------------------------


def report(variants: Sequence[Variant], seconds: float, rtt: float, where: str) -> int:
    base = variants[0]
    base50 = percentile(base.total, 0.5)
    rows = []
    for variant in variants:
        p50, p99 = percentile(variant.total, 0.5), percentile(variant.total, 0.99)
        label = variant.name
        if variant.name == "slack" and rtt:
            label += f" (rtt {rtt * 1000:g} ms)"
        rows.append(
            [
                label,
                str(len(variant.total)),
                ms(p50),
                ms(p99),
                "-" if variant is base else f"{(p50 - base50) * 1000:+.1f}",
                ratio(p50, base50),
            ]
        )
    print(where)
    print(f"{len(base.total)} measured turns per variant in {seconds:.0f} s\n")
    print(table(["variant", "turns", "p50 ms", "p99 ms", "adds at p50 ms", "ratio p50"], rows))
    print()
    print(breakdown(variants))
    by_name = {v.name: v for v in variants}
    slack = by_name.get("slack")
    if slack is not None and slack.api_calls:
        counts = [len(calls) for _, calls in slack.api_calls]
        before = [float(n) for n, _ in slack.api_calls]
        print(
            f"\nslack: Web API calls per turn p50 {percentile(counts, 0.5):.0f}, of which "
            f"{percentile(before, 0.5):.0f} before the answer was visible; the last turn's, in "
            f"order (! = refused): {', '.join(slack.api_calls[-1][1])}"
        )
        # How many turns made how many calls, and each kind's order once.
        shapes: dict[tuple[str, ...], int] = {}
        for _, calls in slack.api_calls:
            shapes[tuple(calls)] = shapes.get(tuple(calls), 0) + 1
        for calls, turns in sorted(shapes.items(), key=lambda item: -item[1]):
            print(f"  {turns} turn(s), {len(calls)} calls: {', '.join(calls)}")
    core = by_name.get("core")
    if core is not None:
        added = (percentile(core.total, 0.5) - base50) * 1000
        verdict = "met" if added < GOAL_MS else "NOT met"
        print(
            f"\ngoal: the core adds under {GOAL_MS:g} ms per turn at p50: {verdict} "
            f"({added:+.1f} ms)"
        )
        hook = by_name.get("direct+hook")
        if hook is not None:
            own = (percentile(core.total, 0.5) - percentile(hook.total, 0.5)) * 1000
            print(
                f"of which the hook inside agy (direct+hook - direct): "
                f"{(percentile(hook.total, 0.5) - base50) * 1000:+.1f} ms; "
                f"the core itself (core - direct+hook): {own:+.1f} ms"
            )
    return 0


def breakdown(variants: Sequence[Variant]) -> str:
    """p50 of each phase, in ms from the turn's start."""
    headers = ["phase (p50, ms from the turn's start)", *(v.name for v in variants)]
    names = [
        ("submitted", "message stored, submit() returned"),
        ("opened", "reply opened (open_reply called)"),
        ("first_delta", "first answer text"),
        ("settled", "last chat call of the turn"),
    ]
    rows = []
    for key, label in names:
        cells = [ms(percentile(v.phases[key], 0.5)) if key in v.phases else "" for v in variants]
        if any(cells):
            rows.append([label, *cells])
    rows.append(
        [
            "end (result / finish / answer visible)",
            *(ms(percentile(v.total, 0.5)) for v in variants),
        ]
    )
    return table(headers, rows)


# --- where the core's time goes --------------------------------------------------------------


@dataclass
class Span:
    name: str
    start: float
    seconds: float


class Trace:
    """Wraps the store's public methods, ``send_turn`` and the listener's hook call in timers
    (class attributes, restored on exit), so a few turns can be laid out on a time line without
    touching the bridge's code. The wrappers cost microseconds; the main run is not traced."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._saved: list[tuple[type, str, Any]] = []

    def __enter__(self) -> Trace:
        from bridge.agy.listener.registration import Registration
        from bridge.agy.process import AgyProcess
        from bridge.core.store import Store

        for cls, prefix in ((Store, "store."), (AgyProcess, ""), (Registration, "")):
            for name, value in list(vars(cls).items()):
                wanted = name in ("send_turn", "call_hook") or cls is Store
                if wanted and not name.startswith("_") and inspect.iscoroutinefunction(value):
                    self._saved.append((cls, name, value))
                    setattr(cls, name, self._timed(prefix + name, value))
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, name, value in reversed(self._saved):
            setattr(cls, name, value)

    def _timed(self, label: str, method: Any) -> Any:
        spans = self.spans

        @functools.wraps(method)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                spans.append(Span(label, started, time.perf_counter() - started))

        return timed

    def between(self, start: float, end: float) -> list[Span]:
        """Calls that began in [start, end]."""
        return [s for s in self.spans if start <= s.start <= end]


async def trace_core(bridge: Bridge, adapter: RecordingAdapter, turns: int) -> None:
    """Lay ``turns`` core turns out on a time line; print the p50 of each mark and where the
    store's time went."""
    thread = adapter.thread("traced")
    marks: dict[str, list[float]] = {}
    store_calls: dict[str, list[float]] = {}
    store_total: list[float] = []
    with Trace() as trace:
        for number in range(turns + 1):  # the first turn starts the process: not counted
            done = len(adapter.finished(thread)) + 1
            message = adapter.message(thread, TINY.format(token=token(number)))
            started = time.perf_counter()
            await submit(bridge.core, message)
            reply = (await adapter.wait_finished(done, thread, TURN_TIMEOUT))[-1]
            assert reply.finished is not None and reply.first_delta is not None
            if number == 0:
                continue
            spans = trace.between(started, reply.finished)
            found = {s.name: s for s in spans}
            points = {
                "send_turn": found["send_turn"].start if "send_turn" in found else None,
                "hook call in": found["call_hook"].start if "call_hook" in found else None,
                "hook call out": (
                    found["call_hook"].start + found["call_hook"].seconds
                    if "call_hook" in found
                    else None
                ),
                "first delta": reply.first_delta,
                "finish called": reply.finished,
            }
            for name, at in points.items():
                if at is not None:
                    marks.setdefault(name, []).append(at - started)
            in_store = [s for s in spans if s.name.startswith("store.")]
            store_total.append(sum(s.seconds for s in in_store))
            for span in in_store:
                store_calls.setdefault(span.name, []).append(span.seconds)
    rows = [
        [name, ms(percentile(values, 0.5)), ms(percentile(values, 0.9))]
        for name, values in marks.items()
    ]
    print(f"\ntime line of {turns} traced core turns (ms from submit):")
    print(table(["mark", "p50", "p90"], rows))
    rows = [
        [
            name,
            f"{len(values) / turns:.1f}",
            ms(percentile(values, 0.5)),
            ms(percentile(values, 0.99)),
        ]
        for name, values in sorted(store_calls.items(), key=lambda kv: -sum(kv[1]))
    ]
    rows.append(
        [
            "all store calls of a turn",
            "",
            ms(percentile(store_total, 0.5)),
            ms(percentile(store_total, 0.99)),
        ]
    )
    print(table(["store call", "per turn", "p50 ms", "p99 ms"], rows))


async def profile_core(variant: Variant, turns: int, start: int, top: int) -> None:
    """Run ``turns`` more core turns under cProfile; print the functions that cost most."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        for number in range(start, start + turns):
            await variant.run(number)
    finally:
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    print(f"\ncProfile of {turns} core turns (the event loop's thread; tottime):")
    print("\n".join(out.getvalue().splitlines()[: top + 12]))


# --- running ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    turns: int
    warmup: int
    slack: bool
    rtt: float  # seconds
    what_if: bool
    trace: int
    profile: int


@asynccontextmanager
async def running_bridge(
    root: Path, adapters: dict[str, ChatAdapter], extra: dict[str, Any]
) -> AsyncIterator[Bridge]:
    config = bridge_config(root / "data", root / "sim-home", extra=extra)
    async with open_bridge(config, adapters) as bridge, anyio.create_task_group() as tg:
        await start_adapters(bridge, tg)
        yield bridge
        await bridge.core.shutdown()
        tg.cancel_scope.cancel()


async def drive(options: Options) -> int:
    where = machine()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agy-bench-overhead-") as tmp:
        root = Path(tmp)
        for name in ("work-direct", "work-hook", "bridge", "bridge-normal"):
            (root / name).mkdir()
        argv = [*SIMULATOR, *STREAM_FLAGS]
        adapter = timing_adapter()
        async with AsyncExitStack() as stack:
            hook_url = await stack.enter_async_context(minimal_hook_server())
            plain = await stack.enter_async_context(
                direct_agy(argv, simulator_env(root / "sim-direct"), root / "work-direct")
            )
            session = hook_plugin(root / "hook-session", hook_url)
            hooked = await stack.enter_async_context(
                direct_agy(
                    [*argv, "--add-dir", str(session)],
                    simulator_env(root / "sim-hook"),
                    root / "work-hook",
                )
            )
            adapters: dict[str, ChatAdapter] = {adapter.platform: adapter}
            extra: dict[str, Any] = {}
            slack: SlackProcess | None = None
            if options.slack:
                from bridge.chat.slack.adapter import SlackAdapter
                from bridge.config import SlackSection

                slack = await stack.enter_async_context(slack_process(options.rtt))
                extra["slack"] = slack_section(slack.api_url)
                section = SlackSection(**extra["slack"])
                adapters["slack"] = SlackAdapter(section, data_dir=root / "bridge" / "data")
            bridge = await stack.enter_async_context(
                running_bridge(root / "bridge", adapters, extra)
            )
            variants = [
                direct_variant("direct", plain),
                direct_variant("direct+hook", hooked),
                core_variant("core", bridge, adapter),
            ]
            if options.what_if:
                other = timing_adapter()
                normal = await stack.enter_async_context(
                    running_bridge(root / "bridge-normal", {other.platform: other}, {})
                )
                await sync_normal(normal)
                variants.append(core_variant("core, sync=NORMAL (what-if)", normal, other))
            if slack is not None:
                variants.append(slack_variant(slack))
            await alternate(variants, options.turns, options.warmup)
            code = report(variants, time.perf_counter() - started, options.rtt, where)
            if options.trace:
                await trace_core(bridge, adapter, options.trace)
            if options.profile:
                await profile_core(variants[2], options.profile, options.warmup + options.turns, 25)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=TURNS, help="measured turns per variant")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="turns dropped per variant")
    parser.add_argument("--no-slack", action="store_true", help="leave out the Slack variant")
    parser.add_argument(
        "--slack-rtt", type=float, default=0.0, metavar="MS", help="delay of each fake API call"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="TURNS", help="then profile this many core turns"
    )
    parser.add_argument(
        "--trace", type=int, default=0, metavar="TURNS", help="then time-line this many core turns"
    )
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="add a second bridge whose store runs with synchronous=NORMAL",
    )
    parser.add_argument(
        "--budget-check",
        type=int,
        default=0,
        metavar="N",
        help="only time the budget check before a turn, N times (bench/budget_check.py)",
    )
    parser.add_argument(
        "--budget-pg", action="store_true", help="with --budget-check: on PostgreSQL too"
    )
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    parser.add_argument("--serve-slack", type=float, metavar="RTT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_slack is not None:
        anyio.run(serve_slack, args.serve_slack, backend="asyncio")
        return 0
    if args.budget_check:
        check = functools.partial(budget_check.run, args.budget_check, postgres=args.budget_pg)
        print(anyio.run(check, backend="asyncio"))
        return 0
    turns, warmup = (3, 1) if args.quick else (args.turns, args.warmup)
    options = Options(
        turns=turns,
        warmup=warmup,
        slack=not args.no_slack,
        rtt=args.slack_rtt / 1000,
        what_if=args.what_if,
        trace=args.trace,
        profile=args.profile,
    )
    return anyio.run(drive, options, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main())
