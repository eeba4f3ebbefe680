"""Edges of one agy process found by mutation testing (docs/testing.md): how an exit is described,
what a bad line does to the lines after it, and agy's last words on stderr."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bridge.agy import wire
from bridge.agy.process import AgyStartError, ProcessExit, ProcessSpec, open_agy

# A stand-in agy: init, junk, an event after the junk, then stderr in pieces and exit 3.
SCRIPT = r"""
import json, sys, time
out = sys.stdout.buffer
def emit(obj):
    out.write(json.dumps(obj).encode() + b"\n"); out.flush()
emit({"event": "init", "conversation_id": "c-1", "init": {}})
sys.stdin.readline()
out.write(b"not json at all\n" + b"x" * 2000 + b"\n"); out.flush()
emit({"event": "step_update", "step_update": {"step_type": "agent_response",
      "state": "ACTIVE", "text_delta": "still read"}})
sys.stderr.buffer.write(b"first part, "); sys.stderr.flush(); time.sleep(0.05)
sys.stderr.buffer.write(b"then \xff bad byte\n"); sys.stderr.flush()
sys.exit(3)
"""


def test_an_exit_is_described_in_words() -> None:
    assert ProcessExit(2, "  panic: boom\n").describe() == "exit code 2: panic: boom"
    assert ProcessExit(0, "").describe() == "exit code 0"
    assert ProcessExit(None, "").describe() == "no exit code"
    assert ProcessExit(None, "gone").describe() == "no exit code: gone"
    assert ProcessExit(-9, "").describe() == "killed by signal 9"
    assert ProcessExit(-15, "bye").describe() == "killed by signal 15: bye"


def test_a_start_error_carries_its_message_and_what_agy_said() -> None:
    result = wire.ResultInfo.model_validate({"status": "ERROR", "error": "unknown model"})
    exc = AgyStartError("error_result", "agy refused", result=result)
    assert str(exc) == "agy refused" and exc.message == "agy refused"
    assert exc.kind == "error_result" and exc.result is result and exc.exit is None


@pytest.mark.anyio
async def test_bad_lines_are_reported_and_reading_goes_on(tmp_path: Path) -> None:
    bad: list[str] = []
    spec = ProcessSpec(
        argv=[sys.executable, "-c", SCRIPT],
        env=dict(os.environ),
        cwd=tmp_path,
        init_timeout=20,
        stop_grace=2,
        max_line_bytes=1024,
    )
    async with open_agy(spec, bad.append) as proc:
        assert proc.conversation_id == "c-1"
        await proc.send_turn(["go"])
        step = await proc.next()
        assert isinstance(step, wire.StepUpdateEvent), step
        assert step.step_update.text_delta == "still read"
        end = await proc.next()
        assert isinstance(end, ProcessExit)
        assert end.code == 3
        assert end.stderr_tail == "first part, then \ufffd bad byte\n"
        assert await proc.next() is end, "every later call gets the same exit"
        assert not proc.alive
    assert bad[0].startswith("not JSON: 'not json at all'")
    assert bad[1] == "line of at least 2000 bytes is over the 1024-byte limit"
