"""The budget-check benchmark runs small and prints its table (nothing here looks at speed)."""

from __future__ import annotations

import pytest

from bench import budget_check

pytestmark = pytest.mark.anyio


async def test_the_budget_check_bench_compares_both_stores() -> None:
    output = await budget_check.run(5, history=300, warmup=2)
    rows = [line for line in output.splitlines() if line.startswith("| ") and "store" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["no history", "300 turns"]
    for row in rows:
        p50, p99 = (float(cell.split()[0]) for cell in row.split("|")[2:4])
        assert 0 < p50 <= p99
    assert "goal: under 1 ms at p50 with 10,000 turns of history" in output
