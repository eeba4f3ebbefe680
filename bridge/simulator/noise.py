"""Lines a newer or noisier agy could print, for ``[[garbage]]`` and ``[[bigline]]``."""

from __future__ import annotations

import json

from bridge.simulator.context import Context


def garbage(ctx: Context) -> None:
    emitter = ctx.emitter
    emitter.raw(b"simulated noise: this line is not JSON\n")
    emitter.emit(["simulated", "array", 1])
    emitter.emit({"event": "sim_future_event", "sim_future_event": {"detail": "unknown event"}})
    ctx.step(
        "DONE",
        "sim_future_step",
        sim_extra={"nested": [1, 2, 3]},
        sim_flag=True,
        duration_seconds=0.001,
    )


def bigline(ctx: Context, size: int) -> None:
    overhead = len(json.dumps({"event": "step_update"})) + 200
    ctx.step("DONE", "sim_blob", text_delta="x" * max(1, size - overhead))
