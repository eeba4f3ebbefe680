"""bench/simulator_cost.py runs one round and prints every process kind beside the bare
interpreter. Nothing here looks at speed: the numbers are only checked to be numbers."""

from __future__ import annotations

import pytest

from bench import simulator_cost


def test_one_round_prints_every_kind_with_its_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulator_cost.main(["--runs", "1"]) == 0
    rows = {
        cells[0]: cells[1:]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ") and not line.startswith("| kind")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    assert set(rows) == {
        "python -c pass",
        "--version",
        "--help",
        "turn",
        "turn + hook",
        "turn + run_command",
    }
    for cpu_ms, _spread, ratio in rows.values():
        assert float(cpu_ms) > 0
        assert ratio.endswith("x") and float(ratio[:-1]) > 0
