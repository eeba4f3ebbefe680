"""bench.instances runs at its smallest size and prints its three tables (speed not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import Postgres

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_instances_bench_prints_overhead_takeover_and_inbox_rates(postgres: Postgres) -> None:
    # ``postgres`` only decides whether this can run here: the benchmark starts its own server.
    done = subprocess.run(
        [sys.executable, "-m", "bench.instances", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "| core, SQLite " in out and "| core, PostgreSQL " in out
    assert "takeover after SIGKILL" in out and "worst: lease +" in out
    inbox = out.split("messages per second into the shared inbox", 1)[1].splitlines()
    rates = [line for line in inbox if line.startswith(("| 1 ", "| 2 "))]
    assert len(rates) == 2 and all(float(r.split("|")[2]) > 0 for r in rates)
