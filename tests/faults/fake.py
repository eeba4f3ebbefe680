"""Settings that run ``fake_agy.py`` as the bridge's agy, and what it recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FAKE_AGY = [sys.executable, str(Path(__file__).with_name("fake_agy.py"))]


def fake_agy(tmp: Path) -> dict[str, Any]:
    """``[agy]`` settings (for the harness's ``running``) with the fake's control folder."""
    control = tmp / "fake"
    control.mkdir(exist_ok=True)
    return {"command": FAKE_AGY, "env": {"FAKE_AGY_DIR": str(control)}}


def received(tmp: Path) -> list[str]:
    """The text of every turn the fake agy was given, in order."""
    log = tmp / "fake" / "received.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
