"""`agy-bridge doctor` against the simulator: every check, and the live turn.

The live turn runs the command as its own process (``python -m bridge doctor --live``), as an
operator does; every other test runs the same command line in this process
(:func:`bridge.cli.main`): what it checks is the report and the exit status, and a start of
``python -m bridge`` is 1 s of CPU that proves nothing more. ``--live`` runs every check of a
plain ``doctor`` first, in the same order, before it imports anything for the live turn, so that
process also runs the plain checks in a fresh interpreter, as a plain ``doctor`` would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.core.harness import SIMULATOR_ENV
from tests.doctor_here import Done, doctor_in_process
from tests.doubles import signed_in

SIM = [sys.executable, "-m", "bridge.simulator"]


def _config(tmp_path: Path, command: list[str]) -> Path:
    config = tmp_path / "config.toml"
    # The simulator's home is its state directory (it must exist) and reaches it by name.
    (tmp_path / "home").mkdir(exist_ok=True)
    config.write_text(
        f'[bridge]\ndata_dir = "data"\n[agy]\ncommand = {json.dumps(command)}\n'
        f"state_dirs = []\npass_env = {json.dumps(SIMULATOR_ENV)}\n"
    )
    return config


def _doctor(
    tmp_path: Path, *args: str, command: list[str] = SIM, **env: str
) -> subprocess.CompletedProcess[str]:
    """``agy-bridge doctor`` as its own process."""
    config = _config(tmp_path, command)
    return subprocess.run(
        [sys.executable, "-m", "bridge", "doctor", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AGY_SIM_HOME": str(signed_in(tmp_path / "home")), **env},
    )


@pytest.fixture
def doctor_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> Callable[..., Done]:
    """The same command line as :func:`_doctor`, run by ``agy-bridge``'s own ``main`` in this
    process, with the same environment; its exit status and what it printed."""

    def run(*args: str, command: list[str] = SIM, **env: str) -> Done:
        config = _config(tmp_path, command)
        home = {"AGY_SIM_HOME": str(signed_in(tmp_path / "home"))}
        return doctor_in_process(config, args, {**home, **env}, monkeypatch, capsys)

    return run


def test_a_ready_machine_passes(doctor_here: Callable[..., Done]) -> None:
    done = doctor_here()
    assert done.returncode == 0, done.stdout
    assert "✓ agy found" in done.stdout and "--print-timeout" in done.stdout
    assert "✓ agy is signed in" in done.stdout
    assert "answered a hook call made with curl" in done.stdout
    assert "all checks passed" in done.stdout


def test_signed_out_agy_is_a_problem(doctor_here: Callable[..., Done]) -> None:
    done = doctor_here(AGY_SIM_SIGNED_OUT="1")
    assert done.returncode == 1
    assert "Please sign in" in done.stdout and "Sign in once" in done.stdout


def test_missing_agy_is_a_problem(doctor_here: Callable[..., Done]) -> None:
    done = doctor_here(command=["/nonexistent/agy"])
    assert done.returncode == 1 and "✗ agy not found" in done.stdout


@pytest.mark.slow
def test_live_turn_proves_the_plugin_loads(tmp_path: Path) -> None:
    done = _doctor(tmp_path, "--live")
    assert done.returncode == 0, done.stdout + done.stderr
    # The plain checks, in this fresh interpreter, before anything the live turn imports.
    assert "✓ agy found" in done.stdout and "--print-timeout" in done.stdout
    assert "✓ agy is signed in" in done.stdout
    assert "answered a hook call made with curl" in done.stdout
    assert "all checks passed" in done.stdout
    assert "✓ init arrived: conversation" in done.stdout
    assert "✓ the PreInvocation hook reached the bridge" in done.stdout
    assert "✓ agy contacted the bridge's MCP server (tools/list, tools/call ping)" in done.stdout
    assert "✓ the PreToolUse hook asked the bridge before run_command" in done.stdout
    assert "✓ the denied command did not run" in done.stdout
    assert "✓ agy reported the denial" in done.stdout
    assert "✓ the hooks ran before the turn's first tool" in done.stdout
    assert "✓ every tool call of agy's stream was decided by the PreToolUse hook" in done.stdout
    assert not (tmp_path / "data" / "doctor").exists() or not any(
        (tmp_path / "data" / "doctor").iterdir()
    )


def test_doctor_says_which_limits_hold_and_where_the_store_lives(
    tmp_path: Path, doctor_here: Callable[..., Done]
) -> None:
    done = doctor_here()
    out = done.stdout
    # The caps per thread: by cgroups here (root, v1), or rlimits with what they miss.
    assert "each thread capped at 2048 processes and 4 GiB of memory" in out, out
    if "by rlimits only" in out:
        assert "not per thread" in out
    # The network of each sandbox (threads are sandboxed wherever bubblewrap works).
    if "bubblewrap sandbox" in out:
        assert "network of its own" in out or "share the host's network" in out, out
    # The store and the default workspaces share the data directory's filesystem.
    assert f"the store is in {tmp_path / 'data'}" in out, out
    assert "the default workspaces share that filesystem" in out, out


@pytest.mark.slow
def test_live_turn_reports_an_agy_that_runs_no_hooks_in_one_line(
    doctor_here: Callable[..., Done],
) -> None:
    done = doctor_here("--live", AGY_SIM_NO_HOOKS="1")
    assert done.returncode == 1, done.stdout
    [line] = [line for line in done.stdout.splitlines() if "before the turn's first tool" in line]
    assert line.startswith("✗ no hook ran before the turn's first tool")


@pytest.mark.slow
def test_live_turn_reports_an_agy_that_skips_pretooluse_in_one_line(
    doctor_here: Callable[..., Done],
) -> None:
    """A build that runs PreInvocation but not PreToolUse passes the hook proof: the stream's
    tool steps, matched to the gate's calls, show it."""
    done = doctor_here("--live", AGY_SIM_NO_TOOL_HOOKS="1")
    assert done.returncode == 1, done.stdout
    [line] = [line for line in done.stdout.splitlines() if "stream" in line]
    assert line.startswith("✗ agy ran 2 tool call(s) the PreToolUse hook never decided"), line
