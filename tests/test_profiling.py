"""The cost profile and the CPU budget (tests/profiling.py), on a small suite run apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.profiling import Budget, calibrate, cpu_seconds, read_budget

ROOT = Path(__file__).resolve().parents[1]

SUITE = """
import os, subprocess, sys

# A child that computes until it has used BURN seconds of CPU (its own clock: as much on a
# slow machine as on a fast one), which the profile must count.
BURN = "import time\\nwhile time.process_time() < {}: pass"

def test_computes():
    subprocess.run([sys.executable, "-c", BURN.format(os.environ["BURN"])], check=True)

def test_waits():
    import time
    time.sleep(0.3)
"""


def run_suite(tmp_path: Path, *args: str, burn: float = 0.0) -> subprocess.CompletedProcess[str]:
    """A two-test suite with only the profiler loaded (none of this repository's conftest);
    its child computes for ``burn`` CPU seconds (only where the profile's numbers are read).

    No plugin is loaded from the environment's entry points (anyio, pytest-timeout): each cost
    the run's every process about 0.3 s of CPU to import, and the profiler needs none of them.
    pytest-xdist is loaded by name, for the runs that ask for workers (``-n``)."""
    (tmp_path / "test_small.py").write_text(SUITE)
    plugins = ["-p", "tests.profiling", "-p", "no:cacheprovider"]
    if "-n" in args:
        plugins += ["-p", "xdist.plugin"]
    alone = ["-c", "/dev/null", "--rootdir", str(tmp_path)]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-q", *alone, *args, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "BURN": str(burn), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )


def test_a_run_over_its_budget_fails_and_says_so(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "--cpu-budget=0.05")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert "CPU budget EXCEEDED" in done.stdout


def test_the_profile_counts_a_childs_cpu_and_not_a_sleep_within_the_budget(
    tmp_path: Path,
) -> None:
    # 0.15 s of the child's CPU: above the 0.1 s the profile must show, whatever the machine.
    done = run_suite(tmp_path, "--profile", "-n", "2", "--cpu-budget=600", burn=0.15)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU budget: " in done.stdout and "of 600 s" in done.stdout
    rows = {
        line.split()[-1].rsplit("::", 1)[-1]: line.split()
        for line in done.stdout.splitlines()
        if "test_small.py::" in line
    }
    computes, waits = rows["test_computes"], rows["test_waits"]
    assert float(computes[1]) > 0.1, done.stdout  # its child's CPU
    assert float(computes[2]) < 0.1, done.stdout  # none of it the worker's own
    assert float(waits[0]) >= 0.3 and float(waits[1]) < 0.1, done.stdout
    workers = [line.split() for line in done.stdout.splitlines() if line.startswith("gw")]
    assert len(workers) == 2 and sum(int(w[1]) for w in workers) == 2, done.stdout
    assert "workers' CPU total" in done.stdout
    # Each worker's own CPU, and of it what came before its first test (imports, collection).
    for w in workers:
        cpu, own, collection = float(w[2]), float(w[3]), float(w[4])
        assert 0 < collection <= own <= cpu, done.stdout


def test_the_budget_is_read_from_its_line_and_scaled_to_the_reference_machine(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "testing.md"
    doc.write_text("text\n\nCPU budget: 900 s (the reference machine's calibration: 0.070 s)\n")
    assert read_budget(str(doc)) == Budget(900, 0.07)
    assert read_budget("12.5") == Budget(12.5)
    doc.write_text("no budget here\n")
    with pytest.raises(pytest.UsageError):
        read_budget(str(doc))
    # The run's total is scaled by reference / this machine's calibration: the 600 s that hold
    # a run of this suite (above) are far too little next to a reference machine hundreds of
    # times slower.
    slower = tmp_path / "slower.md"
    slower.write_text("CPU budget: 600 s (calibration: 100 s)\n")
    done = run_suite(tmp_path, f"--cpu-budget={slower}")
    assert done.returncode == 1 and "CPU budget EXCEEDED" in done.stdout, done.stdout
    assert "on the reference machine (calibration 100.0 s)" in done.stdout


def test_cpu_seconds_grow_with_work_and_calibration_is_positive() -> None:
    before = cpu_seconds()
    sum(range(3_000_000))
    assert cpu_seconds() > before
    assert calibrate() > 0
