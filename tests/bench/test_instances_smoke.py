"""bench.instances runs at its smallest size and prints its three tables (speed not checked).

The three measurements run as three test items, so the workers run them side by side. The
overhead part starts its own server (fsync on), as a developer runs the benchmark; the other two
take a fresh database of the suite's PostgreSQL (`--postgres`), which saves starting two more.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import Postgres

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run_bench(part: str, postgres: Postgres | None = None) -> str:
    shared = ["--postgres", postgres.url()] if postgres is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "bench.instances", "--quick", "--only", part, *shared],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_instances_bench_prints_overhead(postgres: Postgres) -> None:
    # ``postgres`` only decides whether this can run here: the benchmark starts its own server.
    out = run_bench("overhead")
    assert "| core, SQLite " in out and "| core, PostgreSQL " in out
    assert "PostgreSQL adds " in out and "takeover after SIGKILL" not in out


def test_instances_bench_prints_takeover(postgres: Postgres) -> None:
    out = run_bench("takeover", postgres)
    assert "takeover after SIGKILL" in out and "worst: lease +" in out


def test_instances_bench_prints_inbox_rates(postgres: Postgres) -> None:
    out = run_bench("inbox", postgres)
    inbox = out.split("messages per second into the shared inbox", 1)[1].splitlines()
    rates = [line for line in inbox if line.startswith(("| 1 ", "| 2 "))]
    assert len(rates) == 2 and all(float(r.split("|")[2]) > 0 for r in rates)
