"""What the Slack adapter learnt about agent sessions, kept in the data folder for
``agy-bridge doctor``: its own module, so the doctor reads it without importing Slack's SDK and
aiohttp (about 0.2 s of CPU at every start of the doctor with Slack configured)."""

from __future__ import annotations

import json
import time
from pathlib import Path

# What the adapter writes to its data folder for `agy-bridge doctor`.
STATE_FILE = "slack-agent-sessions.json"


def record_support(data_dir: Path, state: str, reason: str) -> None:
    """Note the workspace's answer; raises ``OSError`` when the folder cannot be written."""
    record = {"state": state, "reason": reason, "at": int(time.time())}
    (data_dir / STATE_FILE).write_text(json.dumps(record), encoding="utf-8")


def recorded_support(data_dir: Path) -> tuple[str, str, int] | None:
    """What a running bridge last learnt from Slack: (state, reason, unix time), or None."""
    try:
        record = json.loads((data_dir / STATE_FILE).read_text(encoding="utf-8"))
        return str(record["state"]), str(record.get("reason") or ""), int(record.get("at") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
