"""Stand-in agy programs for the process tests: a few lines of Python, run by this Python."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bridge.agy.process import ProcessSpec

# What every stand-in starts with: ``line(obj)`` makes a stdout line; it prints init and waits
# for the first turn's line on stdin.
PROLOGUE = r"""
import json, sys
out = sys.stdout.buffer
def line(obj):
    return json.dumps(obj).encode() + b"\n"
out.write(line({"event": "init", "conversation_id": "c-1", "init": {}})); out.flush()
sys.stdin.readline()
"""


def stand_in(tmp_path: Path, script: str, **kwargs: object) -> ProcessSpec:
    """``script`` as agy (``stop_grace`` 2 s unless given)."""
    settings: dict[str, object] = {"init_timeout": 20, "stop_grace": 2, **kwargs}
    return ProcessSpec(
        argv=[sys.executable, "-c", script],
        env={"PATH": os.environ.get("PATH", "")},
        cwd=tmp_path,
        **settings,  # type: ignore[arg-type]
    )
