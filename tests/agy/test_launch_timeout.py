"""agy's own turn deadline at its edges (found by mutation testing, see docs/testing.md)."""

from __future__ import annotations

import pytest

from bridge.agy.launch import print_timeout


@pytest.mark.parametrize(("ours", "theirs"), [(121, "61s"), (2, "1s"), (1, "1s"), (0.5, "1s")])
def test_print_timeout_edges(ours: float, theirs: str) -> None:
    assert print_timeout(ours) == theirs
