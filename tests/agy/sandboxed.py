"""A bridge whose agy processes (the simulator) run in bubblewrap sandboxes, and its checks.

bubblewrap is a system package: ``make test`` installs it where it can (root and apt-get). Where
it cannot be had, these tests are skipped with the reason, except in CI (``CI=true``), where
they fail: CI must run them all.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from bridge.agy.sandbox import bwrap_problem, find_bwrap
from bridge.app import open_bridge
from bridge.config import load_config
from bridge.core.events import ThreadRef
from bridge.core.workspaces import place_for
from tests.core.harness import SIMULATOR, SIMULATOR_ENV, Harness, RecordingAdapter
from tests.doubles import signed_in


@cache
def _problem() -> str | None:
    return bwrap_problem(find_bwrap())


def require_bwrap() -> None:
    """Skip (fail in CI) when bubblewrap cannot sandbox anything on this machine."""
    problem = _problem()
    if problem is None:
        return
    reason = f"sandbox test not run: {problem}"
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} (CI must run every sandbox test: install bubblewrap)")
    pytest.skip(reason)


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def write_config(
    root: Path,
    *,
    workspaces: list[dict[str, Any]] | None = None,
    data: str = "data",
    agy: dict[str, Any] | None = None,
    store: dict[str, Any] | None = None,
    approvals: dict[str, Any] | None = None,
) -> Path:
    """``root/etc/config.toml`` (with a secret in it) whose data directory is ``root/data``.

    agy's state directories are ``root/gemini`` (in place of ``~/.gemini``) and the simulator's
    home ``root/sim-home``, where the simulator is signed in."""
    sim_home = signed_in(root / "sim-home")
    # agy's shared state exists (the operator signed agy in once): the bridge refuses a
    # sandbox whose state directory is missing.
    (root / "gemini").mkdir(parents=True, exist_ok=True)
    settings = {
        "command": SIMULATOR,
        "init_timeout": 20,
        "stop_grace": 2,
        "isolation": "bwrap",
        "env": {"AGY_SIM_HOME": str(sim_home)},
        "pass_env": SIMULATOR_ENV,
        "state_dirs": [str(root / "gemini")],
        **(agy or {}),
    }
    lines = [
        "[bridge]",
        f"data_dir = {json.dumps(str(root / data))}",
        # These tests run tools freely unless they turn the gate on.
        "[approvals]",
        *(f"{k} = {_toml(v)}" for k, v in (approvals or {"mode": "off"}).items()),
        "[agy]",
        *(f"{key} = {_toml(value)}" for key, value in settings.items()),
        "[slack]",
        f"bot_token = {json.dumps('xoxb-config-secret-' + secrets.token_hex(8))}",
        "enabled = false",
    ]
    if store:
        lines += ["[store]", *(f"{k} = {_toml(v)}" for k, v in store.items())]
    for workspace in workspaces or []:
        lines += ["[[workspaces]]", *(f"{k} = {_toml(v)}" for k, v in workspace.items())]
    path = root / "etc" / ("config.toml" if data == "data" else f"{data}.toml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Sandboxed:
    h: Harness
    config_path: Path
    runs: int = 0

    @property
    def sim_home(self) -> Path:
        """The simulator's shared state directory (its home, holding its login)."""
        return self.h.tmp / "sim-home"

    @property
    def gemini(self) -> Path:
        """The shared state directory in place of ``~/.gemini``."""
        return self.h.tmp / "gemini"

    @property
    def data_dir(self) -> Path:
        return self.h.bridge.config.bridge.data_dir.resolve()

    def workdir(self, where: ThreadRef) -> Path:
        return place_for(self.h.bridge.config, where).workdir

    def session_dir(self, where: ThreadRef) -> Path:
        return place_for(self.h.bridge.config, where).session_dir

    async def turn(self, where: ThreadRef, text: str) -> None:
        """One turn in ``where``, waited for until its reply is finished (without error)."""
        done = len(self.h.adapter.finished(where)) + 1
        await self.h.say(text, where=where)
        replies = await self.h.adapter.wait_finished(done, where)
        outcome = replies[-1].outcome
        assert outcome is not None and outcome.error is None, outcome

    async def run(self, where: ThreadRef, command: str) -> str:
        """What ``command`` printed (and its exit status) when the agent ran it in ``where``.

        The agent writes both to a file in its own workspace; the test reads it from outside.
        """
        self.runs += 1
        out = f".sandbox-out-{self.runs}"
        await self.turn(
            where, f"[[tool run_command ( {command} ) > {out} 2>&1; echo rc=$? >> {out}]]"
        )
        return (self.workdir(where) / out).read_text()


@asynccontextmanager
async def sandboxed_bridge(
    tmp: Path,
    *,
    workspaces: list[dict[str, Any]] | None = None,
    data: str = "data",
    agy: dict[str, Any] | None = None,
    store: dict[str, Any] | None = None,
    approvals: dict[str, Any] | None = None,
) -> AsyncIterator[Sandboxed]:
    require_bwrap()
    path = write_config(
        tmp, workspaces=workspaces, data=data, agy=agy, store=store, approvals=approvals
    )
    config = load_config(path, environ={})
    adapter = RecordingAdapter()
    async with open_bridge(config, {"test": adapter}) as bridge:
        wanted = (agy or {}).get("isolation", "bwrap") == "bwrap"
        assert bridge.runtime.isolation.isolated == wanted, bridge.runtime.isolation.problem
        await bridge.core.recover()
        yield Sandboxed(Harness(bridge, adapter, tmp), path)
