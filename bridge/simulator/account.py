"""The simulated login: where the simulator keeps its state, and whether agy may run.

Like agy, the simulator keeps its login as a file in its state directory (``$AGY_SIM_HOME``,
default ``~/.agy-sim``), beside its conversations: ``sim-login.json``, a JSON object whose
``account`` names who signed in. Without that file (or with one that is not such an object)
agy is signed out: it fails before ``init``, writes its error on stderr, answers an ERROR
``result`` with an empty conversation id and exits 1, whatever ``--conversation`` asked for
(the conversation is not touched). ``"quota": true`` in the login is an account whose quota is
used up. ``AGY_SIM_SIGNED_OUT=1`` signs it out whatever the file says.

The login carries an ``expiry`` (seconds since the epoch) as agy's token does. A process that
finds it past refreshes it, as agy refreshes its access token, and writes the file back
(atomically: a temporary file renamed over it). When that write fails (a read-only login, as
in a thread's sandbox) it says so on stderr and runs on with the refreshed login in memory.

``agy auth login`` (here: ``python -m bridge.simulator auth login``) signs in.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bridge.simulator.atomic import replace_file

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from typing import Any

LOGIN_FILE = "sim-login.json"
SIGNED_OUT_ERROR = "Please sign in: run `agy` once in a terminal to log in"
QUOTA_ERROR = (
    "Individual quota reached for this account. Your quota resets at a later time; "
    "upgrade your plan for more."
)
TOKEN_LIFETIME = 3600.0
DEFAULT_ACCOUNT = "simulated-user@agy-sim.invalid"


def sim_home() -> Path:
    configured = os.environ.get("AGY_SIM_HOME")
    return Path(configured) if configured else Path.home() / ".agy-sim"


def login_path() -> Path:
    return sim_home() / LOGIN_FILE


def read_login() -> dict[str, Any] | None:
    """The login as stored, or None when signed out (no file, or not a login)."""
    try:
        data = json.loads(login_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("account"), str):
        return None
    return data if data["account"] else None


def account_error() -> str | None:
    """agy's words when the account cannot run a turn now, else ``None`` (refreshing an
    expired login on the way, as agy refreshes its token)."""
    if os.environ.get("AGY_SIM_SIGNED_OUT") == "1":
        return SIGNED_OUT_ERROR
    login = read_login()
    if login is None:
        return SIGNED_OUT_ERROR
    if login.get("quota") is True:
        return QUOTA_ERROR
    expiry = login.get("expiry")
    if isinstance(expiry, (int, float)) and expiry < time.time():
        refresh(login)
    return None


def refresh(login: dict[str, Any]) -> None:
    refreshed = {
        **login,
        "expiry": time.time() + TOKEN_LIFETIME,
        "refreshes": int(login.get("refreshes", 0)) + 1,
    }
    try:
        write_login(refreshed)
    except OSError as exc:
        sys.stderr.write(
            f"warning: could not save the refreshed login ({exc}); using it for this process\n"
        )


def write_login(login: dict[str, Any]) -> None:
    path = login_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(login).encode("utf-8"), prefix=".login-", sync=False)


def sign_in(account: str = DEFAULT_ACCOUNT) -> str:
    """``agy auth login``: keep a login that is there, else write one. Returns the account."""
    login = read_login()
    if login is not None:
        return str(login["account"])
    write_login({"account": account, "expiry": time.time() + TOKEN_LIFETIME})
    return account
