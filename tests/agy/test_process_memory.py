"""What an idle agy process keeps in the bridge's memory: nothing of its last answer.

A session waits for its next message with its reader parked on the next read of agy's stdout.
Whatever that reader still referenced from the read before (the bytes, the split lines, the
parsed events) would stay alive for as long as the session idles: one read's worth per session,
up to a pipe's 64 KiB and several times that parsed, for each of hundreds of idle sessions.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import anyio
import pytest

from bridge.agy import wire
from bridge.agy.process import (
    READ_AHEAD,
    STDERR_TAIL_BYTES,
    AgyProcess,
    open_agy,
)
from tests.agy.stand_in import PROLOGUE, stand_in

pytestmark = pytest.mark.anyio
# The most one read of a pipe returns (anyio's default receive size).
PIPE_BYTES = 65536

# A stand-in agy that prints a whole answer and its result in one write (so one read of the
# bridge holds them all, as with a fast agy), then idles until stdin closes.
SCRIPT = (
    PROLOGUE
    + r"""
delta = {"event": "step_update", "step_update": {"step_type": "agent_response",
         "state": "ACTIVE", "text_delta": "word "}}
result = {"event": "result", "result": {"status": "OK", "response": "done"}}
out.write(b"".join([line(delta)] * 40 + [line(result)])); out.flush()
sys.stdin.readline()
"""
)


def live_events() -> int:
    gc.collect()
    return sum(isinstance(o, (wire.StepUpdateEvent, wire.ResultEvent)) for o in gc.get_objects())


def live_line_lists() -> int:
    """Lists holding the answer's raw lines (the bytes themselves are not tracked by gc)."""
    return sum(
        isinstance(o, list) and any(isinstance(x, bytes) and b"text_delta" in x for x in o)
        for o in gc.get_objects()
    )


async def deltas_until_result(proc: object) -> tuple[int, wire.ResultInfo]:
    """How many text deltas came before the result, and the result."""
    deltas = 0
    while not isinstance(out := await proc.next(), wire.ResultEvent):  # type: ignore[attr-defined]
        assert isinstance(out, wire.StepUpdateEvent), out
        deltas += 1
    return deltas, out.result


async def test_an_idle_process_holds_no_event_of_its_last_read(tmp_path: Path) -> None:
    spec = stand_in(tmp_path, SCRIPT)
    async with open_agy(spec, lambda bad: None) as proc:
        before = live_events()
        await proc.send_turn(["go"])
        deltas, result = await deltas_until_result(proc)
        assert deltas == 40 and result.response == "done"
        # The reader has handed the batch over and waits on the pipe again.
        await anyio.sleep(0.1)
        assert live_events() == before
        assert live_line_lists() == 0


# A stand-in agy that answers with far more than the reader may hold, as fast as it can, and
# leaves when its stdin closes.
FLOOD = (
    PROLOGUE
    + r"""
delta = line({"event": "step_update", "step_update": {"step_type": "agent_response",
              "state": "ACTIVE", "text_delta": "word "}})
for _ in range(200):
    out.write(delta * 100); out.flush()
out.write(line({"event": "result", "result": {"status": "OK", "response": "done"}}))
out.flush()
sys.stdin.readline()
"""
)


async def test_a_reader_ahead_of_its_turn_stops_and_agy_waits(tmp_path: Path) -> None:
    spec = stand_in(tmp_path, FLOOD)
    async with open_agy(spec, lambda bad: None) as proc:
        before = live_events()
        await proc.send_turn(["go"])
        # Nobody takes the answer for a while: the reader may read only READ_AHEAD pipe reads
        # (and the one in its hands) ahead; agy's 20,000 lines wait in its pipe and in agy.
        await anyio.sleep(1.0)
        held = live_events() - before
        # Each of the lines is over 100 bytes long; most of the answer is still in agy.
        assert 0 < held <= (READ_AHEAD + 1) * PIPE_BYTES // 100, held
        assert held < 20_000 // 2, held
        # Nothing is lost by waiting: every delta and the result come, in order.
        deltas, result = await deltas_until_result(proc)
        assert deltas == 20_000 and result.response == "done"


async def test_a_process_closed_mid_answer_still_leaves_on_its_own(tmp_path: Path) -> None:
    """Nobody takes the answer (the turn was cancelled, the bridge stops): the reader must not
    leave agy stuck on a full pipe, where it cannot see its stdin close and is killed."""
    spec = stand_in(tmp_path, FLOOD, stop_grace=5)  # FLOOD leaves when its stdin closes
    async with open_agy(spec, lambda bad: None) as proc:
        await proc.send_turn(["go"])
        await anyio.sleep(0.5)  # agy is blocked on its full pipe
    assert isinstance(proc, AgyProcess)
    assert proc.process.returncode == 0  # its own exit, not SIGTERM's


# A stand-in agy that logs 16 MiB to stderr in large writes, then idles.
CHATTY = r"""
import json, sys
sys.stdout.buffer.write(json.dumps({"event": "init", "conversation_id": "c-1", "init": {}})
                        .encode() + b"\n")
sys.stdout.flush()
block = b"log line that goes on\n" * 3000
for _ in range(256):
    sys.stderr.buffer.write(block)
sys.stderr.buffer.write(b"the last words\n"); sys.stderr.flush()
sys.stdin.readline()
"""


async def test_only_the_tail_of_agys_stderr_is_kept(tmp_path: Path) -> None:
    """agy's stderr is kept for its last words (an exit is described with them), however much
    it logs: not the last 64 reads of up to 64 KiB each."""
    spec = stand_in(tmp_path, CHATTY)
    tracemalloc.start()
    try:
        async with open_agy(spec, lambda bad: None) as proc:
            with anyio.fail_after(20):
                while not proc.stderr_tail().endswith("the last words\n"):
                    await anyio.sleep(0.05)
            gc.collect()
            held, _ = tracemalloc.get_traced_memory()
            assert len(proc.stderr_tail().encode()) <= STDERR_TAIL_BYTES
    finally:
        tracemalloc.stop()
    # Everything this test allocated and still holds, the process object included.
    assert held < 1024 * 1024, held
