"""The collection order: each worker's first share starts with its part of the slow tier."""

from __future__ import annotations

from tests.ordering import shares, spread_slow


def _slow(name: str) -> bool:
    return name.startswith("s")


def test_each_share_starts_with_its_slow_tests_and_the_order_is_a_permutation() -> None:
    items = [f"q{n}" for n in range(40)] + [f"s{n}" for n in range(7)] + [f"q{n}" for n in (40, 41)]
    ordered = spread_slow(items, _slow, 3)
    assert sorted(ordered) == sorted(items)
    starts = [0, *[sum(shares(len(items), 3)[:k]) for k in (1, 2)]]
    firsts = [ordered[start : start + 3] for start in starts]
    # Dealt in turn: s0, s3, s6 to the first worker; s1, s4 to the second; s2, s5 to the third.
    # Then each fills its share (16, 16, 17) with quick ones in order: q0-q12, q13-q26, q27-.
    assert firsts == [["s0", "s3", "s6"], ["s1", "s4", "q13"], ["s2", "s5", "q27"]]
    # The quick ones keep their order.
    assert [item for item in ordered if not _slow(item)] == [i for i in items if not _slow(i)]


def test_the_shares_are_worksteals_first_split() -> None:
    # 49 tests over 3 workers: 16, then 33 // 2 = 16, then 17 (the last gets what is left).
    assert shares(49, 3) == [16, 16, 17]
    assert sum(shares(2951, 6)) == 2951


def test_one_worker_runs_the_slow_tier_first() -> None:
    assert spread_slow(["q1", "s1", "q2", "s2"], _slow, 1) == ["s1", "s2", "q1", "q2"]


def test_a_run_smaller_than_its_slow_tier_keeps_every_test() -> None:
    ordered = spread_slow(["s1", "s2", "s3", "q1"], _slow, 4)
    assert sorted(ordered) == ["q1", "s1", "s2", "s3"]
