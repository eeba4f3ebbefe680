"""Many Slack threads streaming at once against Slack's rate tiers.

The local Slack fake enforces Slack's tiers as Slack does (per method and app; ``chat.postMessage``
per channel): past a rate it answers 429 with ``Retry-After``. The Slack adapter, with its
real rate budget and reply settings, runs ``--threads`` turns at once, spread over a few
channels: each turn streams text for ``--seconds`` (a chunk every ``--chunk-every`` seconds,
a tool call now and then), then finishes with its whole answer.

It prints, per Web API method, the calls made, the most in any minute (any window of the
tier's length) against the tier's limit, the 429s Slack answered and the updates the budget
held back; then whether every final answer arrived whole.

Each turn is an agent session (the app declared as an agent) unless ``--no-sessions``; its
tool calls are tasks of the answer's stream.

    python -m bench.slack_tiers [--threads 20] [--seconds 60] [--channels 4] [--quick]
                                [--no-sessions]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from bench.common import machine, percentile, table
from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.format import split_message
from bridge.chat.slack.tiers import Tier, scope_key
from bridge.core.events import (
    Author,
    IncomingMessage,
    SubmitOutcome,
    ThreadRef,
    ToolActivity,
    TurnOutcome,
)

THREADS = 20
SECONDS = 60.0
CHANNELS = 4
CHUNK_EVERY = 0.25
USER = "UTIERS001"


class QuietInbound:
    """The core's side, reduced to accepting what arrives (the bench drives the replies)."""

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        return SubmitOutcome.ACCEPTED

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        return None

    async def is_conversation(self, thread: ThreadRef) -> bool:
        return True


def answer_of(index: int, chunks: int) -> list[str]:
    return [
        f"Thread {index}, part {n}: " + "lorem ipsum dolor sit amet " * 3 + "\n"
        for n in range(chunks)
    ]


async def one_turn(
    adapter: SlackAdapter,
    thread: ThreadRef,
    author: Author,
    pieces: list[str],
    every: float,
    finishing: list[float],
) -> None:
    async with adapter.open_reply(thread, thread.thread, author) as reply:
        for number, piece in enumerate(pieces):
            await reply.append(piece)
            if number % 8 == 0:
                summary = f"step {number}"
                await reply.tool(ToolActivity(name="run_command", summary=summary))
                await reply.tool(ToolActivity(name="run_command", summary=summary, state="DONE"))
            await anyio.sleep(every)
        started = time.monotonic()
        await reply.finish(TurnOutcome(final_text="".join(pieces)))
        finishing.append(time.monotonic() - started)


def peak(times: Sequence[float], window: float) -> int:
    """The most events in any window of ``window`` seconds."""
    best, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


async def run(
    threads: int, seconds: float, channels: int, every: float, sessions: bool = True
) -> int:
    from tests.chat.slack.conftest import slack_section
    from tests.chat.slack.fake_slack import serve_fake_slack

    # A 429 the adapter handled is logged as a warning; the table counts them.
    logging.getLogger("bridge.chat.slack").setLevel(logging.ERROR)
    async with serve_fake_slack() as fake:
        fake.add_user(USER, "tiers")
        # An app declared as an agent (the manifest's agent_view): each turn is a session.
        fake.agent_app = sessions
        with tempfile.TemporaryDirectory() as data:
            adapter = SlackAdapter(slack_section(fake, allowed_users=[USER]), data_dir=Path(data))
            async with anyio.create_task_group() as tg:
                ready = anyio.Event()
                tg.start_soon(adapter.run, QuietInbound(), ready.set)
                with anyio.fail_after(30):
                    await ready.wait()
                chunks = max(1, int(seconds / every))
                turns: list[tuple[ThreadRef, list[str]]] = []
                for index in range(threads):
                    channel = f"C0TIERS{index % channels:02d}"
                    thread = ThreadRef(platform="slack", channel=channel, thread=fake.next_ts())
                    turns.append((thread, answer_of(index, chunks)))
                author = Author(id=USER, org="T0FAKE01")
                finishing: list[float] = []
                first = len(fake.calls)
                started = time.monotonic()
                async with anyio.create_task_group() as turns_tg:
                    for thread, pieces in turns:
                        turns_tg.start_soon(
                            one_turn, adapter, thread, author, pieces, every, finishing
                        )
                took = time.monotonic() - started
                tg.cancel_scope.cancel()
        calls = fake.calls[first:]
        # Whole: the thread shows exactly the final answer's messages, none still streaming.
        complete = sum(
            1
            for thread, pieces in turns
            if [m.visible.strip() for m in fake.answer_messages(thread.channel, thread.thread)]
            == [chunk.strip() for chunk in split_message("".join(pieces))]
            and not any(m.streaming for m in fake.thread(thread.channel, thread.thread))
        )
        print(report(fake.tiers, calls, adapter, took))
        print()
        limited = [c for c in calls if c.status == 429]
        print(
            f"final answer whole after finish(): p50 {percentile(finishing, 0.5):.1f} s, "
            f"max {max(finishing, default=0.0):.1f} s (Tier 2 allows about 20 stream stops "
            "a minute)"
        )
        print(
            f"{threads} threads in {channels} channels, {took:.0f} s: final answers complete "
            f"{complete}/{threads}; 429s from Slack {len(limited)} "
            f"({'all handled: every answer whole' if complete == threads else 'ANSWERS LOST'})"
        )
        return 0 if complete == threads else 1


def report(tiers: Mapping[str, Tier], calls: list[Any], adapter: SlackAdapter, took: float) -> str:
    rows = []
    methods = sorted({c.method for c in calls})
    for method in methods:
        mine = [c for c in calls if c.method == method]
        tier = tiers.get(method)
        limit, window = (tier.limit, tier.window) if tier is not None else (0, 60.0)
        scope = tier.scope if tier is not None else "app"
        accepted = [c for c in mine if c.status != 429]
        if tier is not None and scope != "app":
            by_scope: dict[str, list[float]] = {}
            for c in accepted:
                by_scope.setdefault(scope_key(tier, c.args), []).append(c.at)
            most = max((peak(t, window) for t in by_scope.values()), default=0)
        else:
            most = peak([c.at for c in accepted], window)
        stats = adapter.budget.stats.get(method)
        per_minute = len(accepted) / took * 60 if took else 0.0
        rows.append(
            [
                method,
                str(len(mine)),
                f"{per_minute:.0f}",
                f"{most} / {window:g} s" + (f" per {scope}" if scope != "app" else ""),
                f"{limit} / {window:g} s" if tier else "-",
                str(sum(1 for c in mine if c.status == 429)),
                str(stats.deferred if stats else 0),
            ]
        )
    return table(
        ["method", "calls", "per minute", "most in a window", "tier limit", "429", "held back"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slack_tiers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--seconds", type=float, default=SECONDS, help="streaming per turn")
    parser.add_argument("--channels", type=int, default=CHANNELS)
    parser.add_argument("--chunk-every", type=float, default=CHUNK_EVERY, metavar="SECONDS")
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    parser.add_argument(
        "--no-sessions",
        action="store_true",
        help="an app without agent sessions (status line and Stop message instead)",
    )
    args = parser.parse_args(argv)
    threads, seconds = (4, 3.0) if args.quick else (args.threads, args.seconds)
    print(machine())
    return anyio.run(
        run,
        threads,
        seconds,
        args.channels,
        args.chunk_every,
        not args.no_sessions,
        backend="asyncio",
    )


if __name__ == "__main__":
    sys.exit(main())
