"""A stop while a request waits: agy is sent SIGINT, then the deny. The two reach agy on
separate paths (a signal, the hook's HTTP reply), so the deny is held until agy's turn is over:
given at once, agy could read it first and carry on with its turn as if nobody had stopped it
(seen as a turn that ended with "the turn was stopped by bob" as a tool error and no
interruption, one run in about fifty under load)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.lowlevel
import pytest

from bridge.core.approvals import gate as gate_module
from bridge.core.turn import TurnRunner
from tests.core.approvals.test_gate import approvals, request, workdir
from tests.core.harness import Harness, running

pytestmark = pytest.mark.anyio


def defer_interrupts(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], object]]:
    """SIGINTs the bridge sends, held for the test to send: an agy that has not acted on the
    interrupt yet (busy, or its signal not yet handled) for as long as the test wants."""
    held: list[Callable[[], object]] = []
    real = TurnRunner.interrupt

    def deferred(self: TurnRunner, by: str) -> bool:
        held.append(lambda: real(self, by))
        return True

    monkeypatch.setattr(TurnRunner, "interrupt", deferred)
    return held


def gate_of(h: Harness) -> Any:
    [actor] = h.bridge.core.threads.values()
    return actor.work.gate


async def test_the_deny_of_a_stop_waits_until_agy_has_acted_on_the_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = defer_interrupts(monkeypatch)
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch stopped.txt]]")
        await request(h)
        gate = gate_of(h)
        await h.say("!stop", who="bob")
        await h.adapter.changes.until(lambda: "req-1" in h.adapter.settled)
        assert h.adapter.settled["req-1"].state == "stopped"
        for _ in range(20):  # time for a deny already given to reach the hook's reply
            await anyio.lowlevel.checkpoint()
        assert gate.waiting is not None, "the deny went to agy before it acted on the SIGINT"
        [interrupt] = held
        interrupt()  # agy acts on it now
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.interrupted
        assert "the turn was stopped" not in reply.outcome.final_text, "agy read the deny"
        assert not (workdir(h) / "stopped.txt").exists()


async def test_an_agy_that_does_not_act_on_the_interrupt_still_gets_the_deny(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = defer_interrupts(monkeypatch)
    monkeypatch.setattr(gate_module, "STOP_GRACE", 0.2)
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch stopped.txt]]")
        await request(h)
        await h.say("!stop", who="bob")
        [reply] = await h.adapter.wait_finished(1)  # never interrupted: the deny ends it
        assert len(held) == 1
        assert reply.outcome is not None and not reply.outcome.interrupted
        assert "the turn was stopped by" in reply.outcome.final_text
        assert h.adapter.settled["req-1"].state == "stopped"
        assert not (workdir(h) / "stopped.txt").exists()
