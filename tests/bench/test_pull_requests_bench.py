"""bench.pull_requests runs at its smallest size and prints its table (no speed is checked)."""

from __future__ import annotations

import pytest

from tests.bench.test_bench_smoke import run_quick, tables

pytestmark = pytest.mark.slow


def test_pull_requests_bench_prints_its_rows() -> None:
    rows = {row[0]: row for row in tables(run_quick("pull_requests")["pull_requests"], "path")[0]}
    assert "`!pr` → link posted" in rows and "plain push + POST (baseline)" in rows
    for row in rows.values():
        float(row[1])
