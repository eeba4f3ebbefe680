"""Each test's own deadline (pytest-timeout's), for the hang guards inside a test.

A hang guard inside a test (how long to wait for a subprocess's next line, for its exit) is
there so that a hang fails with a message that says what hung, not with pytest-timeout's stack
dump. A fixed number of seconds for it is a second, shorter deadline over work that grows with
the machine's load: beside other workers a guard of 15 s ran out on a turn that took longer,
while the test had 120 s. So such a guard waits until shortly before the test's own deadline
instead: as long as the test may take, and still first to say what hung. Loaded by
tests/conftest.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

DEADLINE = pytest.StashKey[float]()
# Left for the guard's message and the test's tear-down (killing its subprocesses) before
# pytest-timeout's own deadline.
MARGIN = 10.0
# With no pytest-timeout deadline (``--timeout=0``, a ``timeout(0)`` marker) a guard still
# ends a hang: after the suite's default test timeout (pyproject.toml).
UNTIMED = 120.0
# A guard whose test is past its deadline still looks once.
AT_LEAST = 0.5


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Note when pytest-timeout's timer for this test runs out; returns nothing, so its own
    implementation still sets the timer."""
    item.config.stash[DEADLINE] = time.monotonic() + settings.timeout


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    """The test's deadline is over: the next test may have none."""
    if DEADLINE in item.config.stash:
        del item.config.stash[DEADLINE]


@dataclass(frozen=True)
class Deadline:
    """The running test's deadline, read when asked: a module-scoped fixture's subprocess
    serves several tests, each with its own."""

    config: pytest.Config

    def seconds_left(self) -> float:
        """How long a hang guard may wait now: until ``MARGIN`` before the test's deadline."""
        deadline = self.config.stash.get(DEADLINE, None)
        if deadline is None:
            return UNTIMED
        return max(deadline - time.monotonic() - MARGIN, AT_LEAST)


@pytest.fixture
def deadline(request: pytest.FixtureRequest) -> Deadline:
    return Deadline(request.config)
