"""The order the suite is collected in: the slow tier spread over the workers' first tests.

pytest-xdist's worksteal hands worker k the k-th contiguous share of the collection (the first
share to the first worker, each the rest divided by the workers left) and lets an idle worker
take the second half of the longest queue. With the slow tier (about 50 tests of 5 to 25 s) all
at the front, the first worker's share held every one of them: it ran them one after the other
while the others ran quick tests, and what the others took from it came from its end. A long
test still waiting there late kept one worker busy while the rest had finished.

Here each share starts with its own slow tests, dealt out in turn, so every worker begins with
one and the long ones run side by side from the start, while the quick ones even out the end
(a thief takes the end of a queue: quick tests). Every worker computes the same order from the
same collection and worker count, so the collections still agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice
from typing import TypeVar

T = TypeVar("T")


def shares(total: int, workers: int) -> list[int]:
    """The sizes of worksteal's first shares: each worker in turn gets what is left divided by
    the workers left (pytest-xdist's WorkStealingScheduling.check_schedule)."""
    sizes = []
    left = total
    for k in range(workers):
        size = left // (workers - k)
        sizes.append(size)
        left -= size
    return sizes


def spread_slow(items: Sequence[T], is_slow: Callable[[T], bool], workers: int) -> list[T]:
    """``items`` in the order that starts each worker's share with its part of the slow ones
    (dealt in turn, each keeping its collection order), the others after them in their order."""
    slow = [item for item in items if is_slow(item)]
    quick = [item for item in items if not is_slow(item)]
    if workers <= 1:
        return slow + quick
    dealt: list[list[T]] = [slow[k::workers] for k in range(workers)]
    ordered: list[T] = []
    rest = iter(quick)
    for k, size in enumerate(shares(len(items), workers)):
        # A share smaller than its slow part (a tiny run) keeps them all: the order stays a
        # permutation, the shares only move.
        ordered += dealt[k] + list(islice(rest, max(0, size - len(dealt[k]))))
    ordered += list(rest)
    return ordered
