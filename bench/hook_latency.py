"""Round-trip latency of agy's PreInvocation hook through the listener, beside a minimal server.

Every measured call is what agy does before each model call: ``sh -c <hook_command(url)>`` with
the hook input on stdin, so the shell's and curl's start-up are inside the number, as in
production. Two targets answer, each in a server process of its own that this benchmark starts
(the same layout for both, and apart from the driver, whose process spawning must not slow a
server down):

- bridge: the real listener (:func:`bridge.agy.listener.open_listener`), one registration per
  simulated session, each hook handing over its waiting chat messages as ``injectSteps`` on
  every other call and answering ``{}`` otherwise;
- baseline: aiohttp's low-level server, reading the body and answering ``{}``.

At each level, ``concurrency`` shell loops per target (loop *i* calls session *i*) time each
call themselves. Both targets' loops run at once, interleaved, in short rounds, so whatever else
the machine does lands on both alike. Each server counts what it served, so a call that fell
back to curl's ``{}`` cannot pass for an answer. The table gives p50 and p99 per target and the
ratio bridge/baseline.

With ``--event PreToolUse`` the call is the one agy makes before a gated tool call: the
always-decide command (:func:`bridge.agy.listener.tool_hook_command`) posting a ``run_command``
call. The bridge answers through the session's real hook function and the approval policy
(the line is parsed with the bash grammar and allowed by an ``allow_commands`` rule, the
thread's allow list read from a real store when the session starts, as the gate does), so the
call is auto-allowed; the
baseline answers ``{"decision":"allow"}`` at once.

    python -m bench.hook_latency [--levels 1,10,50,200] [--requests 400] [--event PreToolUse]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from aiohttp import web
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from bench.common import url_file
from bridge.agy.listener import hook_command, open_listener, tool_hook_command, tool_hook_timing
from bridge.agy.session import ToolCall, ToolVerdict, injection_hook
from bridge.agy.wire import PRE_TOOL_USE, HookInput, HookReply, InjectedStep
from bridge.core.approvals import policy
from bridge.core.approvals.rules import CommandRule
from bridge.core.approvals.step_match import StepLedger
from bridge.core.store import Store
from bridge.core.store.opening import open_store

# An allowed command with options the tables read and words checked against the login.
COMMAND = "pytest -q -x --tb=short tests/test_app.py"
LEVELS = (1, 10, 50, 200)
REQUESTS_PER_TARGET = 400
SHORT_ROUND = 8  # calls per loop and round when concurrency is below this
HOOK_TIMEOUT_SECONDS = 10  # what the bridge writes into hooks.json
GOAL_RATIO = 1.5
HOOK_INPUT = json.dumps(
    {
        "conversationId": "bench-conversation",
        "workspacePaths": ["/work/project"],
        "transcriptPath": "/tmp/bench/transcript.jsonl",
        "artifactDirectoryPath": "/tmp/bench/artifacts",
        "modelName": "bench-model",
        "invocationNum": 3,
        "initialNumSteps": 12,
    }
)
TOOL_INPUT = json.dumps(
    {
        **json.loads(HOOK_INPUT),
        "toolCall": {"name": "run_command", "args": {"CommandLine": COMMAND}},
        "stepIdx": 7,
    }
)
APPROVAL_TIMEOUT = 600  # the default [approvals] timeout: it sets the hook's deadlines
ALLOW = b'{"decision":"allow"}'
ROOT = Path(__file__).resolve().parents[1]
BASH = shutil.which("bash") or "/bin/bash"  # bash 5, for $EPOCHREALTIME


# --- the server process ----------------------------------------------------------------------


class Session:
    """A session's hook: every other call hands over the chat messages waiting for it."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.calls = 0
        self.pending: list[str] = []

    async def hook(self, event: str, hook_input: HookInput) -> HookReply:
        self.calls += 1
        if self.calls % 2:
            self.pending.append(f"message {self.calls} for session {self.number}")
            return HookReply()
        steps = [InjectedStep(user_message=text) for text in self.pending]
        self.pending.clear()
        return HookReply(inject_steps=steps)


class ToolSession:
    """A session's PreToolUse decision as the core's gate makes it: one policy (and shell
    parser) per session, with the thread's allow list read from the store when the session
    starts, for a command an allow rule lets through."""

    RULES = policy.Rules(allow_commands=["git status", "pytest *"])

    def __init__(self, number: int, store: Store) -> None:
        self.number = number
        self.calls = 0
        self.store = store
        # agy's login is a secret path, as in production (every word is checked against it).
        login = (Path.home() / ".gemini" / "oauth_creds.json",)
        self.place = policy.Place(Path("/work/project"), frozenset({"bridge_chat"}), secrets=login)
        self.policy = policy.Policy(self.RULES)
        self.always: tuple[CommandRule, ...] | None = None
        # The thread's hook watch records each call for the stream's tool steps (hook_watch).
        self.ledger = StepLedger()

    async def load(self) -> None:
        rows = await self.store.allow_list(f"bench|c|{self.number}")
        self.always = self.policy.always_rules(rows)

    async def decide(self, call: ToolCall) -> ToolVerdict:
        self.calls += 1
        self.ledger.decided(call.name, call.step_idx)
        if self.always is None:
            await self.load()
        assert self.always is not None
        verdict = self.policy.judge(call.name, call.args, self.place, self.always)
        return ToolVerdict(allow=isinstance(verdict, policy.Allow))

    async def inject(self, conversation_id: str) -> list[str]:
        return []


class Baseline:
    """The minimal server's handler: read the body, answer ``{}`` (or allow), count."""

    def __init__(self, answer: bytes = b"{}") -> None:
        self.calls = 0
        self.answer = answer

    async def __call__(self, request: web.BaseRequest) -> web.Response:
        await request.read()
        self.calls += 1
        return web.Response(body=self.answer, content_type="application/json")


async def serve_bridge(sessions: int, event: str) -> None:
    async with open_listener() as listener:
        if event != PRE_TOOL_USE:
            hooks = [Session(number) for number in range(sessions)]
            registrations = [await listener.register(session.hook) for session in hooks]
            await report([r.hook_url(event) for r in registrations], hooks)
            return
        timing = tool_hook_timing(APPROVAL_TIMEOUT)
        with tempfile.TemporaryDirectory() as scratch:
            async with open_store(Path(scratch) / "bench.sqlite3") as store:
                tools = [ToolSession(number, store) for number in range(sessions)]
                for tool in tools:  # as the worker does when it starts, before any hook call
                    await tool.load()
                registrations = [
                    await listener.register(
                        injection_hook(t.inject, t.decide),
                        answer_within={PRE_TOOL_USE: timing.answer_within},
                    )
                    for t in tools
                ]
                await report([r.hook_url(event) for r in registrations], tools)


async def serve_baseline(sessions: int, event: str) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    baseline = Baseline(ALLOW if event == PRE_TOOL_USE else b"{}")
    runner = web.ServerRunner(web.Server(baseline), access_log=None)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        await report([f"{url}/s{n}/hook/{event}" for n in range(sessions)], [baseline])
    finally:
        await runner.cleanup()


async def report(urls: list[str], counters: Sequence[Session | ToolSession | Baseline]) -> None:
    """Print the URLs as one JSON line, then answer each stdin line with the number of calls
    served so far; return at stdin EOF."""
    print(json.dumps(urls), flush=True)
    while await anyio.to_thread.run_sync(sys.stdin.buffer.readline):
        print(sum(counter.calls for counter in counters), flush=True)


SERVERS = {"bridge": serve_bridge, "baseline": serve_baseline}


class ServerProcess:
    """The driver's handle on one target's server process."""

    def __init__(self, process: Process, stdout: BufferedByteReceiveStream, urls: list[str]):
        assert process.stdin is not None
        self.process = process
        self.urls = urls
        self._stdin = process.stdin
        self._stdout = stdout

    @classmethod
    async def start(cls, target: str, sessions: int, event: str) -> ServerProcess:
        process = await anyio.open_process(
            [
                *(sys.executable, "-m", "bench.hook_latency"),
                *("--serve", target, str(sessions), "--event", event),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        urls = json.loads(await stdout.receive_until(b"\n", 1 << 24))
        return cls(process, stdout, urls)

    async def served(self) -> int:
        await self._stdin.send(b"served?\n")
        return int(await self._stdout.receive_until(b"\n", 64))

    async def stop(self) -> None:
        await self._stdin.aclose()
        with anyio.move_on_after(15):
            await self.process.wait()
            return
        self.process.kill()
        await self.process.wait()


# --- the driver --------------------------------------------------------------------------------

# One session's loop as a shell process: it times each hook call from just before the fork to
# just after the answer is read, so neither Python nor the driver is inside the measurement.
WORKER = r"""
cmd=$1; count=$2; input=$3
for ((i = 0; i < count; i++)); do
  t0=$EPOCHREALTIME
  out=$(/bin/sh -c "$cmd" <<<"$input")
  t1=$EPOCHREALTIME
  printf '%s %s %s\n' "$t0" "$t1" "$out"
done
"""


@dataclass
class Target:
    name: str
    server: ServerProcess
    commands: list[str] = field(default_factory=list)
    event: str = "PreInvocation"
    samples: list[float] = field(default_factory=list)
    wrong_answers: int = 0

    @property
    def hook_input(self) -> str:
        return TOOL_INPUT if self.event == PRE_TOOL_USE else HOOK_INPUT

    def use(self, concurrency: int) -> None:
        """Start a level: loop *i* calls session *i*."""
        # The URLs go in curl config files, as the bridge writes them (never on argv).
        folder = Path(tempfile.mkdtemp(prefix="bench-hook-urls-"))
        weakref.finalize(self, shutil.rmtree, folder, True)
        files = [url_file(folder, url) for url in self.server.urls]
        if self.event == PRE_TOOL_USE:
            timeout = tool_hook_timing(APPROVAL_TIMEOUT).hook_timeout
            self.commands = [tool_hook_command(path, timeout) for path in files]
        else:
            self.commands = [hook_command(path, HOOK_TIMEOUT_SECONDS) for path in files]
        self.commands = self.commands[:concurrency]
        self.samples = []
        self.wrong_answers = 0

    def accepts(self, output: str) -> bool:
        try:
            answer = json.loads(output)
        except ValueError:
            return False
        if self.event == PRE_TOOL_USE:
            return bool(answer == {"decision": "allow"})
        if answer == {}:
            return True
        return (
            self.name == "bridge"
            and list(answer) == ["injectSteps"]
            and all(list(step) == ["userMessage"] for step in answer["injectSteps"])
        )


async def run_loop(target: Target, worker: int, count: int) -> None:
    result = await anyio.run_process(
        [BASH, "-c", WORKER, "worker", target.commands[worker], str(count), target.hook_input],
        env=os.environ | {"LC_ALL": "C"},  # $EPOCHREALTIME with a decimal point
        check=True,
    )
    for line in result.stdout.decode().splitlines():
        started, finished, output = [*line.split(" ", 2), ""][:3]
        target.samples.append(float(finished) - float(started))
        if not target.accepts(output):
            target.wrong_answers += 1


async def run_round(targets: Sequence[Target], concurrency: int, per_loop: int) -> None:
    """Every target's loops at once, so that whatever else the machine does hits them all."""
    async with anyio.create_task_group() as tg:
        for number in range(concurrency):
            for target in targets if number % 2 else reversed(targets):
                tg.start_soon(run_loop, target, number, per_loop)


def plan(concurrency: int, requests: int) -> tuple[int, int]:
    """(rounds, calls per loop and round) for about ``requests`` calls per target, at least one
    per loop and two rounds. Short rounds keep the targets in step: a loop of the faster target
    that finished early would leave the slower one a quieter machine."""
    per_loop = max(1, SHORT_ROUND // concurrency)
    rounds = max(2, math.ceil(requests / (concurrency * per_loop)))
    return rounds, per_loop


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass
class LevelResult:
    concurrency: int
    bridge: list[float]
    baseline: list[float]
    failures: int  # wrong answers, and calls a server never saw (curl fell back to `{}`)

    def ratio(self, fraction: float) -> float:
        return percentile(self.bridge, fraction) / percentile(self.baseline, fraction)


async def measure_level(
    bridge: Target, baseline: Target, concurrency: int, requests: int
) -> LevelResult:
    targets = (bridge, baseline)
    served_before = [await target.server.served() for target in targets]
    for target in targets:
        target.use(concurrency)
    rounds, per_loop = plan(concurrency, requests)
    for _ in range(rounds):
        await run_round(targets, concurrency, per_loop)
    failures = 0
    for target, before in zip(targets, served_before, strict=True):
        served = await target.server.served() - before
        failures += target.wrong_answers + len(target.samples) - served
    return LevelResult(concurrency, list(bridge.samples), list(baseline.samples), failures)


def describe_machine() -> str:
    curl = shutil.which("curl") or "curl"
    version = subprocess.run([curl, "--version"], capture_output=True, text=True, check=False)
    first = " ".join(version.stdout.split()[:2]) if version.stdout else "curl missing"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{python}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, {first}"


def print_table(results: list[LevelResult], seconds: float, event: str) -> None:
    ms = 1000.0
    print(f"{event} hook round trip, ms: sh -c 'curl ...' -> server -> answer")
    print(
        f"{'sessions':>8} {'calls/target':>12} | {'bridge p50':>10} {'p99':>7} | "
        f"{'baseline p50':>12} {'p99':>7} | {'ratio p50':>9} {'p99':>5} | failures"
    )
    for r in results:
        b, base = r.bridge, r.baseline
        print(
            f"{r.concurrency:>8} {len(b):>12} | {percentile(b, 0.5) * ms:>10.1f} "
            f"{percentile(b, 0.99) * ms:>7.1f} | {percentile(base, 0.5) * ms:>12.1f} "
            f"{percentile(base, 0.99) * ms:>7.1f} | {r.ratio(0.5):>9.2f} {r.ratio(0.99):>5.2f} | "
            f"{r.failures}"
        )
    worst = max(max(r.ratio(0.5), r.ratio(0.99)) for r in results)
    verdict = "met" if worst < GOAL_RATIO else "MISSED"
    print(f"worst ratio {worst:.2f} (goal < {GOAL_RATIO}: {verdict}); took {seconds:.0f} s")


async def drive(levels: Sequence[int], requests: int, event: str) -> int:
    print(describe_machine(), flush=True)
    started = time.perf_counter()
    sessions = max(levels)
    async with AsyncExitStack() as stack:
        targets = []
        for name in SERVERS:
            server = await ServerProcess.start(name, sessions, event)
            stack.push_async_callback(server.stop)
            targets.append(Target(name, server, event=event))
        bridge, baseline = targets
        await measure_level(bridge, baseline, 1, 10)  # first calls pay for imports and caches
        results = []
        for level in levels:
            results.append(await measure_level(bridge, baseline, level, requests))
            print(f"  measured {level} concurrent sessions", flush=True)
    print_table(results, time.perf_counter() - started, event)
    return 1 if any(r.failures for r in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hook_latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--requests", type=int, default=REQUESTS_PER_TARGET)
    parser.add_argument("--event", choices=("PreInvocation", PRE_TOOL_USE), default="PreInvocation")
    parser.add_argument("--serve", nargs=2, metavar=("TARGET", "SESSIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        target, sessions = args.serve
        anyio.run(SERVERS[target], int(sessions), args.event, backend="asyncio")
        return 0
    levels = [int(level) for level in args.levels.split(",")]
    return anyio.run(drive, levels, args.requests, args.event, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main())
