"""Several instances on PostgreSQL: what the shared store costs a turn, how fast a dead
instance's threads are taken over, and how many messages per second the shared inbox takes.

- per-turn overhead: two bridges in this process on the simulator, one on SQLite (the default)
  and one on PostgreSQL (a server this benchmark starts, fsync on like SQLite's FULL), take one
  tiny turn each per round in a rotating order; p50/p99 side by side. Goal: PostgreSQL adds
  under 5 ms per turn at p50.
- takeover: two ``agy-bridge console`` processes on one PostgreSQL and one thread; the one
  running a turn is SIGKILLed; timed from the kill until the other reports the cut-off turn in
  the thread, and until it answered a message sent right after the kill. Goal: lease time + under
  2 s.
- inbox: one, then two processes (instances) storing messages into the shared inbox as fast
  as they can (the store's insert with its unique event key and the thread row, as the core
  does on every message), 16 at a time each; messages per second. The store must not be the
  limit before agy processes are (a host runs a handful of agy turns per second at most).

    python -m bench.instances [--turns 200] [--kills 5] [--lease 3] [--seconds 5] [--quick]
                              [--only overhead|takeover|inbox] [--postgres URL]

`--only` runs one of the three (the smoke test runs them side by side); `--postgres` takes the
databases from a running server (its URL to the `postgres` database) instead of starting one:
the smoke test hands it the suite's, whose fsync is off, so its numbers are not the benchmark's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import psycopg

from bench.common import machine, ms, percentile, table, timing_adapter
from bench.overhead import alternate, core_variant, running_bridge
from tests.doubles import signed_in
from tests.faults.console import console_env, start_console, write_config
from tests.pg import Postgres, postgres_bin, start_postgres

GOAL_OVERHEAD_MS = 5.0
GOAL_TAKEOVER_S = 2.0
TAKEOVER_NOTICE = "stopped answering while the agent was working"


@dataclass
class ExistingServer:
    """A running PostgreSQL this benchmark only takes fresh databases from."""

    url: str
    count: int = 0

    def new_database(self) -> str:
        self.count += 1
        name = f"bench_instances_{os.getpid()}_{self.count}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + f"/{name}"


@asynccontextmanager
async def postgres_server(existing: str | None) -> AsyncIterator[Postgres | ExistingServer]:
    if existing:
        yield ExistingServer(existing)
        return
    bindir = postgres_bin()
    if bindir is None:
        raise SystemExit("PostgreSQL's server binaries are not installed (see `make postgres`)")
    # Started in this (the main) thread: the server ends with the thread that starts it
    # (tests/pg.py), and a worker thread of anyio's pool ends when it idles.
    server = start_postgres(bindir, durable=True)
    try:
        yield server
    finally:
        await anyio.to_thread.run_sync(server.stop)


# --- per-turn overhead -----------------------------------------------------------------------


async def overhead(root: Path, url: str, turns: int, warmup: int) -> list[list[str]]:
    async with AsyncExitStack() as stack:
        variants = []
        for name, store in (("SQLite", {}), ("PostgreSQL", {"store": {"url": url}})):
            adapter = timing_adapter()
            bridge = await stack.enter_async_context(
                running_bridge(root / name, {adapter.platform: adapter}, store)
            )
            variants.append(core_variant(f"core, {name}", bridge, adapter))
        await alternate(variants, turns, warmup)
    base = percentile(variants[0].total, 0.5)
    rows = []
    for v in variants:
        p50, p99 = percentile(v.total, 0.5), percentile(v.total, 0.99)
        rows.append([v.name, str(len(v.total)), ms(p50), ms(p99), ms(p50 - base)])
    return rows


# --- takeover after SIGKILL --------------------------------------------------------------------


def takeover(root: Path, url: str, kills: int, lease: float) -> list[tuple[float, float]]:
    times = []
    for n in range(kills):
        run_root = root / f"takeover-{n}"
        run_root.mkdir()
        extra = f'[store]\nurl = "{url}"\ninstance = "NAME"\nlease_seconds = {lease}\n'
        consoles = []
        for name in ("a", "b"):
            inst = run_root / name
            inst.mkdir()
            write_config(inst, extra=extra.replace("NAME", name))
            # One simulator home for both: agy's state on shared storage.
            consoles.append(
                start_console(
                    inst,
                    inst / "config.toml",
                    name,
                    thread=f"T{n}",
                    env=console_env(root, AGY_SIM_HOME=str(signed_in(root / "sim-home"))),
                )
            )
        a, b = consoles
        try:
            a.wait_ready()
            b.wait_ready()
            started = run_root / "started"
            a.send(f"long [[touch {started}]] [[sleep 60]]")
            while not started.exists():
                time.sleep(0.01)
            a.proc.kill()
            killed = time.monotonic()
            token = f"after-{n}"
            b.send(f"[[reply {token}]]")
            reported = answered = 0.0
            deadline = killed + lease + 60
            while not (reported and answered) and time.monotonic() < deadline:
                out = b.out()
                now = time.monotonic()
                if not reported and TAKEOVER_NOTICE in out:
                    reported = now - killed
                if not answered and re.search(rf"\b{token}\b", out.split("[[reply", 1)[-1]):
                    answered = now - killed
                time.sleep(0.01)
            if not (reported and answered):
                raise RuntimeError(f"instance b did not take over:\n{b.out()}\n{b.err()[-2000:]}")
            times.append((reported, answered))
        finally:
            for console in consoles:
                if console.proc.poll() is None:
                    console.proc.terminate()
                    try:
                        console.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        console.proc.kill()
                        console.proc.wait()
    return times


# --- messages per second into the shared inbox ---------------------------------------------------


def inbox_rate(url: str, instances: int, seconds: float, run: int) -> float:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench._inbox_fill", url, str(seconds), f"r{run}-{i}"],
            stdout=subprocess.PIPE,
        )
        for i in range(instances)
    ]
    total = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 120)
        total += int(json.loads(out)["stored"])
    return total / seconds


# --- the run -------------------------------------------------------------------------------------


PARTS = ("overhead", "takeover", "inbox")


async def drive(args: argparse.Namespace) -> int:
    where = machine()
    parts = [args.only] if args.only else PARTS
    with tempfile.TemporaryDirectory(prefix="agy-bench-instances-") as tmp:
        root = Path(tmp)
        async with postgres_server(args.postgres) as pg:
            if "overhead" in parts:
                await print_overhead(root, pg, args, where)
            if "takeover" in parts:
                await print_takeover(root, pg, args)
            if "inbox" in parts:
                await print_inbox(pg, args)
    return 0


async def print_overhead(
    root: Path, pg: Postgres | ExistingServer, args: argparse.Namespace, where: str
) -> None:
    rows = await overhead(root, pg.new_database(), args.turns, args.warmup)
    print(f"per-turn overhead, {args.turns} turns each ({where})")
    print(table(["variant", "turns", "p50 ms", "p99 ms", "+p50 ms"], rows))
    extra = float(rows[1][4])
    met = extra < GOAL_OVERHEAD_MS
    print(f"PostgreSQL adds {extra:.2f} ms at p50 (goal < {GOAL_OVERHEAD_MS} ms: "
          f"{'met' if met else 'missed'})\n")  # fmt: skip


async def print_takeover(
    root: Path, pg: Postgres | ExistingServer, args: argparse.Namespace
) -> None:
    times = await anyio.to_thread.run_sync(
        takeover, root, pg.new_database(), args.kills, args.lease
    )
    print(f"takeover after SIGKILL, lease {args.lease:g} s, {len(times)} kills")
    print(
        table(
            ["kill", "reported s", "answered s", "minus lease s"],
            [
                [str(i + 1), f"{r:.2f}", f"{a:.2f}", f"{max(r, a) - args.lease:.2f}"]
                for i, (r, a) in enumerate(times)
            ],
        )
    )
    worst = max(max(r, a) for r, a in times) - args.lease
    met = worst < GOAL_TAKEOVER_S
    print(f"worst: lease + {worst:.2f} s (goal lease + < {GOAL_TAKEOVER_S:g} s: "
          f"{'met' if met else 'missed'})\n")  # fmt: skip


async def print_inbox(pg: Postgres | ExistingServer, args: argparse.Namespace) -> None:
    url = pg.new_database()
    one = await anyio.to_thread.run_sync(inbox_rate, url, 1, args.seconds, 1)
    two = await anyio.to_thread.run_sync(inbox_rate, url, 2, args.seconds, 2)
    print(f"messages per second into the shared inbox, {args.seconds:g} s each")
    print(
        table(
            ["instances", "messages/s", "vs one"],
            [["1", f"{one:.0f}", "1.00"], ["2", f"{two:.0f}", f"{two / one:.2f}"]],
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.instances",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=200, help="measured turns per store")
    parser.add_argument("--warmup", type=int, default=5, help="turns dropped per store")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs timed")
    parser.add_argument("--lease", type=float, default=3.0, help="lease_seconds for the kills")
    parser.add_argument("--seconds", type=float, default=5.0, help="inbox fill time per run")
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    parser.add_argument("--only", choices=PARTS, help="run one of the three measurements")
    parser.add_argument(
        "--postgres", metavar="URL", help="a running server's postgres database (none started)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        # The smallest run that prints every row (the smoke test's): each part's work is a
        # second or less beside the processes it starts.
        args.turns, args.warmup, args.kills, args.seconds = 3, 1, 1, 0.3
    return anyio.run(drive, args)


if __name__ == "__main__":
    sys.exit(main())
