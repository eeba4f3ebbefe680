"""Where agy's SIGINT goes (through a sandbox wrapper to agy itself), draining a process on its
way out, and the run-marker check that guards ending a group after a restart. Stand-in agy
scripts: no simulator.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bridge.agy.process import ProcessExit, _carries_marker, open_agy, reap_group
from tests.agy.stand_in import PROLOGUE, stand_in

pytestmark = pytest.mark.anyio

# init, then on the first stdin line: two steps and exit 4 (an agy on its way out).
DYING = r"""
import json, sys
out = sys.stdout.buffer
def emit(obj):
    out.write(json.dumps(obj).encode() + b"\n"); out.flush()
emit({"event": "init", "conversation_id": "c-1", "init": {}})
sys.stdin.readline()
for text in ("one", "two"):
    emit({"event": "step_update", "step_update": {"step_type": "agent_response",
          "state": "ACTIVE", "text_delta": text}})
sys.exit(4)
"""

# init, then waits; SIGINT is noted on stderr and ignored (so only the target sees it).
WAITING = r"""
import json, signal, sys, time
signal.signal(signal.SIGINT, lambda *a: (sys.stderr.write("agy got SIGINT\n"), sys.stderr.flush()))
sys.stdout.write(json.dumps({"event": "init", "conversation_id": "c-1", "init": {}}) + "\n")
sys.stdout.flush()
sys.stdin.readline()
"""


async def test_drain_reads_on_until_agy_has_exited(tmp_path: Path) -> None:
    async with open_agy(stand_in(tmp_path, DYING), lambda reason: None) as proc:
        await proc.send_turn(["go"])
        with anyio.fail_after(20):
            await proc.drain()
        assert not proc.alive
        assert proc.exit == ProcessExit(4, "")
        assert await proc.next() == proc.exit, "after the exit, the exit again"


async def test_sigint_goes_to_the_process_the_wrapper_names(tmp_path: Path) -> None:
    """A sandbox wrapper does not forward signals: ``signal_pid`` maps the wrapper's pid to
    agy's, and that one gets the SIGINT, not the wrapper."""
    # Default SIGINT handling whatever this test inherited (a runner may ignore SIGINT).
    # It says when its handler is set: a SIGINT during Python's start-up would end it with a
    # KeyboardInterrupt (exit 1), not by the signal.
    sleeper = (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "print('ready', flush=True); time.sleep(60)"
    )
    target = await anyio.open_process(
        [sys.executable, "-c", sleeper], start_new_session=True, stdout=subprocess.PIPE
    )
    assert target.stdout is not None
    with anyio.fail_after(20):
        assert (await target.stdout.receive()).startswith(b"ready")
    asked: list[int] = []

    def agys_pid(wrapper: int) -> int | None:
        asked.append(wrapper)
        return target.pid

    try:
        async with open_agy(
            stand_in(tmp_path, WAITING, signal_pid=agys_pid), lambda r: None
        ) as proc:
            proc.interrupt()
            with anyio.fail_after(20):
                await target.wait()
            assert target.returncode == -signal.SIGINT
            assert asked == [proc.pid]
            assert proc.alive, "the wrapper itself was not signalled"
        assert "agy got SIGINT" not in proc.stderr_tail()
    finally:
        if target.returncode is None:
            target.kill()
        await target.aclose()


async def test_without_a_mapping_sigint_goes_to_the_process_itself(tmp_path: Path) -> None:
    async with open_agy(
        stand_in(tmp_path, WAITING, signal_pid=lambda pid: None), lambda r: None
    ) as p:
        p.interrupt()
        with anyio.fail_after(20):
            while "agy got SIGINT" not in p.stderr_tail():
                await anyio.sleep(0.02)
        assert p.alive


def test_a_process_that_is_gone_carries_no_marker() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert _carries_marker(gone.pid, "any-marker") is False
    assert _carries_marker(os.getpid(), "not-this-run") is False


async def test_a_group_that_is_gone_is_not_reaped() -> None:
    gone = await anyio.open_process([sys.executable, "-c", "pass"], start_new_session=True)
    await gone.wait()
    assert await reap_group(gone.pid, "any-marker") is False


# init; on the first stdin line, three steps and a result in one write.
BURST = (
    PROLOGUE
    + r"""
steps = [line({"event": "step_update", "step_update": {"step_type": "agent_response",
         "state": "ACTIVE", "text_delta": t}}) for t in ("a", "b", "c")]
out.write(b"".join(steps) + line({"event": "result", "result": {"status": "SUCCESS",
          "response": "abc"}})); out.flush()
sys.stdin.readline()
"""
)


async def test_events_printed_together_come_as_one_batch_up_to_the_result(
    tmp_path: Path,
) -> None:
    from bridge.agy import wire

    async with open_agy(stand_in(tmp_path, BURST), lambda reason: None) as proc:
        await proc.send_turn(["go"])
        with anyio.fail_after(20):
            batch = await proc.next_batch()
        assert [type(e) for e in batch] == [wire.StepUpdateEvent] * 3 + [wire.ResultEvent]
        texts = [e.step_update.text_delta for e in batch if isinstance(e, wire.StepUpdateEvent)]
        assert texts == ["a", "b", "c"]
