"""bench.scale's own arithmetic (the runs themselves: test_bench_smoke.py)."""

from __future__ import annotations

import pytest

from bench.scale import LevelResult, RoundResult, best_of, per_thousand, without_setup


def _run(cold: float, warm: float, *, errors: int = 0, rss: int = 100, inode: float = 50.0):
    return LevelResult(
        "bridge",
        200,
        rounds=[
            RoundResult("cold", cpu=cold, deltas=20_000, errors=errors),
            RoundResult("warm", cpu=warm, deltas=20_000),
        ],
        rss_sessions=rss,
        rss_peak=rss + 10,
        inode_us=inode,
    )


def test_each_round_comes_from_the_run_where_it_cost_least() -> None:
    best = best_of([_run(1.5, 0.30, rss=110, errors=1), _run(1.1, 0.34), _run(1.3, 0.28)])
    assert [(r.label, r.cpu) for r in best.rounds] == [("cold", 1.1), ("warm", 0.28)]
    # Every run's errors count, whichever run a round comes from.
    assert best.rounds[0].errors == 1
    assert best.rss_sessions == 110  # memory: the most any run held
    assert best.rss_peak == 120
    assert best.inode_us == 50.0


def test_one_run_is_itself() -> None:
    run = _run(1.2, 0.3)
    assert best_of([run]) == run


def test_the_direct_variants_files_can_be_left_out_of_its_cold_round() -> None:
    cold = RoundResult("cold", cpu=0.5, deltas=20_000, setup_cpu=0.2)
    assert per_thousand(cold) == pytest.approx(25.0)
    assert per_thousand(without_setup(cold)) == pytest.approx(15.0)
    assert without_setup(cold).setup_cpu == 0.2  # what was left out stays on record
