"""The fault tests' shared parts: the zygote their bridges are forked from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.forked import Zygote
from tests.faults.forked import zygote as open_zygote


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """One per worker, started by the first test that asks (its imports cost one start)."""
    yield from open_zygote()
