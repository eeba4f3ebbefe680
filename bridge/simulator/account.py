"""The simulated login: where the simulator keeps its state, and whether agy may run.

A signed-out agy (or one whose quota is used up) fails before ``init``: it writes its error
on stderr, answers an ERROR ``result`` with an empty conversation id, and exits 1, whatever
``--conversation`` asked for (the conversation is not touched). The state is the file
``$AGY_SIM_HOME/account`` (``signed-out`` or ``quota``; absent or anything else: signed in), so
a test can sign agy out and back in between two processes. ``AGY_SIM_SIGNED_OUT=1`` is the same
as ``signed-out``.
"""

from __future__ import annotations

import os
from pathlib import Path

SIGNED_OUT_ERROR = "Please sign in: run `agy` once in a terminal to log in"
QUOTA_ERROR = (
    "Individual quota reached for this account. Your quota resets at a later time; "
    "upgrade your plan for more."
)
_ERRORS = {"signed-out": SIGNED_OUT_ERROR, "quota": QUOTA_ERROR}


def sim_home() -> Path:
    configured = os.environ.get("AGY_SIM_HOME")
    return Path(configured) if configured else Path.home() / ".agy-sim"


def account_error() -> str | None:
    """agy's words when the account cannot run a turn now, else ``None``."""
    if os.environ.get("AGY_SIM_SIGNED_OUT") == "1":
        return SIGNED_OUT_ERROR
    try:
        state = (sim_home() / "account").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return _ERRORS.get(state)
