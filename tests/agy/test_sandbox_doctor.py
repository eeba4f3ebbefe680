"""``agy-bridge doctor`` on isolation: the probe inside a sandbox, and loud words without one.

The live turn inside the sandbox runs the command as its own process (``python -m bridge doctor
--live``), as an operator does; the other tests run the same command line in this process
(:func:`bridge.cli.main`, the environment set as the process would get it): they check the
report and the exit status, and a start of ``python -m bridge`` is 1 s of CPU that proves
nothing more. ``--live`` runs every check of a plain ``doctor`` first, the probe inside the
sandbox among them, so that process also runs the probe in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.agy.sandbox import Isolation, Sandbox, find_bwrap
from bridge.config import build_config
from bridge.doctor import Report, _probe_sandbox
from tests.agy.sandboxed import require_bwrap
from tests.agy.test_sandbox import failing_bwrap
from tests.doctor_here import Done, doctor_in_process
from tests.doubles import signed_in

SIM = [sys.executable, "-m", "bridge.simulator"]


def _config(tmp_path: Path, agy: str) -> Path:
    config = tmp_path / "config.toml"
    # The simulator's home is its state directory: it must exist, and reach it by name.
    state = "" if "state_dirs" in agy else "state_dirs = []\n"
    config.write_text(
        f'[bridge]\ndata_dir = "data"\n[agy]\ncommand = {json.dumps(SIM)}\n'
        f'{state}pass_env = ["AGY_SIM_HOME"]\n{agy}\n'
    )
    return config


def _doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``agy-bridge doctor`` as its own process."""
    config = _config(tmp_path, "")
    env = {**os.environ, "AGY_SIM_HOME": str(signed_in(tmp_path / "home"))}
    return subprocess.run(
        [sys.executable, "-m", "bridge", "doctor", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


class DoctorHere:
    """The command line of :func:`_doctor`, run by ``agy-bridge``'s own ``main`` in this
    process with the environment the process would get; its exit status and what it printed."""

    def __init__(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        self.tmp_path, self.monkeypatch, self.capsys = tmp_path, monkeypatch, capsys

    def __call__(
        self,
        *args: str,
        agy: str = "",
        path: str | None = None,
        config: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Done:
        settings: dict[str, str] = {}
        if config is None:
            config = _config(self.tmp_path, agy)
            settings["AGY_SIM_HOME"] = str(signed_in(self.tmp_path / "home"))
        if path is not None:
            settings["PATH"] = path
        settings.update(env or {})
        return doctor_in_process(config, args, settings, self.monkeypatch, self.capsys)


@pytest.fixture
def doctor_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> DoctorHere:
    return DoctorHere(tmp_path, monkeypatch, capsys)


PROBE_LINES = (
    "✓ the thread's workspace is writable inside the sandbox",
    "✓ the bridge's store is not visible inside the sandbox",
    "✓ the config file is not visible inside the sandbox",
    "✓ the listener is reachable from inside the sandbox",
    "✓ the data directory shows nothing but the thread's own folders",
    "✓ agy's executable is visible inside the sandbox",
    "✓ the sandbox's root is read-only",
    "✓ the home directory is read-only inside the sandbox",
    "✓ the sandbox's private /tmp is writable",
)


def test_the_probe_inside_the_sandbox_passes(doctor_here: DoctorHere) -> None:
    require_bwrap()
    done = doctor_here()
    assert done.returncode == 0, done.stdout
    assert "✓ each thread's agy runs in its own bubblewrap sandbox" in done.stdout
    for line in PROBE_LINES:
        assert line in done.stdout


def test_isolation_none_is_said_loudly(doctor_here: DoctorHere) -> None:
    done = doctor_here(agy='isolation = "none"')
    assert done.returncode == 0, done.stdout
    assert "⚠ threads are NOT isolated from each other" in done.stdout
    assert 'isolation = "none"' in done.stdout


def _path_without_bwrap(folder: Path) -> str:
    """A PATH with what the doctor needs (curl, sh, git) and no bwrap."""
    folder.mkdir()
    for tool in ("curl", "sh", "git"):
        found = shutil.which(tool)
        assert found is not None
        (folder / tool).symlink_to(found)
    return str(folder)


def test_a_host_without_bwrap_is_said_loudly(tmp_path: Path, doctor_here: DoctorHere) -> None:
    done = doctor_here(path=_path_without_bwrap(tmp_path / "bin"))
    assert done.returncode == 0, done.stdout
    assert "⚠ threads are NOT isolated" in done.stdout and "not installed" in done.stdout


def test_explicit_bwrap_that_cannot_work_is_a_problem(
    tmp_path: Path, doctor_here: DoctorHere
) -> None:
    folder = tmp_path / "bin"
    failing_bwrap(folder)
    done = doctor_here(agy='isolation = "bwrap"', path=f"{folder}:{os.environ['PATH']}")
    assert done.returncode == 1
    assert "✗ the bridge will refuse to start" in done.stdout
    assert "user namespaces" in done.stdout


@pytest.mark.anyio
async def test_the_probe_notices_a_sandbox_that_shows_the_data_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_bwrap()
    bwrap = find_bwrap()
    assert bwrap is not None
    data = tmp_path / "data"
    data.mkdir()
    (data / "bridge.sqlite3").write_bytes(b"SQLite format 3\x00")
    (data / "sessions").mkdir()
    config = build_config({"bridge": {"data_dir": str(data)}}, environ={})
    # A broken layout: the data directory bound read-only and not listed as hidden.
    leaky = Isolation(sandbox=Sandbox(bwrap=bwrap, install=(data,)))
    report = Report()
    await _probe_sandbox(config, report, leaky, SIM)
    out = capsys.readouterr().out
    assert "✗ NOT so: the bridge's store is not visible inside the sandbox" in out
    assert "also visible: bridge.sqlite3, sessions" in out
    assert "✗ NOT so: the thread's workspace is writable" not in out
    # Nor does it show agy: the probe runs the very mounts a thread gets, agy's included.
    assert "✗ NOT so: agy's executable is visible inside the sandbox" in out
    assert report.failed == 3


@pytest.mark.slow
def test_the_live_turn_runs_inside_the_sandbox(tmp_path: Path) -> None:
    require_bwrap()
    done = _doctor(tmp_path, "--live")
    assert done.returncode == 0, done.stdout + done.stderr
    # The probe, in this fresh interpreter, before the live turn.
    assert "✓ each thread's agy runs in its own bubblewrap sandbox" in done.stdout
    for line in PROBE_LINES:
        assert line in done.stdout
    assert "the live turn runs inside the thread sandbox" in done.stdout
    assert "✓ init arrived: conversation" in done.stdout
    assert "✓ the PreInvocation hook reached the bridge" in done.stdout
    assert "✓ agy contacted the bridge's MCP server (tools/list, tools/call ping)" in done.stdout


def test_the_login_is_checked_as_a_thread_sees_it(tmp_path: Path, doctor_here: DoctorHere) -> None:
    require_bwrap()
    gemini = tmp_path / "gemini"
    gemini.mkdir()
    agy = f"state_dirs = [{json.dumps(str(gemini))}]"
    done = doctor_here(agy=agy)
    assert done.returncode == 0, done.stdout
    assert "✓ agy's login in its state directories: " in done.stdout
    assert "sim-login.json" in done.stdout
    assert "✓ agy is signed in inside a thread's sandbox" in done.stdout
    assert "✓ agy's login is read-only inside a thread's sandbox" in done.stdout
    assert not list((tmp_path / "data" / "doctor").iterdir()), "the probe cleaned up"


def test_a_login_threads_do_not_see_is_a_problem(tmp_path: Path, doctor_here: DoctorHere) -> None:
    """Outside a sandbox agy is signed in; inside, only [agy] login_entries are seen."""
    require_bwrap()
    (tmp_path / "gemini").mkdir()
    agy = f'state_dirs = [{json.dumps(str(tmp_path / "gemini"))}]\nlogin_entries = ["other"]'
    done = doctor_here(agy=agy)
    assert done.returncode == 1
    assert "✓ agy is signed in (`agy models` answers)" in done.stdout
    assert "✗ none of [agy] login_entries is in agy's state directories" in done.stdout
    assert "✗ agy is NOT signed in inside a thread's sandbox" in done.stdout
    assert "Please sign in" in done.stdout


def test_doctor_names_a_sandbox_that_would_hide_agy_itself(
    tmp_path: Path, doctor_here: DoctorHere
) -> None:
    """agy at <dir>/bin/agy, the config at <dir>/config.toml: hiding the config's folder hides
    agy; doctor says so in the words the bridge refuses to start with."""
    require_bwrap()
    agy = tmp_path / "bin" / "agy"
    agy.parent.mkdir()
    agy.write_text(f'#!/bin/sh\nexec {sys.executable} -m bridge.simulator "$@"\n')
    agy.chmod(0o755)
    (tmp_path / "config.toml").write_text(
        f'[bridge]\ndata_dir = "data"\n[agy]\ncommand = [{json.dumps(str(agy))}]\n'
        'state_dirs = []\nisolation = "bwrap"\n'
    )
    done = doctor_here(config=tmp_path / "config.toml")
    assert done.returncode == 1, done.stdout
    assert "✗ the bridge will refuse to start" in done.stdout
    assert f"agy's installation ({tmp_path / 'bin'}" in done.stdout, done.stdout


def test_doctor_lists_what_agy_does_not_inherit(tmp_path: Path, doctor_here: DoctorHere) -> None:
    env = {"PGPASSWORD": "pg-secret-value", "GEMINI_API_KEY": "a-key-value"}
    (tmp_path / "home").mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f'[bridge]\ndata_dir = "data"\n[agy]\ncommand = {json.dumps(SIM)}\n')
    done = doctor_here(config=config, env=env)
    held = next(line for line in done.stdout.splitlines() if "held back from agy (" in line)
    assert "PGPASSWORD" in held and "GEMINI_API_KEY" in held
    assert "pg-secret-value" not in done.stdout and "a-key-value" not in done.stdout
    assert "⚠ GEMINI_API_KEY is set but held back from agy" in done.stdout
    assert "⚠ PGPASSWORD" not in done.stdout
