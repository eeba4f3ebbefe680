"""Many Matrix rooms streaming at once under Synapse's default message rate limit.

Synapse limits the messages of an *account* (``rc_message``: 0.2 events/s, burst 10, across
all rooms), so N rooms answering at once share one budget. For each level N (default 5 and 20),
the bench starts a real Synapse on loopback with the default ``rc_message`` (room creation,
joins and logins raised, so that setting up N rooms takes no minutes), a running
:class:`MatrixAdapter` joined to N rooms, and one human client. Every room then streams a long
answer at once (the agent's text deltas, as the core hands them over) and finishes it, rooms
finishing one after the other as turns do.

Beside it, the same run against a Synapse with every limit raised: the baseline, the time the
same work takes when nothing limits the account.

Reported per level and server: final answers complete (what the human's client shows, edits
applied, equals the answer), the time from agy's result (``finish`` called) to the final edit
accepted by the homeserver (p50, p99, max), the bot's events and the 429s it met.

    python -m bench.matrix_streams [--rooms 5,20] [--quick]

Needs Synapse (``make synapse``) and ``AGY_BRIDGE_SYNAPSE_PYTHON`` (as ``make test`` sets).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from bench.common import machine, percentile
from bridge.chat.matrix import MatrixAdapter, MatrixTuning
from bridge.chat.matrix.sync import SyncTuning
from bridge.core.events import ThreadRef, TurnOutcome
from tests.chat.matrix.conftest import Human, RecordingInbound, bot_config, running_adapter
from tests.chat.matrix.replies import content, shown_text, squeezed
from tests.chat.matrix.synapse import Synapse, start_synapse, synapse_python

LEVELS = (5, 20)
PARAGRAPHS = 12
# Text deltas per answer, and the pause between two (agy streams for a while).
DELTAS = 40
DELTA_PAUSE = 0.5
# The longest a level may take before it counts as failed.
LEVEL_TIMEOUT = 1_800.0


@dataclass
class Level:
    server: str
    rooms: int
    complete: int = 0
    finals: list[float] = field(default_factory=list)
    events: int = 0
    limited: int = 0
    wall: float = 0.0


def answer(room: int, paragraphs: int) -> str:
    return "\n\n".join(
        f"Room {room}, paragraph {n}: " + "streamed words " * 30 for n in range(paragraphs)
    )


async def run_level(synapse: Synapse, server: str, rooms: int, quick: bool, tmp: Path) -> Level:
    level = Level(server, rooms)
    alice_user = synapse.register("alice")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice_user.user_id], encryption=False)
    # The shipped tuning; only the sync is quicker (the bench waits on joins).
    tuning = MatrixTuning(sync=SyncTuning(timeout_ms=5_000))
    adapter = MatrixAdapter(config, data_dir=tmp / f"bridge-{server}-{rooms}", tuning=tuning)
    paragraphs = 3 if quick else PARAGRAPHS
    deltas, pause = (5, 0.1) if quick else (DELTAS, DELTA_PAUSE)
    texts = [answer(r, paragraphs) for r in range(rooms)]
    limited_waits: list[float] = []
    async with Human.connect(synapse, alice_user) as alice:
        async with running_adapter(adapter, RecordingInbound(), within=300):
            room_ids = [await alice.create_room([bot.user_id]) for _ in range(rooms)]
            for room_id in room_ids:
                await alice.wait_joined(room_id, bot.user_id)
            pacer_limited = adapter._queue.on_limited

            def count_limit(wait: float) -> None:
                limited_waits.append(wait)
                if pacer_limited is not None:
                    pacer_limited(wait)

            adapter._queue.on_limited = count_limit

            async def stream(index: int) -> None:
                thread = adapter_thread(room_ids[index])
                text = texts[index]
                # Rooms finish one after the other, as turns do.
                count = deltas + index * max(1, deltas // rooms)
                step = max(1, len(text) // count)
                async with adapter.open_reply(thread, None) as live:
                    for start in range(0, len(text), step):
                        await live.append(text[start : start + step])
                        await anyio.sleep(pause)
                    began = time.perf_counter()
                    await live.finish(TurnOutcome(final_text=text))
                    level.finals.append(time.perf_counter() - began)

            began = time.perf_counter()
            with anyio.move_on_after(LEVEL_TIMEOUT):
                async with anyio.create_task_group() as tg:
                    for index in range(rooms):
                        tg.start_soon(stream, index)
            level.wall = time.perf_counter() - began
            # What the human's client shows, once it has caught up.
            done = 0
            with anyio.move_on_after(120):
                while True:
                    await alice.sync(0)
                    done = sum(
                        squeezed(shown_text(alice.timeline.get(r, []), bot.user_id))
                        == squeezed(texts[i])
                        for i, r in enumerate(room_ids)
                    )
                    if done == rooms:
                        break
                    await anyio.sleep(1)
            level.complete = done
            level.events = sum(
                1
                for r in room_ids
                for e in alice.timeline.get(r, [])
                if e.sender == bot.user_id and ("body" in content(e) or "redacts" in e.source)
            )
    level.limited = len(limited_waits)
    return level


def adapter_thread(room_id: str) -> ThreadRef:
    return ThreadRef(platform="matrix", channel=room_id)


def _row(level: Level) -> str:
    finals = level.finals
    p50, p99 = percentile(finals, 0.5), percentile(finals, 0.99)
    worst = max(finals) if finals else float("nan")
    return (
        f"| {level.rooms} | {level.server} | {level.complete}/{level.rooms} | {p50:.2f} | "
        f"{p99:.2f} | {worst:.2f} | {level.events} | {level.limited} | {level.wall:.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.matrix_streams",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rooms", default=",".join(map(str, LEVELS)), help="levels, e.g. 5,20")
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    args = parser.parse_args(argv)
    python = synapse_python()
    if python is None:
        print("skipped: set AGY_BRIDGE_SYNAPSE_PYTHON (make synapse) to run this benchmark")
        return 0
    levels = [2] if args.quick else [int(x) for x in str(args.rooms).split(",") if x]
    logging.basicConfig(level=logging.ERROR)
    print(f"machine: {machine()}")
    print(
        "| rooms | server | finals complete | result→final p50 s | p99 s | max s "
        "| bot events | 429s | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="agy-bench-matrix-") as tmp_name:
        tmp = Path(tmp_name)
        servers = {
            "default rc_message": start_synapse(
                python, tmp / "limited", default_limits=("rc_message",)
            ),
            "no limits (baseline)": start_synapse(python, tmp / "unlimited"),
        }
        status = 0
        try:
            for rooms in levels:
                for name, synapse in servers.items():
                    level = anyio.run(run_level, synapse, name, rooms, args.quick, tmp)
                    print(_row(level), flush=True)
                    if level.complete != rooms:
                        status = 1
        finally:
            for synapse in servers.values():
                synapse.stop()
    return status


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
